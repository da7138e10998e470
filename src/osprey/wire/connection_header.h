// The 7-byte connection header a client sends once, right after connecting:
// "hrpc", version 9, service class 0, auth protocol 0. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "osprey/base/slice.h"
#include "osprey/base/status.h"

namespace osprey::wire {

inline constexpr size_t kConnectionHeaderSize = 7;
inline constexpr uint8_t kProtocolVersion = 9;

std::string ConnectionHeaderBytes();

// What is wrong with the first bytes a server read, most specific first.
enum class ConnectionHeaderError {
  kNone,
  kHttpRequest,      // "GET / HTTP/1.1" and friends
  kBadMagic,         // not "hrpc"
  kVersionMismatch,  // "hrpc" with another version
};

// Checks a complete header (bytes.size() >= kConnectionHeaderSize; only the
// first 7 bytes are read). Returns Corruption with a message that tells an
// HTTP client, a bad magic and a wrong version apart; *kind says which.
Status ValidateConnectionHeader(Slice bytes, ConnectionHeaderError* kind = nullptr);

// True when the bytes read so far can no longer become a valid header, so a
// server need not wait for all 7 bytes to reject a peer.
bool ConnectionHeaderPrefixInvalid(Slice partial);

}  // namespace osprey::wire
