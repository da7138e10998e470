#include "osprey/wire/connection_header.h"

#include <cstring>

namespace osprey::wire {
namespace {

constexpr char kMagic[4] = {'h', 'r', 'p', 'c'};

bool LooksLikeHttp(Slice b) {
  static const char* const kMethods[] = {"GET ",     "POST ",  "HEAD ",    "PUT ",  "DELETE ",
                                         "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "};
  for (const char* m : kMethods) {
    size_t n = std::min(b.size(), std::strlen(m));
    if (n >= 4 && std::memcmp(b.data(), m, n) == 0) return true;
  }
  return false;
}

}  // namespace

std::string ConnectionHeaderBytes() {
  return std::string(kMagic, 4) + std::string{static_cast<char>(kProtocolVersion), 0, 0};
}

Status ValidateConnectionHeader(Slice bytes, ConnectionHeaderError* kind) {
  ConnectionHeaderError k = ConnectionHeaderError::kNone;
  Status s;
  if (bytes.size() < kConnectionHeaderSize) {
    k = ConnectionHeaderError::kBadMagic;
    s = Status::Corruption("connection header too short: " + std::to_string(bytes.size()) +
                           " bytes, need 7");
  } else if (LooksLikeHttp(bytes)) {
    k = ConnectionHeaderError::kHttpRequest;
    s = Status::Corruption("HTTP client on the RPC port: got '" +
                           Slice(bytes.data(), kConnectionHeaderSize).ToDebugString() +
                           "...' instead of an hrpc connection header");
  } else if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    k = ConnectionHeaderError::kBadMagic;
    s = Status::Corruption("bad connection header magic '" +
                           Slice(bytes.data(), 4).ToDebugString() + "', expected 'hrpc'");
  } else if (bytes[4] != kProtocolVersion) {
    k = ConnectionHeaderError::kVersionMismatch;
    s = Status::Corruption("unsupported RPC protocol version " + std::to_string(bytes[4]) +
                           ", this server speaks version 9");
  }
  if (kind) *kind = k;
  return s;
}

bool ConnectionHeaderPrefixInvalid(Slice partial) {
  size_t n = std::min<size_t>(partial.size(), 4);
  return std::memcmp(partial.data(), kMagic, n) != 0 ||
         (partial.size() > 4 && partial[4] != kProtocolVersion);
}

}  // namespace osprey::wire
