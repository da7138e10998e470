// ServicePoolOptions: how a registered service runs its calls. A plain
// value.
#pragma once

#include <cstddef>

namespace osprey {

struct ServicePoolOptions {
  // 0 runs handlers on the reactor thread: fastest for handlers that never
  // block, and a stalled handler stalls every connection of that reactor.
  int worker_threads = 1;
  // Calls waiting for a worker; one more is refused ERROR_SERVER_TOO_BUSY.
  size_t queue_length = 50;
};

}  // namespace osprey
