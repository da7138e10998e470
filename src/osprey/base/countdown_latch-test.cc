#include "osprey/base/countdown_latch.h"

#include <gtest/gtest.h>

#include <limits>
#include <thread>

namespace osprey {
namespace {

TEST(CountDownLatchTest, TimedWaitTimesOut) {
  CountDownLatch latch(1);
  MonoTime start = MonoTime::Now();
  EXPECT_FALSE(latch.WaitFor(MonoDelta::FromMilliseconds(20)));
  EXPECT_GE((MonoTime::Now() - start).ToMilliseconds(), 20);
  EXPECT_EQ(latch.count(), 1);
}

TEST(CountDownLatchTest, ReleasedByAnotherThread) {
  CountDownLatch latch(2);
  std::thread t([&] {
    latch.CountDown();
    latch.CountDown();
  });
  // Generous bound: only a hang should fail this.
  EXPECT_TRUE(latch.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_EQ(latch.count(), 0);
  t.join();
}

TEST(CountDownLatchTest, UntimedWaitReleasedByAnotherThread) {
  CountDownLatch ready(1);
  CountDownLatch go(1);
  std::thread t([&] {
    ready.CountDown();
    go.Wait();
  });
  ready.Wait();
  go.CountDown();
  t.join();
  EXPECT_EQ(go.count(), 0);
}

TEST(CountDownLatchTest, CountDownSaturatesAtZero) {
  CountDownLatch latch(3);
  latch.CountDown(2);
  EXPECT_EQ(latch.count(), 1);
  latch.CountDown(5);
  EXPECT_EQ(latch.count(), 0);
  latch.CountDown();
  EXPECT_EQ(latch.count(), 0);
  // Already open: waits return at once, even with a deadline in the past.
  EXPECT_TRUE(latch.WaitUntil(MonoTime::Now() - MonoDelta::FromSeconds(1)));
  latch.Wait();
}

TEST(CountDownLatchTest, ResetReopens) {
  CountDownLatch latch(0);
  EXPECT_TRUE(latch.WaitFor(MonoDelta()));
  latch.Reset(1);
  EXPECT_FALSE(latch.WaitFor(MonoDelta::FromMilliseconds(1)));
  latch.Reset(0);
  EXPECT_TRUE(latch.WaitFor(MonoDelta()));
}

TEST(CountDownLatchTest, InfiniteWaitForDoesNotOverflow) {
  // WaitFor(huge) must saturate to "forever", not wrap to a past deadline
  // and return false at once.
  CountDownLatch latch(1);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    latch.CountDown();
  });
  EXPECT_TRUE(latch.WaitFor(MonoDelta::FromNanoseconds(std::numeric_limits<int64_t>::max())));
  t.join();
}

}  // namespace
}  // namespace osprey
