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

MonoTime MonoTime::operator+(MonoDelta d) const {
  // Saturate so that Now() + a huge timeout stays "far future" instead of
  // wrapping into the past.
  using Rep = Clock::duration::rep;
  Rep base = tp_.time_since_epoch().count();
  Rep add = std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(d.ToNanoseconds()))
                .count();
  Rep sum;
  if (__builtin_add_overflow(base, add, &sum)) {
    return add > 0 ? Max() : Min();
  }
  return MonoTime(Clock::time_point(Clock::duration(sum)));
}

MonoDelta MonoTime::operator-(MonoTime o) const {
  // Saturate as operator+ does: Min() - Now() (a deadline of "already
  // expired") would otherwise overflow and come out as a huge positive delta.
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  int64_t a = duration_cast<nanoseconds>(tp_.time_since_epoch()).count();
  int64_t b = duration_cast<nanoseconds>(o.tp_.time_since_epoch()).count();
  int64_t diff;
  if (__builtin_sub_overflow(a, b, &diff)) {
    diff = a > b ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return MonoDelta::FromNanoseconds(diff);
}

MonoDelta Deadline::Remaining() const {
  if (is_infinite()) return MonoDelta::FromNanoseconds(std::numeric_limits<int64_t>::max());
  MonoDelta left = when_ - MonoTime::Now();
  return left < MonoDelta() ? MonoDelta() : left;
}

}  // namespace osprey
