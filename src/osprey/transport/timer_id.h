// TimerId: names a timer of a Reactor. It is the timer's key (deadline and a
// sequence number), so cancelling needs no second index. Empty when seq is 0.
#pragma once

#include <cstdint>

#include "osprey/base/monotime.h"

namespace osprey::transport {

struct TimerId {
  MonoTime when;
  uint64_t seq = 0;
  explicit operator bool() const { return seq != 0; }
  auto operator<=>(const TimerId&) const = default;
};

}  // namespace osprey::transport
