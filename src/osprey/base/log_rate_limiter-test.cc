// LogRateLimiter with times the test chooses (issue 40, finding 7: bad
// connections may not log without bound).
#include "osprey/base/log_rate_limiter.h"

#include <gtest/gtest.h>

namespace osprey {
namespace {

TEST(LogRateLimiterTest, AtMostACountPerIntervalThenSaysHowManyWereHeldBack) {
  LogRateLimiter limiter(3, MonoDelta::FromSeconds(10));
  const MonoTime t0 = MonoTime::Now();
  std::string suffix;
  int logged = 0;
  for (int i = 0; i < 1000; ++i) {
    if (limiter.Allow(t0 + MonoDelta::FromMilliseconds(i), &suffix)) {
      ++logged;
      EXPECT_EQ("", suffix);
    }
  }
  EXPECT_EQ(3, logged);
  // At the interval's edge: a new interval, and the first line counts the
  // 997 that were not logged.
  ASSERT_TRUE(limiter.Allow(t0 + MonoDelta::FromSeconds(10), &suffix));
  EXPECT_EQ(" (997 more like it were not logged: at most 3 every 10.000s)", suffix);
  ASSERT_TRUE(limiter.Allow(t0 + MonoDelta::FromSeconds(11), &suffix));
  EXPECT_EQ("", suffix);
}

}  // namespace
}  // namespace osprey
