#include "osprey/base/stopwatch.h"

#include <sys/resource.h>
#include <sys/time.h>

namespace osprey {
namespace {

MonoDelta FromTimeval(const timeval& tv) {
  return MonoDelta::FromMicroseconds(static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec);
}

}  // namespace

CpuTimes Stopwatch::Sample() const {
  rusage ru{};
  getrusage(scope_ == Scope::kThread ? RUSAGE_THREAD : RUSAGE_SELF, &ru);
  CpuTimes t;
  t.wall = MonoTime::Now() - MonoTime();
  t.user = FromTimeval(ru.ru_utime);
  t.system = FromTimeval(ru.ru_stime);
  t.context_switches = ru.ru_nvcsw + ru.ru_nivcsw;
  return t;
}

void Stopwatch::Start() {
  total_ = CpuTimes();
  Resume();
}

void Stopwatch::Resume() {
  if (running_) return;
  start_ = Sample();
  running_ = true;
}

void Stopwatch::Stop() {
  if (!running_) return;
  total_ = Elapsed();
  running_ = false;
}

CpuTimes Stopwatch::Elapsed() const {
  if (!running_) return total_;
  CpuTimes now = Sample();
  CpuTimes t = total_;
  t.wall = t.wall + (now.wall - start_.wall);
  t.user = t.user + (now.user - start_.user);
  t.system = t.system + (now.system - start_.system);
  t.context_switches += now.context_switches - start_.context_switches;
  return t;
}

}  // namespace osprey
