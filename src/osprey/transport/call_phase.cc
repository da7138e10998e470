#include "osprey/transport/call_phase.h"

namespace osprey::transport {

std::string CallPhase::Describe() const {
  switch (step) {
    case Step::kConnecting:
      return " (connecting)";
    case Step::kNegotiating:
      return " (negotiating the connection)";
    case Step::kClosed:
      return " (its connection closed)";
    case Step::kSent:
      break;
  }
  std::string s = unwritten_bytes == 0 ? " (sent, no answer"
                                       : " (queued: the connection had " +
                                             std::to_string(unwritten_bytes) + " bytes to write";
  if (unread_bytes > 0) s += "; " + std::to_string(unread_bytes) + " bytes waited unread";
  return s + ")";
}

}  // namespace osprey::transport
