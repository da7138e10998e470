#include "osprey/base/cpu_load.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <charconv>

#include "osprey/base/monotime.h"

namespace osprey {

namespace {

int CpusForThisProcess() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// -1: unknown.
int ReadRunnable() {
  static const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  if (n <= 0) return -1;
  std::optional<int> runnable = CpuLoad::ParseRunnable(std::string_view(buf, n));
  return runnable ? *runnable : -1;
}

const int kCpus = CpusForThisProcess();
std::atomic<int> spinning{0};

constexpr int64_t kRefreshNanos = 1'000'000;
std::atomic<int64_t> next_refresh_ns{0};
std::atomic<bool> room{false};

}  // namespace

std::optional<int> CpuLoad::ParseRunnable(std::string_view loadavg) {
  // Three load averages, then "runnable/total".
  size_t pos = 0;
  for (int field = 0; field < 3; ++field) {
    pos = loadavg.find(' ', pos);
    if (pos == std::string_view::npos) return std::nullopt;
    ++pos;
  }
  size_t slash = loadavg.find('/', pos);
  if (slash == std::string_view::npos || slash == pos) return std::nullopt;
  int runnable = 0;
  auto [end, ec] = std::from_chars(loadavg.data() + pos, loadavg.data() + slash, runnable);
  if (ec != std::errc() || end != loadavg.data() + slash || runnable < 0) return std::nullopt;
  return runnable;
}

CpuLoad::SpinSlot::SpinSlot() : taken_(spinning.fetch_add(1) < kCpus - 1) {
  if (!taken_) spinning.fetch_sub(1);
}

CpuLoad::SpinSlot::~SpinSlot() {
  if (taken_) spinning.fetch_sub(1);
}

bool CpuLoad::RoomToSpin() {
  const int64_t now = (MonoTime::Now() - MonoTime()).ToNanoseconds();
  int64_t due = next_refresh_ns.load(std::memory_order_relaxed);
  // One thread refreshes; the others use the last count meanwhile.
  if (now >= due && next_refresh_ns.compare_exchange_strong(due, now + kRefreshNanos,
                                                            std::memory_order_relaxed)) {
    int runnable = ReadRunnable();
    room.store(runnable >= 0 && runnable <= kCpus, std::memory_order_relaxed);
  }
  return room.load(std::memory_order_relaxed);
}

}  // namespace osprey
