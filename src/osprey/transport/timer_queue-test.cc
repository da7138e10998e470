// TimerQueue on its own: order, cancellation, timers that add or cancel
// timers while they run.
#include "osprey/transport/timer_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace osprey::transport {
namespace {

MonoTime At(int ms) { return MonoTime() + MonoDelta::FromMilliseconds(ms); }

TEST(TimerQueueTest, RunsDueTimersInDeadlineOrderOnly) {
  TimerQueue q;
  std::vector<int> ran;
  q.Add(At(30), [&] { ran.push_back(30); });
  q.Add(At(10), [&] { ran.push_back(10); });
  q.Add(At(20), [&] { ran.push_back(20); });
  q.Add(At(10), [&] { ran.push_back(11); });  // same deadline: in the order added
  EXPECT_EQ(At(10), q.NextDeadline());
  q.RunExpired(At(20));
  EXPECT_EQ((std::vector<int>{10, 11, 20}), ran);
  EXPECT_EQ(At(30), q.NextDeadline());
  q.RunExpired(At(29));
  EXPECT_EQ(3u, ran.size());
  q.RunExpired(At(30));
  EXPECT_EQ(4u, ran.size());
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(MonoTime::Max(), q.NextDeadline());
}

TEST(TimerQueueTest, CancelledTimersNeverRun) {
  TimerQueue q;
  int ran = 0;
  TimerId a = q.Add(At(10), [&] { ++ran; });
  q.Add(At(20), [&] { ++ran; });
  q.Cancel(a);
  q.Cancel(a);          // twice: harmless
  q.Cancel(TimerId());  // an empty id: harmless
  EXPECT_EQ(1u, q.size());
  q.RunExpired(At(100));
  EXPECT_EQ(1, ran);
}

TEST(TimerQueueTest, TimersMayAddAndCancelWhileRunning) {
  TimerQueue q;
  std::vector<int> ran;
  TimerId later;
  q.Add(At(10), [&] {
    ran.push_back(10);
    q.Cancel(later);                            // one not yet run
    q.Add(At(5), [&] { ran.push_back(5); });    // already due: runs in this pass
    q.Add(At(50), [&] { ran.push_back(50); });  // not due
  });
  later = q.Add(At(15), [&] { ran.push_back(15); });
  q.RunExpired(At(20));
  EXPECT_EQ((std::vector<int>{10, 5}), ran);
  EXPECT_EQ(At(50), q.NextDeadline());
}

}  // namespace
}  // namespace osprey::transport
