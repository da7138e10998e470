// What connection*.cc share and nothing else may use: the reserved call
// ids, the per-event bounds, the worker-set count and the bad-peer log.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "osprey/wire/rpc_header.pb.h"

namespace osprey::transport::connection_internal {

inline constexpr int32_t kNegotiationCallId = -33;
inline constexpr int32_t kConnectionContextCallId = -3;
inline constexpr int32_t kConnectionErrorCallId = -1;
// Bound the work one readable event may do, so one busy peer cannot starve
// the others on this reactor.
inline constexpr int kMaxReadsPerEvent = 16;
inline constexpr size_t kMaxFramesPerWritev = 128;

// Worker sets (Connection::ParkForWorker) open in this process: two
// descriptors each, so at most an eighth of RLIMIT_NOFILE of them (a
// quarter of the descriptors), lest they starve the sockets. Connections
// past that have none, and their workers wait in their queues.
extern std::atomic<int64_t> worker_sets_open;
int64_t WorkerSetLimit();

// What a peer causes at will (a bad header, a refused negotiation, a
// silent or unreading peer) is logged through one limiter, a count per
// interval: no peer can fill the server's log. The line is escaped
// (EscapeForLog): it quotes what the peer sent.
void LogBadPeer(const std::string& line);

}  // namespace osprey::transport::connection_internal

namespace osprey::transport {
// The names connection*.cc use unqualified, said once (this header is
// theirs alone).
using connection_internal::kConnectionContextCallId;
using connection_internal::kConnectionErrorCallId;
using connection_internal::kMaxFramesPerWritev;
using connection_internal::kMaxReadsPerEvent;
using connection_internal::kNegotiationCallId;
using connection_internal::LogBadPeer;
using connection_internal::worker_sets_open;
using connection_internal::WorkerSetLimit;
using wire::ErrorStatusPB;
using wire::NegotiatePB;
using wire::RequestHeader;
using wire::ResponseHeader;
}  // namespace osprey::transport
