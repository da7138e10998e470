#include "osprey/base/monotime.h"

#include <cstdio>
#include <limits>

namespace osprey {

std::string MonoDelta::ToString() const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3fs", ToSeconds());
  return buf;
}

MonoTime MonoTime::operator+(MonoDelta d) const {
  // Saturate so that Now() + a huge timeout stays "far future" instead of
  // wrapping into the past.
  using Rep = Clock::duration::rep;
  Rep base = tp_.time_since_epoch().count();
  Rep add = std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(d.ToNanoseconds())).count();
  Rep sum;
  if (__builtin_add_overflow(base, add, &sum)) {
    return add > 0 ? Max() : Min();
  }
  return MonoTime(Clock::time_point(Clock::duration(sum)));
}

MonoDelta MonoTime::operator-(MonoTime o) const {
  return MonoDelta::FromNanoseconds(
      std::chrono::duration_cast<std::chrono::nanoseconds>(tp_ - o.tp_).count());
}

MonoDelta Deadline::Remaining() const {
  if (is_infinite()) return MonoDelta::FromNanoseconds(std::numeric_limits<int64_t>::max());
  MonoDelta left = when_ - MonoTime::Now();
  return left < MonoDelta() ? MonoDelta() : left;
}

}  // namespace osprey
