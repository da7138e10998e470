// Value types of the public API about connections: the encryption policy a
// Messenger is built with, and ConnectionInfo, a snapshot of one
// connection as its reactor saw it, for users and tools that must know
// what negotiation chose (rpc-bench's report, interop checks, /rpcz).
// Plain values; any thread.
#pragma once

#include <cstddef>
#include <string>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"

namespace osprey {

// Kudu's --rpc_encryption. kOptional: TLS when both sides can do it.
// kRequired: a peer without TLS is refused (FATAL_UNAUTHORIZED).
enum class RpcEncryption { kDisabled, kOptional, kRequired };

// Kudu's --rpc_authentication. kDisabled: SASL PLAIN, a user name taken on
// the client's word. kOptional: Kerberos (SASL GSSAPI) when both sides
// have it (a server its keytab, a client a ticket or keytab), else PLAIN.
// kRequired: Kerberos or nothing; a peer without it is refused.
enum class RpcAuthentication { kDisabled, kOptional, kRequired };

// How a connection's client proved who it is.
enum class AuthenticationMethod {
  kPlain,     // SASL PLAIN: a name the client chose, proving nothing
  kKerberos,  // SASL GSSAPI
  // A TLS client certificate signed by a CA the server trusts (Kudu's
  // authn_types.certificate); no SASL exchange.
  kCertificate,
  // A token the server's TokenVerifier accepted (Kudu's TOKEN_EXCHANGE).
  kToken,
};
// "PLAIN", "GSSAPI", "CERTIFICATE", "TOKEN".
const char* AuthenticationMethodName(AuthenticationMethod method);

// Who is calling, as negotiation established it.
struct AuthenticatedIdentity {
  // The local user name: PLAIN's authcid, or a Kerberos principal mapped
  // by krb5.conf's auth_to_local rules (else its first component).
  std::string user;
  // Kerberos: "alice@EXAMPLE.COM"; a certificate: the principal of Kudu's
  // extension, if it has one. Empty for PLAIN.
  std::string principal;
  AuthenticationMethod method = AuthenticationMethod::kPlain;
};

// How a TCP connection (either role) finds out that its peer is gone when
// no FIN or RST will ever come: the host lost power, a link or a firewall
// drops everything. Without it such a connection, and every call on it
// without a deadline, waits forever (Kudu's KUDU-2192).
//  - Quiet connection: after `idle` without traffic the kernel sends a
//    probe every `interval`; `count` unanswered probes close it
//    (SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT).
//  - Data sent and not acknowledged for `user_timeout` closes it too
//    (TCP_USER_TIMEOUT); zero leaves the kernel's default, about 15
//    minutes of retransmissions.
// The defaults are Kudu's (--tcp_keepalive_probe_period_s=60,
// --tcp_keepalive_retry_period_s=3, --tcp_keepalive_retry_count=10), with
// the user timeout equal to the time keepalive needs: 90 s. Unix sockets
// have neither.
struct TcpKeepalive {
  bool enabled = true;
  MonoDelta idle = MonoDelta::FromSeconds(60);
  MonoDelta interval = MonoDelta::FromSeconds(3);
  int count = 10;
  MonoDelta user_timeout = MonoDelta::FromSeconds(90);

  // The longest a dead peer goes unnoticed on a quiet connection.
  MonoDelta DetectionBound() const { return idle + interval * count; }
};

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
  bool inbound = false;   // accepted by this messenger's server
  std::string user;       // client: who it authenticates as; server: who authenticated
  std::string principal;  // Kerberos: the principal proven; else empty
  AuthenticationMethod authentication = AuthenticationMethod::kPlain;
  bool negotiated = false;
  ConnectionSecurity security = ConnectionSecurity::kNegotiating;
  size_t calls_in_flight = 0;
  // Bytes queued to send that the socket has not taken yet.
  size_t outbound_queued_bytes = 0;
  // Diagnostic only, and not stable from one release to the next: who
  // reads its socket now, an internal state's name
  // (transport::WakeRoute::Name: "reactor", "dormant", "parked by caller",
  // "parked by worker", ...). Shown on /connections; nothing should parse it.
  std::string wake_route;
};

}  // namespace osprey
