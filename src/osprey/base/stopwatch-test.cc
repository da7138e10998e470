#include "osprey/base/stopwatch.h"

#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace osprey {
namespace {

int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Burns `d` of CPU time on the calling thread, measured on its own thread
// clock: on a loaded machine that takes longer, but the budget is spent.
// The thread clock is a system call, not the vDSO: read every thousand
// additions, it made most of the burn system time on a loaded machine.
void BurnCpu(MonoDelta d) {
  std::atomic<uint64_t> sink{0};
  int64_t end = ThreadCpuNanos() + d.ToNanoseconds();
  while (ThreadCpuNanos() < end) {
    for (int i = 0; i < 200000; ++i) sink.fetch_add(i, std::memory_order_relaxed);
  }
}

class StopwatchTest : public ::testing::TestWithParam<Stopwatch::Scope> {};

TEST_P(StopwatchTest, BurningCpuShowsAsUserTime) {
  Stopwatch sw(GetParam());
  sw.Start();
  EXPECT_TRUE(sw.running());
  BurnCpu(MonoDelta::FromMilliseconds(50));
  sw.Stop();
  EXPECT_FALSE(sw.running());
  CpuTimes t = sw.Elapsed();
  EXPECT_GE(t.wall.ToMilliseconds(), 50);
  // rusage ticks are coarse and the machine is shared, so only ask that a
  // good part of the spin was charged to us.
  EXPECT_GE(t.user.ToMilliseconds(), 10)
      << "user " << t.user.ToString() << " system " << t.system.ToString();
  EXPECT_LE((t.user + t.system).ToMilliseconds(), t.wall.ToMilliseconds() + 20);
}

TEST_P(StopwatchTest, SleepingShowsAsWallTimeNotCpu) {
  Stopwatch sw(GetParam());
  sw.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CpuTimes t = sw.Elapsed();
  EXPECT_GE(t.wall.ToMilliseconds(), 50);
  EXPECT_LT((t.user + t.system).ToMilliseconds(), 20)
      << "user " << t.user.ToString() << " system " << t.system.ToString();
}

TEST_P(StopwatchTest, SleepsCountAsContextSwitches) {
  Stopwatch sw(GetParam());
  sw.Start();
  for (int i = 0; i < 5; ++i) usleep(1000);
  sw.Stop();
  // Each usleep blocks, which is at least one voluntary switch.
  EXPECT_GE(sw.Elapsed().context_switches, 5);
}

TEST_P(StopwatchTest, StopAndResumeAccumulate) {
  Stopwatch sw(GetParam());
  sw.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sw.Stop();
  MonoDelta first = sw.Elapsed().wall;
  EXPECT_GE(first.ToMilliseconds(), 20);

  // Time while stopped is not counted.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(sw.Elapsed().wall, first);

  sw.Resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sw.Stop();
  MonoDelta both = sw.Elapsed().wall;
  EXPECT_GE(both.ToMilliseconds(), 40);
  // The second interval was added to the first, not put in its place. (No
  // upper bound proving the pause was left out: that would be flaky on a
  // loaded machine; the EXPECT_EQ above already shows a stopped watch stands
  // still.)
  EXPECT_GE(both, first + MonoDelta::FromMilliseconds(20));

  // Start() clears the total.
  sw.Start();
  sw.Stop();
  EXPECT_LT(sw.Elapsed().wall, first);
}

TEST_P(StopwatchTest, ElapsedWhileRunningIncludesCurrentInterval) {
  Stopwatch sw(GetParam());
  sw.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  MonoDelta a = sw.Elapsed().wall;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  MonoDelta b = sw.Elapsed().wall;
  EXPECT_GE(a.ToMilliseconds(), 5);
  EXPECT_GT(b, a);
}

INSTANTIATE_TEST_SUITE_P(Scopes, StopwatchTest,
                         ::testing::Values(Stopwatch::Scope::kProcess, Stopwatch::Scope::kThread),
                         [](const ::testing::TestParamInfo<Stopwatch::Scope>& info) {
                           return info.param == Stopwatch::Scope::kProcess ? "Process" : "Thread";
                         });

TEST(StopwatchThreadScopeTest, IgnoresOtherThreadsCpu) {
  // A thread-scope stopwatch on a sleeping thread must not see CPU another
  // thread burns; a process-scope one must.
  Stopwatch mine(Stopwatch::Scope::kThread);
  Stopwatch process(Stopwatch::Scope::kProcess);
  mine.Start();
  process.Start();
  std::thread burner([] { BurnCpu(MonoDelta::FromMilliseconds(50)); });
  burner.join();
  mine.Stop();
  process.Stop();
  EXPECT_LT(mine.Elapsed().user.ToMilliseconds(), 10);
  EXPECT_GE(process.Elapsed().user.ToMilliseconds(), 10);
}

}  // namespace
}  // namespace osprey
