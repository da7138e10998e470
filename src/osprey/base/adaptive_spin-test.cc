// AdaptiveSpin with a clock of the test's making, and CpuLoad's parts that
// do not depend on the machine's load: the /proc/loadavg parser and the
// bound on threads spinning at once.
#include "osprey/base/adaptive_spin.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "osprey/base/cpu_load.h"

namespace osprey {
namespace {

// Each read advances a microsecond, so a 10 µs window polls about 10 times.
struct FakeClock {
  MonoTime now = MonoTime() + MonoDelta::FromSeconds(1);
  MonoTime Read() {
    now = now + MonoDelta::FromMicroseconds(1);
    return now;
  }
};

constexpr MonoDelta kWindow = MonoDelta::FromMicroseconds(10);

TEST(AdaptiveSpinTest, PollsUntilFoundAndTheNextWaitSpinsAgain) {
  FakeClock clock;
  AdaptiveSpin spin([&] { return clock.Read(); });
  int polls = 0;
  EXPECT_EQ(AdaptiveSpin::Result::kFound, spin.Spin(kWindow, [&] { return ++polls == 3; }));
  EXPECT_EQ(3, polls);
  EXPECT_EQ(0, spin.skipping());
  EXPECT_EQ(AdaptiveSpin::Result::kFound, spin.Spin(kWindow, [] { return true; }));
}

TEST(AdaptiveSpinTest, PollsNoLongerThanTheWindow) {
  FakeClock clock;
  AdaptiveSpin spin([&] { return clock.Read(); });
  int polls = 0;
  const MonoTime start = clock.now;
  EXPECT_EQ(AdaptiveSpin::Result::kMissed, spin.Spin(kWindow, [&] {
    ++polls;
    return false;
  }));
  EXPECT_GE(polls, 5);
  EXPECT_LE(polls, 11);
  EXPECT_LE(clock.now - start, kWindow + MonoDelta::FromMicroseconds(2));
}

// Windows that come to nothing make the waits after them skip spinning,
// twice as many after each such window, up to kMaxSkip; windows that find
// their event halve it again.
TEST(AdaptiveSpinTest, MissesBackOffExponentiallyUpToABoundAndFindsComeBack) {
  FakeClock clock;
  AdaptiveSpin spin([&] { return clock.Read(); });
  auto never = [] { return false; };
  std::vector<int> skips;
  for (int spins = 0; spins < 20;) {
    AdaptiveSpin::Result r = spin.Spin(kWindow, never);
    ASSERT_NE(AdaptiveSpin::Result::kFound, r);
    if (r == AdaptiveSpin::Result::kMissed) {
      ++spins;
      skips.push_back(spin.skipping());
    }
  }
  EXPECT_EQ(2, skips[0]);
  EXPECT_EQ(4, skips[1]);
  EXPECT_EQ(8, skips[2]);
  EXPECT_EQ(AdaptiveSpin::kMaxSkip, skips.back());
  // A skipped wait does not poll at all.
  int polls = 0;
  EXPECT_EQ(AdaptiveSpin::Result::kSkipped, spin.Spin(kWindow, [&] { return ++polls > 0; }));
  EXPECT_EQ(0, polls);
  // Through the skipped waits, then finds: the back-off halves.
  while (spin.skipping() > 0) spin.Spin(kWindow, never);
  EXPECT_EQ(AdaptiveSpin::Result::kFound, spin.Spin(kWindow, [] { return true; }));
  EXPECT_EQ(0, spin.skipping());
  EXPECT_EQ(AdaptiveSpin::Result::kMissed, spin.Spin(kWindow, never));
  EXPECT_EQ(AdaptiveSpin::kMaxSkip, spin.skipping()) << "half of the bound, doubled by the miss";
}

TEST(AdaptiveSpinTest, ANonPositiveWindowNeverPolls) {
  AdaptiveSpin spin;
  int polls = 0;
  EXPECT_EQ(AdaptiveSpin::Result::kSkipped, spin.Spin(MonoDelta(), [&] { return ++polls > 0; }));
  EXPECT_EQ(AdaptiveSpin::Result::kSkipped,
            spin.Spin(MonoDelta::FromMicroseconds(-5), [&] { return ++polls > 0; }));
  EXPECT_EQ(0, polls);
}

TEST(CpuLoadTest, ParsesTheRunnableThreadsOfALoadavgLine) {
  EXPECT_EQ(3, CpuLoad::ParseRunnable("0.52 0.58 0.59 3/421 12345\n"));
  EXPECT_EQ(41, CpuLoad::ParseRunnable("12.00 3.67 3.44 41/196 2204"));
  EXPECT_FALSE(CpuLoad::ParseRunnable(""));
  EXPECT_FALSE(CpuLoad::ParseRunnable("0.52 0.58 0.59"));
  EXPECT_FALSE(CpuLoad::ParseRunnable("0.52 0.58 0.59 /421 1"));
  EXPECT_FALSE(CpuLoad::ParseRunnable("0.52 0.58 0.59 x/421 1"));
  EXPECT_FALSE(CpuLoad::ParseRunnable("0.52 0.58 0.59 -1/421 1"));
  EXPECT_FALSE(CpuLoad::ParseRunnable("0.52 0.58 0.59 99999999999999/421 1"));
}

// A container's CPUs are its CFS quota's, rounded up, where one is set.
TEST(CpuLoadTest, ParsesCfsQuotasOfBothCgroupVersions) {
  EXPECT_EQ(2, CpuLoad::ParseCpuMax("200000 100000\n"));
  EXPECT_EQ(2, CpuLoad::ParseCpuMax("150000 100000"));
  EXPECT_EQ(1, CpuLoad::ParseCpuMax("5000 100000"));
  EXPECT_FALSE(CpuLoad::ParseCpuMax("max 100000\n"));
  EXPECT_FALSE(CpuLoad::ParseCpuMax(""));
  EXPECT_FALSE(CpuLoad::ParseCpuMax("200000"));
  EXPECT_FALSE(CpuLoad::ParseCpuMax("200000 0"));
  EXPECT_EQ(3, CpuLoad::ParseCfsQuota("300000\n", "100000\n"));
  EXPECT_FALSE(CpuLoad::ParseCfsQuota("-1\n", "100000\n"));
  EXPECT_FALSE(CpuLoad::ParseCfsQuota("", ""));
  EXPECT_FALSE(CpuLoad::ParseCfsQuota("abc", "100000"));
}

TEST(CpuLoadTest, FindsTheCpuControllersCgroup) {
  bool v2 = true;
  // cgroup v2 alone.
  EXPECT_EQ("/system.slice/x.service", CpuLoad::CpuCgroupPath("0::/system.slice/x.service\n", &v2));
  EXPECT_TRUE(v2);
  EXPECT_EQ("", CpuLoad::CpuCgroupPath("0::/\n", &v2));
  EXPECT_TRUE(v2);
  // v1, and a hybrid hierarchy whose cpu controller is in v1.
  const char* hybrid =
      "9:name=systemd:/\n4:memory:/m\n2:cpu,cpuacct:/docker/abc\n1:cpuset:/\n0::/\n";
  EXPECT_EQ("/docker/abc", CpuLoad::CpuCgroupPath(hybrid, &v2));
  EXPECT_FALSE(v2);
  EXPECT_EQ("", CpuLoad::CpuCgroupPath("1:cpu:/\n2:cpuacct:/x\n", &v2));
  EXPECT_FALSE(v2);
  // Nothing that names the cpu controller.
  EXPECT_FALSE(CpuLoad::CpuCgroupPath("4:memory:/m\n", &v2));
  EXPECT_FALSE(CpuLoad::CpuCgroupPath("garbage", &v2));
  EXPECT_FALSE(CpuLoad::CpuCgroupPath("", &v2));
}

// However many threads ask, at most one fewer than the CPUs spin at once.
TEST(CpuLoadTest, SpinSlotsAreOneFewerThanTheCpus) {
  cpu_set_t set;
  ASSERT_EQ(0, sched_getaffinity(0, sizeof(set), &set));
  const int cpus = CpuLoad::CPUs();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, CPU_COUNT(&set));
  std::vector<std::unique_ptr<CpuLoad::SpinSlot>> slots;
  auto take_all = [&] {
    int taken = 0;
    for (int i = 0; i < cpus + 8; ++i) {
      slots.push_back(std::make_unique<CpuLoad::SpinSlot>());
      taken += slots.back()->taken() ? 1 : 0;
    }
    return taken;
  };
  EXPECT_EQ(cpus - 1, take_all());
  slots.clear();  // all given back: as many again
  EXPECT_EQ(cpus - 1, take_all());
}

}  // namespace
}  // namespace osprey
