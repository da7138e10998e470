// CallPhase: where a client call was when its deadline passed, as its
// TimedOut status tells the user: still connecting, negotiating, queued
// behind unwritten bytes, or sent with no answer (Kudu's timeout messages
// name the same steps: ON_OUTBOUND_QUEUE, SENT). With the bytes that then
// waited unread on the socket: an answer that came but was not read is a
// stall on this side, not the server's slowness. Pure, no socket; filled
// by Connection::PhaseOf under the loop lock. A value type.
#pragma once

#include <cstddef>
#include <string>

namespace osprey::transport {

struct CallPhase {
  enum class Step {
    kConnecting,   // the TCP connect had not completed
    kNegotiating,  // the connection was negotiating; the call was held
    kSent,         // handed to the open connection to write
    kClosed,       // its connection had closed
  };
  Step step = Step::kSent;
  // kSent: bytes the connection had queued to write, this call's among
  // them or behind it (a frame partly written counts whole); 0 once all
  // were written.
  size_t unwritten_bytes = 0;
  // kSent: bytes waiting on the socket that no one had read.
  size_t unread_bytes = 0;

  // " (sent, no answer)" and the like, appended to "... timed out after 1s".
  std::string Describe() const;
};

}  // namespace osprey::transport
