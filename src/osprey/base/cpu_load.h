// Whether this machine has a CPU to spare for a thread that would spin
// instead of sleeping (AdaptiveSpin): the kernel's count of runnable
// threads (/proc/loadavg's fourth field, the whole machine's, the asking
// thread included) against the CPUs this process may run on (its affinity
// mask, and its cgroup's CFS quota, v2 or v1, where one is set). Spinning
// where threads already wait for a CPU would only take it from them.
// Thread-safe: the count is read at most once per millisecond per process,
// and shared.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace osprey {

class CpuLoad {
 public:
  // True if, a millisecond ago at most, no more threads were runnable than
  // there are CPUs for this process. False where /proc/loadavg cannot be
  // read: without the count, no spinning.
  static bool RoomToSpin();

  // Tests: the runnable count RoomToSpin judges by instead of
  // /proc/loadavg's, so that whether a thread may spin does not depend on
  // what else the machine runs; nullopt reads /proc/loadavg again.
  static void SetRunnableForTests(std::optional<int> runnable);
  // Tests: how many threads of the process may spin at once, instead of
  // CPUs() - 1, so that a test can have every waiting thread spin;
  // nullopt goes back to CPUs() - 1.
  static void SetSpinSlotsForTests(std::optional<int> slots);

  // A place among the threads of this process that spin at once, of which
  // there are one fewer than CPUs for it, so that one CPU is always left
  // for threads with work to do.
  class SpinSlot {
   public:
    SpinSlot();
    ~SpinSlot();
    SpinSlot(const SpinSlot&) = delete;
    SpinSlot& operator=(const SpinSlot&) = delete;
    bool taken() const { return taken_; }

   private:
    bool taken_;
  };

  // The runnable threads in a /proc/loadavg line ("0.52 0.58 0.59 3/421
  // 12345"), or nothing if it is not one.
  static std::optional<int> ParseRunnable(std::string_view loadavg);

  // The CPUs this process may use: CPUs() reads them when first asked (no
  // file is read when the library loads) and keeps them. Made of the
  // pieces below.
  static int CPUs();
  // The CPUs a CFS quota allows, rounded up: from cgroup v2's cpu.max
  // ("200000 100000"; "max 100000" is no quota), or from v1's
  // cpu.cfs_quota_us and cpu.cfs_period_us (a quota of -1 is none).
  // Nothing if there is no quota or the text is not one.
  static std::optional<int> ParseCpuMax(std::string_view cpu_max);
  static std::optional<int> ParseCfsQuota(std::string_view quota_us, std::string_view period_us);
  // The cgroup path of the cpu controller in /proc/self/cgroup's text
  // ("" for the root): the v1 line whose controllers include "cpu", else
  // v2's "0::/path" (*v2 set).
  static std::optional<std::string> CpuCgroupPath(std::string_view proc_self_cgroup, bool* v2);
};

}  // namespace osprey
