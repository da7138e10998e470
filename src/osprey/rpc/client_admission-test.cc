// The client's overload guards on an injected clock and injected draws:
// SlidingWindowCounts, RetryBudget and ClientThrottle.
#include <gtest/gtest.h>

#include <random>

#include "osprey/base/sliding_window.h"
#include "osprey/rpc/client_throttle.h"
#include "osprey/rpc/outbound_call.h"
#include "osprey/rpc/retry_budget.h"

namespace osprey {
namespace {

MonoTime AtSecond(double seconds) { return MonoTime() + MonoDelta::FromSeconds(1000 + seconds); }

TEST(SlidingWindowCountsTest, CountsOverTheWindowAndForgetsAfterIt) {
  SlidingWindowCounts<2> c(MonoDelta::FromSeconds(10));
  c.Add(AtSecond(0), 0, 5);
  c.Add(AtSecond(4.5), 0);
  c.Add(AtSecond(4.5), 1, 7);
  EXPECT_EQ(6u, c.Sum(AtSecond(5), 0));
  EXPECT_EQ(7u, c.Sum(AtSecond(5), 1));
  // Ten seconds on, the first bucket (0 s to 1 s) has left the window.
  EXPECT_EQ(1u, c.Sum(AtSecond(10.5), 0));
  EXPECT_EQ(0u, c.Sum(AtSecond(15), 0));
  // A bucket reused a window later starts from zero.
  c.Add(AtSecond(20.2), 0);
  EXPECT_EQ(1u, c.Sum(AtSecond(20.5), 0));
}

TEST(RetryBudgetTest, RetriesAreCappedAtTheRatioOfCalls) {
  RetryBudget budget(0.1, 0, MonoDelta::FromSeconds(10));
  EXPECT_FALSE(budget.TryRetry(AtSecond(0)));  // no calls, no minimum: none
  for (int i = 0; i < 100; ++i) budget.RecordCall(AtSecond(0.5));
  int allowed = 0;
  for (int i = 0; i < 50; ++i) allowed += budget.TryRetry(AtSecond(1)) ? 1 : 0;
  EXPECT_EQ(10, allowed);
  EXPECT_EQ(10u, budget.retries_in_window(AtSecond(1)));
  // More calls, more room.
  for (int i = 0; i < 20; ++i) budget.RecordCall(AtSecond(2));
  EXPECT_TRUE(budget.TryRetry(AtSecond(2)));
  EXPECT_TRUE(budget.TryRetry(AtSecond(2)));
  EXPECT_FALSE(budget.TryRetry(AtSecond(2)));
  // A window later both are forgotten.
  EXPECT_FALSE(budget.TryRetry(AtSecond(12.5)));
  for (int i = 0; i < 10; ++i) budget.RecordCall(AtSecond(12.5));
  EXPECT_TRUE(budget.TryRetry(AtSecond(12.5)));
  EXPECT_FALSE(budget.TryRetry(AtSecond(12.5)));
}

// The floor is per second, as Finagle's: 0.3 a second over a 10 s window
// is 3 retries a window whatever the calls.
TEST(RetryBudgetTest, AFloorPerSecondLetsAQuietClientRetry) {
  RetryBudget budget(0.1, 0.3, MonoDelta::FromSeconds(10));
  budget.RecordCall(AtSecond(0));
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += budget.TryRetry(AtSecond(0)) ? 1 : 0;
  EXPECT_EQ(3, allowed);  // 0.3 x 10 + 0.1 x 1, rounded down
}

// The default, 10 a second over 10 s: a client that made no call at all
// may still retry 100 times in a window, not 10.
TEST(RetryBudgetTest, TheDefaultFloorIsTenRetriesASecond) {
  RetryBudget budget(0.1, 10, MonoDelta::FromSeconds(10));
  int allowed = 0;
  for (int i = 0; i < 200; ++i) allowed += budget.TryRetry(AtSecond(0)) ? 1 : 0;
  EXPECT_EQ(100, allowed);
  EXPECT_FALSE(budget.TryRetry(AtSecond(5)));
  EXPECT_TRUE(budget.TryRetry(AtSecond(10.5)));  // the first ones forgotten
}

TEST(ClientThrottleTest, NothingIsRefusedWhileTheServerAcceptsMoreThanOneInK) {
  ClientThrottle t(2.0, MonoDelta::FromSeconds(120));
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(t.ShouldRefuse(AtSecond(0), 0.0));
    if (i % 2 == 0) t.RecordAccepted(AtSecond(0));  // exactly one in two
  }
  EXPECT_EQ(0.0, t.RejectProbability(AtSecond(1)));
}

TEST(ClientThrottleTest, RefusesWithTheFormulasProbability) {
  ClientThrottle t(2.0, MonoDelta::FromSeconds(120));
  // 300 requests, 100 accepted: (300 - 2 x 100) / 301.
  for (int i = 0; i < 300; ++i) {
    t.ShouldRefuse(AtSecond(0), 0.999);
    if (i < 100) t.RecordAccepted(AtSecond(0));
  }
  const double p = 100.0 / 301.0;
  EXPECT_DOUBLE_EQ(p, t.RejectProbability(AtSecond(1)));
  // A draw below p refuses, one at or above does not; both count.
  EXPECT_TRUE(t.ShouldRefuse(AtSecond(1), p - 0.001));
  EXPECT_DOUBLE_EQ(101.0 / 302.0, t.RejectProbability(AtSecond(1)));
  EXPECT_FALSE(t.ShouldRefuse(AtSecond(1), 0.34));
  // Over many draws from a seeded source, the share refused is the
  // probability's (which moves as refused requests count).
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  ClientThrottle steady(2.0, MonoDelta::FromSeconds(120));
  int refused = 0;
  uint64_t accepted = 0;
  constexpr int kRequests = 20000;
  for (int i = 0; i < kRequests; ++i) {
    if (steady.ShouldRefuse(AtSecond(2), u(rng))) {
      refused++;
    } else if (accepted < static_cast<uint64_t>(i + 1) / 4) {
      // A server with the capacity for a quarter of the requests offered.
      accepted++;
      steady.RecordAccepted(AtSecond(2));
    }
  }
  // With accepts a quarter of requests, the probability is
  // (r - 2 r/4) / (r + 1): about a half of them are refused locally.
  EXPECT_NEAR(kRequests / 2.0, refused, kRequests * 0.03);
  EXPECT_NEAR(kRequests / 4.0, accepted, kRequests * 0.01);
  // Accepts bring it back to zero.
  for (int i = 0; i < 20000; ++i) steady.RecordAccepted(AtSecond(3));
  EXPECT_EQ(0.0, steady.RejectProbability(AtSecond(3)));
}

TEST(ClientThrottleTest, TheWindowForgets) {
  ClientThrottle t(2.0, MonoDelta::FromSeconds(10));
  for (int i = 0; i < 100; ++i) t.ShouldRefuse(AtSecond(0), 0.999);
  EXPECT_GT(t.RejectProbability(AtSecond(1)), 0.9);
  EXPECT_EQ(0.0, t.RejectProbability(AtSecond(11)));
}

// Issue 42: the remaining time was sent truncated to whole milliseconds
// (2.9 ms left went as 2), so a server refusing calls it cannot finish in
// time refused some it could. Rounded up now.
TEST(TimeoutMillisTest, TheRemainingTimeIsSentRoundedUp) {
  auto ms = [](int64_t us) {
    return OutboundCall::TimeoutMillisToSend(MonoDelta::FromMicroseconds(us));
  };
  EXPECT_EQ(3u, ms(2900));
  EXPECT_EQ(2u, ms(2000));
  EXPECT_EQ(3u, ms(2001));
  EXPECT_EQ(1u, ms(1));
  EXPECT_EQ(1u, ms(0));  // 0 would mean no timeout at all
  EXPECT_EQ(1u, ms(-5000));
  EXPECT_EQ(10000u, ms(10000000));
  EXPECT_EQ(UINT32_MAX, OutboundCall::TimeoutMillisToSend(MonoDelta::FromSeconds(1e8)));
}

}  // namespace
}  // namespace osprey
