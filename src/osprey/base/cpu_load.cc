#include "osprey/base/cpu_load.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <fstream>
#include <sstream>

#include "osprey/base/monotime.h"

namespace osprey {

namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<int64_t> ParseInt(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<int> QuotaToCpus(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<int64_t>(1, (quota + period - 1) / period));
}

int CpusForThisProcess() {
  int cpus = 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cpus = CPU_COUNT(&set);
  } else {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n > 0) cpus = static_cast<int>(n);
  }
  bool v2 = false;
  std::optional<std::string> path = CpuLoad::CpuCgroupPath(ReadSmallFile("/proc/self/cgroup"), &v2);
  std::optional<int> quota;
  // The process's own cgroup, then the root of what this mount namespace
  // shows (a container's own cgroup, where the path names the host's).
  for (const std::string& p : {path.value_or(""), std::string()}) {
    if (quota || !path) break;
    if (v2) {
      quota = CpuLoad::ParseCpuMax(ReadSmallFile("/sys/fs/cgroup" + p + "/cpu.max"));
    } else {
      const std::string dir = "/sys/fs/cgroup/cpu" + p;
      quota = CpuLoad::ParseCfsQuota(ReadSmallFile(dir + "/cpu.cfs_quota_us"),
                                     ReadSmallFile(dir + "/cpu.cfs_period_us"));
    }
  }
  return quota ? std::min(cpus, *quota) : cpus;
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

std::atomic<int> spinning{0};

constexpr int64_t kRefreshNanos = 1'000'000;
std::atomic<int64_t> next_refresh_ns{0};
std::atomic<bool> room{false};
// SetRunnableForTests's count, or -1 for none.
std::atomic<int> runnable_for_tests{-1};
// SetSpinSlotsForTests's count, or -1 for none.
std::atomic<int> spin_slots_for_tests{-1};

}  // namespace

int CpuLoad::CPUs() {
  static const int cpus = CpusForThisProcess();
  return cpus;
}

std::optional<int> CpuLoad::ParseCpuMax(std::string_view cpu_max) {
  size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::optional<int64_t> quota = ParseInt(cpu_max.substr(0, space));
  std::optional<int64_t> period = ParseInt(cpu_max.substr(space + 1));
  if (!quota || !period) return std::nullopt;  // "max": no quota
  return QuotaToCpus(*quota, *period);
}

std::optional<int> CpuLoad::ParseCfsQuota(std::string_view quota_us, std::string_view period_us) {
  std::optional<int64_t> quota = ParseInt(quota_us);
  std::optional<int64_t> period = ParseInt(period_us);
  if (!quota || !period) return std::nullopt;
  return QuotaToCpus(*quota, *period);
}

std::optional<std::string> CpuLoad::CpuCgroupPath(std::string_view text, bool* v2) {
  std::optional<std::string> v1_path, v2_path;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    size_t first = line.find(':');
    size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view controllers = line.substr(first + 1, second - first - 1);
    std::string path(line.substr(second + 1));
    if (path.empty() || path[0] != '/') continue;
    if (path == "/") path.clear();
    if (line.substr(0, first) == "0" && controllers.empty()) {
      v2_path = path;
      continue;
    }
    size_t pos = 0;
    while (pos <= controllers.size()) {
      size_t comma = controllers.find(',', pos);
      std::string_view c =
          controllers.substr(pos, comma == std::string_view::npos ? comma : comma - pos);
      if (c == "cpu") v1_path = path;
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
  }
  // A hybrid hierarchy lists "0::" too, with the cpu controller in v1.
  *v2 = !v1_path.has_value() && v2_path.has_value();
  return v1_path ? v1_path : v2_path;
}

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

void CpuLoad::SetSpinSlotsForTests(std::optional<int> slots) {
  CHECK(!slots || *slots >= 0) << "a slot count is never negative";
  spin_slots_for_tests.store(slots.value_or(-1), std::memory_order_relaxed);
}

CpuLoad::SpinSlot::SpinSlot() : taken_(false) {
  const int forced = spin_slots_for_tests.load(std::memory_order_relaxed);
  taken_ = spinning.fetch_add(1) < (forced >= 0 ? forced : CPUs() - 1);
  if (!taken_) spinning.fetch_sub(1);
}

CpuLoad::SpinSlot::~SpinSlot() {
  if (taken_) spinning.fetch_sub(1);
}

void CpuLoad::SetRunnableForTests(std::optional<int> runnable) {
  CHECK(!runnable || *runnable >= 0) << "a runnable count is never negative";
  runnable_for_tests.store(runnable.value_or(-1), std::memory_order_relaxed);
}

bool CpuLoad::RoomToSpin() {
  if (int forced = runnable_for_tests.load(std::memory_order_relaxed); forced >= 0) {
    return forced <= CPUs();
  }
  const int64_t now = (MonoTime::Now() - MonoTime()).ToNanoseconds();
  int64_t due = next_refresh_ns.load(std::memory_order_relaxed);
  // One thread refreshes; the others use the last count meanwhile.
  if (now >= due && next_refresh_ns.compare_exchange_strong(due, now + kRefreshNanos,
                                                            std::memory_order_relaxed)) {
    int runnable = ReadRunnable();
    room.store(runnable >= 0 && runnable <= CPUs(), std::memory_order_relaxed);
  }
  return room.load(std::memory_order_relaxed);
}

}  // namespace osprey
