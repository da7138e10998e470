#include "osprey/base/monotime.h"

#include <cstdio>
#include <limits>

namespace osprey {

std::string MonoDelta::ToString() const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3fs", ToSeconds());
  return buf;
}

MonoTime MonoTime::NowCoarse() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  // steady_clock is CLOCK_MONOTONIC on Linux: the same timeline.
  return MonoTime(
      Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

MonoDelta Deadline::Remaining() const {
  if (is_infinite()) return MonoDelta::FromNanoseconds(std::numeric_limits<int64_t>::max());
  MonoDelta left = when_ - MonoTime::Now();
  return left < MonoDelta() ? MonoDelta() : left;
}

}  // namespace osprey
