// Settings every connection of a Messenger shares. A plain value.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "osprey/base/connection_types.h"
#include "osprey/base/ip_network.h"
#include "osprey/base/monotime.h"
#include "osprey/wire/frame.h"

namespace osprey::transport {

class HttpConnectionPool;
class HttpHandler;
class HttpHostCheck;
class PreAuthLimits;
class BlockingWorker;
class KerberosCredentials;
}  // namespace osprey::transport
namespace osprey {
class TokenVerifier;
}  // namespace osprey
namespace osprey::transport {
class TlsContext;
class TransportMetrics;

struct ConnectionOptions;
// Fills in the limits left at 0 (their defaults) from the process's
// RLIMIT_NOFILE as it is now, and makes `pre_auth` from them.
void ResolveConnectionLimits(ConnectionOptions* options);

struct ConnectionOptions {
  size_t max_frame_size = wire::kDefaultMaxFrameSize;
  // Until a connection is open (negotiated, and on a server given its
  // context), its frames may be at most this long: a peer that has not
  // authenticated cannot make the reactor buffer max_frame_size bytes.
  size_t max_negotiation_frame_size = 1024 * 1024;
  MonoDelta negotiation_timeout = MonoDelta::FromSeconds(3);
  // Connections with no call in flight and no traffic for this long close.
  MonoDelta idle_timeout = MonoDelta::FromSeconds(65);
  // A peer that does not read its responses may make the server queue at
  // most this many bytes before the connection is closed.
  size_t max_outbound_queue_bytes = 256 * 1024 * 1024;
  // Server connections open at once; the acceptor closes any beyond this at
  // once, so existing connections keep their file descriptors and memory.
  // 0 (the default): half the process's RLIMIT_NOFILE when the messenger is
  // built, at most 50,000 (ResolveConnectionLimits): a flood of connections
  // then meets this bound, which refuses only the newcomers, before the
  // descriptor limit, where accept fails for everyone; the other half is
  // room for the listeners, client connections, worker sets and files.
  size_t max_server_connections = 0;
  // Before authentication (PreAuthLimits): server connections not yet
  // negotiated, in all and from one peer address, and the bytes they may
  // buffer together. 0: the default, half of max_server_connections, and
  // half of that per address (at most 256), so that one address cannot
  // hold the slots others need to log in. Past a count a new connection is
  // closed at once; past the bytes, the connection whose read passed them.
  size_t max_unauthenticated_connections = 0;
  size_t max_unauthenticated_connections_per_address = 0;
  size_t max_unauthenticated_bytes = 32 * 1024 * 1024;
  // Set by the messenger from the three above; shared by its RPC
  // listeners' connections.
  std::shared_ptr<PreAuthLimits> pre_auth;
  // Set on every TCP connection, both roles.
  TcpKeepalive tcp_keepalive;
  // A thread about to sleep on a socket (a blocking caller, a waiting
  // worker) or a reactor about to sleep in epoll_wait first polls without
  // blocking for up to this long, where recent waits were that short
  // (AdaptiveSpin). Zero: never.
  MonoDelta spin_before_sleep = MonoDelta::FromMicroseconds(50);
  // A blocking caller whose call is the only one its connection awaits
  // reads the answer itself (Reactor::ParkForCaller). Off: the reactor
  // reads it and wakes the caller.
  bool caller_reads = true;
  // A worker that answered a connection's last call waits on it for the
  // next request (Reactor::ParkForWorker). Off: workers wait only in their
  // queues, and server connections hold no epoll set of their own.
  bool worker_reads = true;

  RpcEncryption encryption = RpcEncryption::kDisabled;
  // As Kudu: on a loopback connection both sides offer
  // TLS_AUTHENTICATION_ONLY, and after the handshake the traffic stays in
  // the clear, unless this is set.
  bool encrypt_loopback = false;
  // Set by MessengerBuilder::Build when encryption is not kDisabled.
  // Immutable, shared by every connection of the Messenger.
  std::shared_ptr<const TlsContext> tls_server;
  std::shared_ptr<const TlsContext> tls_client;

