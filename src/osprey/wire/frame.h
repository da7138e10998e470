// InboundFrame: one decoded frame, its header parsed and its body split into
// the main message and sidecars. The Slices point into `storage`, which the
// frame keeps alive; moving a frame never copies the body.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "osprey/base/slice.h"
#include "osprey/wire/header_view.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::wire {

// Longest a frame may be unless configured otherwise: Kudu's default
// rpc_max_message_size.
inline constexpr size_t kDefaultMaxFrameSize = 50 * 1024 * 1024;
// The most a frame may be configured to hold: Kudu's cap on
// rpc_max_message_size. Its length then fits an int, as protobuf's parsers
// take.
inline constexpr size_t kMaxMaxFrameSize = INT32_MAX;
// Most a frame's header may list (Kudu's TransferLimits: 10,000 sidecars),
// and the most feature flags a request may require. The header parsers stop
// at the first entry past either, before storing it: each entry costs a
// uint32 and, for a sidecar, a Slice, so a frame of 1-byte entries would
// otherwise grow the heap 20 times its size before any authentication.
inline constexpr size_t kMaxSidecars = 10000;
inline constexpr size_t kMaxFeatureFlags = 64;

template <class Header>
struct InboundFrame {
  Header header;
  Slice main_message;
  std::vector<Slice> sidecars;
  std::shared_ptr<const uint8_t[]> storage;
};

using InboundRequestFrame = InboundFrame<RequestHeader>;
using InboundResponseFrame = InboundFrame<ResponseHeader>;
// As connections decode them, with hand-parsed header views.
using InboundRequest = InboundFrame<RequestHeaderView>;
using InboundResponse = InboundFrame<ResponseHeaderView>;

}  // namespace osprey::wire
