// Value types of the public API about connections: the encryption policy a
// Messenger is built with, and ConnectionInfo, a snapshot of one
// connection as its reactor saw it, for users and tools that must know
// what negotiation chose (rpc-bench's report, interop checks, /rpcz).
// Plain values; any thread.
#pragma once

#include <cstddef>
#include <string>

#include "osprey/base/sockaddr.h"

namespace osprey {

// Kudu's --rpc_encryption. kOptional: TLS when both sides can do it.
// kRequired: a peer without TLS is refused (FATAL_UNAUTHORIZED).
enum class RpcEncryption { kDisabled, kOptional, kRequired };

// What the connection's traffic is, once negotiation has chosen.
enum class ConnectionSecurity {
  kNegotiating,  // not decided yet
  kClear,        // no TLS
  // TLS authenticated the peers, the traffic stays in the clear (both
  // sides listed TLS_AUTHENTICATION_ONLY: Kudu's loopback default).
  kTlsAuthenticationOnly,
  kTlsEncrypted,  // every byte after the handshake is a TLS record
};

// "clear", "TLS (authentication only)", "TLS (encrypted)", "negotiating".
const char* ConnectionSecurityName(ConnectionSecurity security);
// The same as an identifier, for JSON: "negotiating", "clear",
// "tls_authentication_only", "tls_encrypted".
const char* ConnectionSecuritySlug(ConnectionSecurity security);

struct ConnectionInfo {
  Sockaddr remote;
  bool inbound = false;  // accepted by this messenger's server
  std::string user;      // client: who it authenticates as; server: who authenticated
  bool negotiated = false;
  ConnectionSecurity security = ConnectionSecurity::kNegotiating;
  size_t calls_in_flight = 0;
  // Bytes queued to send that the socket has not taken yet.
  size_t outbound_queued_bytes = 0;
};

}  // namespace osprey