  // Certificate authentication (Kudu's authn_types.certificate): a server
  // names a client by its certificate, a client offers its own. Off unless
  // set (MessengerBuilder::set_tls_client_cert_authentication).
  bool tls_client_cert_authentication = false;

  RpcAuthentication authentication = RpcAuthentication::kDisabled;
  // Set by MessengerBuilder::Build from a keytab: the server's principal,
  // and the client's login as the same principal. Without a keytab a
  // client reads the ticket cache when a server offers Kerberos.
  std::shared_ptr<const KerberosCredentials> kerberos_server;
  std::shared_ptr<const KerberosCredentials> kerberos_client;
  // Where a client's Kerberos first step runs (it may wait for the KDC);
  // null: on the reactor. Made by MessengerBuilder::Build with Kerberos on.
  std::shared_ptr<BlockingWorker> blocking_worker;
  // Kudu's sasl_proto_name: the service a client asks Kerberos for.
  std::string sasl_proto_name = "kudu";
  // Client: a token to present (TOKEN_EXCHANGE); empty: none.
  std::string authn_token;
  // Server: checks the tokens clients present; null: tokens not accepted.
  std::shared_ptr<const TokenVerifier> token_verifier;
  // Server: the peers that may negotiate without TLS or authenticate by
  // SASL PLAIN (ServerAuthPolicy::untrusted_peer). Unix sockets always
  // may. Null: every peer may (MessengerBuilder always sets it).
  std::shared_ptr<const std::vector<IpNetwork>> trusted_subnets;

  // Null: not counted. Shared by every reactor of the messenger.
  std::shared_ptr<TransportMetrics> metrics;
  // What the messenger's calls may touch after the messenger is gone (its
  // metrics): kept by every reactor, and so by every connection.
  std::shared_ptr<const void> keepalive;
  // Where HTTP requests on the RPC port go; null: they are refused, as a
  // bad connection header. Owned by the messenger.
  HttpHandler* http_handler = nullptr;
  // False: HTTP is served only on the messenger's HTTP listeners
  // (Messenger::ListenHttp), and a request on the RPC port is refused.
  bool http_on_rpc_port = true;
  // HTTP connections: at most max_http_connections at once on the RPC
  // port, and as many again on each HTTP listener (a pool each, apart from
  // RPC connections, whose slots they never hold), at most
  // max_http_connections_per_peer of them from one address (0: no limit),
  // and http_healthz_reserve more that serve /healthz alone once a pool or
  // a peer's share is full (see HttpConnectionPool). Each closes when idle
  // for http_idle_timeout, and a keep-alive connection after
  // http_max_requests_per_connection answers or once
  // http_max_connection_age old (0: no cap), so that none is held forever.
  size_t max_http_connections = 64;
  size_t max_http_connections_per_peer = 8;
  size_t http_healthz_reserve = 4;
  size_t http_max_requests_per_connection = 1000;
  MonoDelta http_max_connection_age = MonoDelta::FromSeconds(600);
  MonoDelta http_idle_timeout = MonoDelta::FromSeconds(30);
  // The RPC port's pool, made by the messenger from the limits above.
  std::shared_ptr<HttpConnectionPool> http_connections;
  // HTTPS on the HTTP listeners (MessengerBuilder::set_http_tls): the
  // server's certificate, and its CA when client certificates are checked;
  // null: plain HTTP. Never on the RPC port.
  std::shared_ptr<const TlsContext> http_tls;
  bool http_tls_require_client_certificate = false;
  // The pages' Kerberos login (MessengerBuilder::set_http_spnego): every
  // path but /healthz needs a Negotiate token for these credentials; null:
  // none is asked for.
  std::shared_ptr<const KerberosCredentials> http_spnego;
  // Who may read the pages once logged in (MessengerBuilder::
  // set_http_readers): local user names; null: anyone who logs in.
  std::shared_ptr<const std::set<std::string>> http_readers;
  // Which Host headers name this server; null: not checked.
  std::shared_ptr<const HttpHostCheck> http_host_check;
  // Server calls in flight are traced for /rpcz.
  bool track_calls = false;
};

}  // namespace osprey::transport
