// Settings every connection of a Messenger shares. A plain value.
#pragma once

#include <cstddef>

#include "osprey/base/monotime.h"
#include "osprey/wire/frame.h"

namespace osprey::transport {

struct ConnectionOptions {
  size_t max_frame_size = wire::kDefaultMaxFrameSize;
  MonoDelta negotiation_timeout = MonoDelta::FromSeconds(3);
  // Connections with no call in flight and no traffic for this long close.
  MonoDelta idle_timeout = MonoDelta::FromSeconds(65);
  // A peer that does not read its responses may make the server queue at
  // most this many bytes before the connection is closed.
  size_t max_outbound_queue_bytes = 256 * 1024 * 1024;
  // Server connections open at once; the acceptor closes any beyond this at
  // once, so existing connections keep their file descriptors and memory.
  size_t max_server_connections = 50000;
};

}  // namespace osprey::transport
