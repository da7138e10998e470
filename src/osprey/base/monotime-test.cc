#include "osprey/base/monotime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>

namespace osprey {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

TEST(MonoDeltaTest, Conversions) {
  EXPECT_EQ(MonoDelta::FromSeconds(1.5).ToMilliseconds(), 1500);
  EXPECT_EQ(MonoDelta::FromMilliseconds(3).ToMicroseconds(), 3000);
  EXPECT_EQ(MonoDelta::FromMicroseconds(7).ToNanoseconds(), 7000);
  EXPECT_EQ(MonoDelta::FromNanoseconds(2500000).ToMilliseconds(), 2);
  EXPECT_DOUBLE_EQ(MonoDelta::FromMilliseconds(250).ToSeconds(), 0.25);
  EXPECT_EQ(MonoDelta::FromMilliseconds(1234).ToString(), "1.234s");
  EXPECT_EQ(MonoDelta().ToNanoseconds(), 0);
}

TEST(MonoDeltaTest, ArithmeticAndOrder) {
  MonoDelta a = MonoDelta::FromMilliseconds(5);
  MonoDelta b = MonoDelta::FromMilliseconds(3);
  EXPECT_EQ((a + b).ToMilliseconds(), 8);
  EXPECT_EQ((a - b).ToMilliseconds(), 2);
  EXPECT_LT(b, a);
  EXPECT_LT(b - a, MonoDelta());
}

TEST(MonoTimeTest, NowMovesForwardAndDifferences) {
  MonoTime a = MonoTime::Now();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  MonoTime b = MonoTime::Now();
  EXPECT_LT(a, b);
  EXPECT_GE((b - a).ToMicroseconds(), 2000);
  MonoTime c = a + MonoDelta::FromMilliseconds(10);
  EXPECT_EQ((c - a).ToMilliseconds(), 10);
  EXPECT_EQ(c - MonoDelta::FromMilliseconds(10), a);
}

TEST(MonoTimeTest, HugeAddSaturatesInsteadOfWrapping) {
  // Now() + "wait forever" must stay in the future, not wrap into the past.
  MonoTime now = MonoTime::Now();
  MonoTime far = now + MonoDelta::FromNanoseconds(kInt64Max);
  EXPECT_EQ(far, MonoTime::Max());
  EXPECT_TRUE(far.IsMax());
  EXPECT_GT(far, now);
  EXPECT_EQ(MonoTime::Max() + MonoDelta::FromSeconds(1), MonoTime::Max());

  // And the other way: a step below the earliest time bottoms out at Min.
  MonoTime past = now + MonoDelta::FromNanoseconds(std::numeric_limits<int64_t>::min());
  EXPECT_LT(past, now);
  EXPECT_EQ(past + MonoDelta::FromNanoseconds(std::numeric_limits<int64_t>::min()),
            MonoTime::Min());
  EXPECT_EQ(MonoTime::Min() - MonoDelta::FromSeconds(1), MonoTime::Min());
}

TEST(MonoTimeTest, DifferenceSaturates) {
  // The difference of two far-apart instants does not fit 64-bit
  // nanoseconds; it must clamp rather than wrap to the opposite sign.
  MonoTime now = MonoTime::Now();
  EXPECT_EQ((MonoTime::Max() - MonoTime::Min()).ToNanoseconds(), kInt64Max);
  EXPECT_EQ((MonoTime::Min() - now).ToNanoseconds(), std::numeric_limits<int64_t>::min());
  EXPECT_GT(MonoTime::Max() - now, MonoDelta::FromSeconds(1e9));
}

TEST(DeadlineTest, InfiniteNeverExpires) {
  Deadline d = Deadline::Infinite();
  EXPECT_TRUE(d.is_infinite());
  EXPECT_FALSE(d.Expired());
  EXPECT_EQ(d.Remaining().ToNanoseconds(), kInt64Max);
  // A deadline a "forever" timeout away is the same as no deadline.
  EXPECT_TRUE(Deadline::After(MonoDelta::FromNanoseconds(kInt64Max)).is_infinite());
}

TEST(DeadlineTest, RemainingCountsDownAndNeverGoesNegative) {
  Deadline d = Deadline::After(MonoDelta::FromSeconds(10));
  EXPECT_FALSE(d.is_infinite());
  EXPECT_FALSE(d.Expired());
  MonoDelta left = d.Remaining();
  EXPECT_LE(left, MonoDelta::FromSeconds(10));
  EXPECT_GT(left, MonoDelta::FromSeconds(5));  // generous: the machine may be loaded

  Deadline past = Deadline::At(MonoTime::Now() - MonoDelta::FromMilliseconds(1));
  EXPECT_TRUE(past.Expired());
  EXPECT_EQ(past.Remaining(), MonoDelta());
}

TEST(DeadlineTest, ExpiresAfterItsTime) {
  Deadline d = Deadline::After(MonoDelta::FromMilliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(d.Expired());
  EXPECT_EQ(d.Remaining(), MonoDelta());
}

TEST(DeadlineTest, AtMinIsExpiredWithNothingRemaining) {
  // "Already too late" expressed as the earliest possible time: Remaining()
  // must not overflow computing Min() - Now().
  Deadline d = Deadline::At(MonoTime::Min());
  EXPECT_TRUE(d.Expired());
  EXPECT_EQ(d.Remaining(), MonoDelta());
}

TEST(MonoDeltaTest, FactoriesSaturateInsteadOfWrapping) {
  EXPECT_EQ(MonoDelta::Max(), MonoDelta::FromMilliseconds(INT64_MAX));
  EXPECT_EQ(MonoDelta::Max(), MonoDelta::FromMicroseconds(INT64_MAX / 10));
  EXPECT_EQ(MonoDelta::Min(), MonoDelta::FromMilliseconds(INT64_MIN / 2));
  EXPECT_EQ(MonoDelta::Max(), MonoDelta::FromSeconds(1e300));
  EXPECT_EQ(MonoDelta::Min(), MonoDelta::FromSeconds(-1e300));
  EXPECT_EQ(MonoDelta(), MonoDelta::FromSeconds(std::nan("")));
  EXPECT_EQ(MonoDelta::Max(), MonoDelta::Max() + MonoDelta::FromSeconds(1));
  EXPECT_EQ(MonoDelta::Min(), MonoDelta::Min() - MonoDelta::FromSeconds(1));
  // In range, exact.
  EXPECT_EQ(1500000000, MonoDelta::FromMilliseconds(1500).ToNanoseconds());
  EXPECT_EQ(-2000, MonoDelta::FromMicroseconds(-2).ToNanoseconds());
  // A huge timeout is a far deadline, not one in the past.
  EXPECT_GT(MonoTime::Now() + MonoDelta::FromMilliseconds(INT64_MAX), MonoTime::Now());
}

}  // namespace
}  // namespace osprey
