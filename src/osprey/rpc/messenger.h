// Messenger: the entry point of the RPC layer. It owns the reactor threads,
// the acceptor of a server, the registered services with their pools and,
// through its reactors, the pool of client connections keyed by (address,
// user). Build one with MessengerBuilder; share it (std::shared_ptr) among
// proxies.
//
// Threads. Every public method may be called from any thread, callbacks
// and handlers included, or fails with a clear error:
// - Completion callbacks run on a reactor thread of this messenger, except
//   for a call refused before any reactor took it (the messenger is shut
//   down, the request lacks required fields), whose callback runs on the
//   calling thread before the call returns.
// - Shutdown() is idempotent and also runs when the last reference is
//   dropped. From an ordinary thread it returns once every reactor and
//   worker has stopped; a second caller waits for the first. From one of
//   this messenger's own reactor or worker threads (a callback, a handler)
//   it begins the shutdown and lets a thread of its own finish it, since
//   that thread cannot wait for itself.
// - The last reference may be dropped anywhere, callbacks and handlers
//   included. On an ordinary thread the drop shuts the messenger down and
//   waits for it; on one of its own threads or on any messenger's reactor
//   (which must never stop for it), a thread of its own does that. A
//   thread that drops it while holding a lock its callbacks take may wait
//   forever, as with Shutdown().
// - Listen() from a reactor thread is IllegalState (it must wait for one).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "osprey/base/connection_types.h"
#include "osprey/base/metrics.h"
#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/base/token_verifier.h"
#include "osprey/rpc/hedging.h"
#include "osprey/rpc/service_if.h"
#include "osprey/rpc/service_pool_options.h"

namespace osprey {

struct ServerGuards;

namespace transport {
class Acceptor;
class Reactor;
class TransportMetrics;
struct ConnectionOptions;
struct ParkedConnection;
}  // namespace transport
class ClientMethodMetrics;
class EtcdRegistration;
class EtcdWatches;
struct EtcdTlsFiles;
struct EtcdCredentials;
class HttpEndpoints;
class MessengerMetrics;
class Messenger;
class OutboundCall;
class RemoteMethod;
class RequestTracker;
class ResultTracker;
class ServicePool;
class ServiceDirectory;
class SlowCallLog;

// What a server remembers of the answers of exactly-once methods (Kudu's
// track_rpc_result), for the clients' retries.
struct RememberedResults {
  // How long an answer is kept (Kudu's remember_responses_ttl_ms).
  MonoDelta response_ttl = MonoDelta::FromSeconds(600);
  // How long a client that sends nothing is remembered (Kudu's
  // remember_clients_ttl_ms).
  MonoDelta client_ttl = MonoDelta::FromSeconds(3600);
  // All the memory it takes (answers, request records, clients, retries
  // waiting), at most: the oldest answers go first, and their retries are
  // refused as stale; when the records alone fill it, new exactly-once
  // calls are refused ERROR_SERVER_TOO_BUSY (retryable) until room frees.
  size_t max_bytes = 64 * 1024 * 1024;
  // What one user (who authenticated the calls) may hold of max_bytes: past
  // it, that user's own oldest answers go, and then its new calls are
  // refused; and when max_bytes is full, the user holding the most gives
  // first. So one user cannot make another's retries stale, or have its
  // calls refused. 0: half of max_bytes; a server whose clients are all one
  // user (a service principal) may set it to max_bytes.
  size_t max_bytes_per_user = 0;
  // Where its time comes from; null: the monotonic clock. For tests.
  std::function<MonoTime()> clock;
};

// The client's overload guards, per server it calls, as
// MessengerBuilder::set_retry_budget and set_client_throttling set them;
// the values here are the defaults, written once.
struct ClientGuardOptions {
  bool retry_budget = true;
  double retry_budget_ratio = 0.1;
  double retry_budget_min_per_second = 10;
  MonoDelta retry_budget_window = MonoDelta::FromSeconds(10);
  bool client_throttling = false;
  double throttle_k = 2.0;
  MonoDelta throttle_window = MonoDelta::FromSeconds(120);
};

class MessengerBuilder {
 public:
  explicit MessengerBuilder(std::string name);

  // Reactor threads, from 1 to 1024. By default 4 (Kudu's default), or the
  // CPUs this process may run on when fewer (its affinity mask when Build
  // runs; a CPU quota is not counted): reactors beyond the CPUs only take
  // turns on them, and each turn is a context switch (a server pinned to
  // one CPU with 4 reactors answers 5% fewer calls at 4 times its capacity
  // than with one; issue 48).
  MessengerBuilder& set_num_reactors(int n);
  // Longest frame either side accepts once a connection is open: from 64
  // bytes to INT32_MAX (Kudu's cap on rpc_max_message_size); 50 MiB by
  // default.
  MessengerBuilder& set_max_frame_size(size_t bytes);
  // Longest frame accepted before a connection is open (negotiation and
  // the connection context): 1 MiB by default, at least 64 bytes; the max
  // frame size where that is less.
  MessengerBuilder& set_max_negotiation_frame_size(size_t bytes);
  MessengerBuilder& set_negotiation_timeout(MonoDelta timeout);
  MessengerBuilder& set_idle_timeout(MonoDelta timeout);
  // How long a thread about to sleep waiting for the network polls first
  // (ConnectionOptions::spin_before_sleep; default 50 µs, at most 1 ms).
  // Spinning costs a CPU while it lasts, and pays where waking up costs
  // more, as on virtual machines; threads whose waits are longer soon stop
  // spinning by themselves. Zero turns it off.
  MessengerBuilder& set_spin_before_sleep(MonoDelta window);
  // Whether a blocking caller reads its own answer when its call is the
  // only one its connection awaits (on by default; off, the reactor reads
  // it and wakes the caller), and whether a server worker that answered a
  // connection's last call waits on its socket for the next request (on by
  // default; off, workers wait in their queues only, and each open server
  // connection holds one descriptor instead of three). Each saves a
  // wake-up per call; off, for measuring and bisecting.
  MessengerBuilder& set_caller_reads(bool on);
  MessengerBuilder& set_worker_reads(bool on);
  MessengerBuilder& set_max_outbound_queue_bytes(size_t bytes);
  // Server connections open at once; 0 (the default): half the process's
  // RLIMIT_NOFILE at Build, at most 50,000, so that a flood meets this
  // bound before the descriptor limit.
  MessengerBuilder& set_max_server_connections(size_t n);
  // What a peer can hold before it authenticates (issue 47): server
  // connections not yet negotiated, in all and from one address, and the
  // bytes they buffer together. Each 0: its default (half of
  // max_server_connections; half of that per address, at most 256;
  // 32 MiB). A connection past a count is closed at once; one whose read
  // takes the bytes past the budget is closed then.
  MessengerBuilder& set_unauthenticated_limits(size_t max_connections, size_t max_per_address,
                                               size_t max_bytes);
  // TCP keepalive and user timeout on every TCP connection, client and
  // server: on by default, with Kudu's values (see TcpKeepalive).
  MessengerBuilder& set_tcp_keepalive(const TcpKeepalive& keepalive);

  // TLS, as Kudu's --rpc_encryption: disabled (the default), optional (TLS
  // when the peer can) or required (a peer without TLS is refused).
  MessengerBuilder& set_rpc_encryption(RpcEncryption policy);
  // Loopback connections otherwise agree on TLS_AUTHENTICATION_ONLY: the
  // handshake authenticates, the traffic stays in the clear.
  MessengerBuilder& set_rpc_encrypt_loopback(bool encrypt);
  // PEM certificate (chain) and private key this side presents. A server
  // without them makes a self-signed certificate at start.
  MessengerBuilder& set_tls_certificate_files(std::string cert_file, std::string key_file);
  // PEM bundle of the CAs that must have signed the peer's certificate. A
  // client then verifies the server; a server then requires clients to
  // present a certificate. Without it, peers are not verified.
  MessengerBuilder& set_tls_ca_file(std::string ca_file);
  // With a CA file, a client also checks that the server's certificate
  // names the host it dialled (a DNS name or IP address among its subject
  // alternative names). On by default. Off, any certificate the CA ever
  // signed, for any host, passes as the server's: whoever holds one can
  // impersonate every server.
  MessengerBuilder& set_tls_verify_server_host(bool verify);
  // Certificate authentication, off by default: a server then names a
  // client by its certificate instead of SASL (the subject's UID, else its
  // CN; under rpc_authentication=required the UID or nothing), and a client
  // offers its certificate for it. Both need certificate files and a CA
  // file. As Kudu (KUDU-1965): on, every certificate the CA bundle ever
  // signed is a login, so give it only a CA that issues user certificates.
  MessengerBuilder& set_tls_client_cert_authentication(bool enabled);
  // Kudu's --trusted_subnets (KUDU-1875): a server refuses a client whose
  // address is outside these blocks (CIDR, "10.0.0.0/8", "fd00::/8") unless
  // it negotiates TLS and authenticates by Kerberos, a certificate or a
  // token: without TLS, or with SASL PLAIN (a user name the client chose),
  // it gets FATAL_UNAUTHORIZED saying why. Unix sockets are always trusted.
  // Unset, Kudu's default: loopback, the private and link-local blocks
  // (127.0.0.0/8, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16,
  // 169.254.0.0/16, ::1/128, fe80::/10, fd00::/8) and the blocks of this
  // host's interfaces as they are at Build. Set, exactly the blocks given; {"0.0.0.0/0",
  // "::/0"} trusts every peer, which lets anyone who reaches the port call
  // as any user, in the clear.
  MessengerBuilder& set_trusted_subnets(std::vector<std::string> cidrs);

  // Kerberos, as Kudu's --rpc_authentication: disabled (the default: SASL
  // PLAIN, a name the client chose), optional (Kerberos when both sides
  // have it) or required (Kerberos or nothing; a server needs a keytab).
  MessengerBuilder& set_rpc_authentication(RpcAuthentication policy);
  // Kudu's --keytab_file and --principal: the server accepts tickets for
  // `principal` ("kudu/_HOST" by default; _HOST becomes this machine's
  // fully qualified name) with keys from `keytab_file`, and the messenger's
  // outbound calls log in as that principal from it. Without a keytab a
  // client uses the ticket cache that kinit fills (KRB5CCNAME).
  MessengerBuilder& set_keytab_file(std::string keytab_file);
  MessengerBuilder& set_principal(std::string principal);
  // Kudu's --sasl_protocol_name: the service a client asks Kerberos for on
  // the host it dials ("kudu": kudu/db-1.example.com@REALM).
  MessengerBuilder& set_sasl_protocol_name(std::string name);

  // Client: an authentication token to present instead of SASL (Kudu's
  // TOKEN_EXCHANGE; for Kudu, a SignedTokenPB a master issued, serialized).
  // As Kudu, it is offered only over TLS to a server whose certificate this
  // client verifies (set_tls_ca_file): a token sent to anyone else could be
  // replayed by them.
  MessengerBuilder& set_authn_token(std::string token);
  // Server: accept tokens, checked by `verifier` (KuduTokenVerifier for
  // Kudu's); offered only with a CA-signed certificate of its own
  // (set_tls_certificate_files and set_tls_ca_file) that clients can check.
  MessengerBuilder& set_token_verifier(std::shared_ptr<const TokenVerifier> verifier);

  // Metrics, on by default: per-method calls by outcome and latency
  // histograms on both sides, and the messenger's connections, bytes and
  // reactor load, in metrics(). Off, nothing is counted.
  MessengerBuilder& set_metrics(bool enabled);
  // HTTP on the RPC port, off by default: a connection whose first bytes
  // are an HTTP request line is served /metrics (Prometheus text), /rpcz
  // (calls in flight and recent slow calls, JSON or HTML), /connections
  // (JSON) and /healthz. It also traces server calls in flight for /rpcz.
  MessengerBuilder& set_http_endpoints(bool enabled);
  // With HTTP endpoints on: false serves them only on the addresses given
  // to Messenger::ListenHttp, and refuses HTTP on the RPC port (as a bad
  // connection header); false without set_http_endpoints(true) is
  // InvalidArgument. Unset, they are on the RPC port unless
  // rpc_authentication or rpc_encryption is required: the pages name every
  // client, its user and its calls, and HTTP on the RPC port neither
  // authenticates nor encrypts. A secured server serves them with
  // ListenHttp on an address of their own (a loopback or management
  // network); true serves them on its RPC port anyway, with a WARNING.
  MessengerBuilder& set_http_on_rpc_port(bool enabled);
  // HTTP connections: at most `max_connections` at once (64 by default) on
  // the RPC port, and as many on each ListenHttp address (a pool each,
  // apart from RPC connections), each closed when idle for `idle_timeout`
  // (30 s by default).
  MessengerBuilder& set_http_connection_limits(size_t max_connections, MonoDelta idle_timeout);
  // Against one peer holding a whole pool (issue 47): of each pool's
  // connections, at most `n` from one address (8 by default; 0: no limit).
  // Peers on a Unix socket have no address to tell them apart: only the
  // pool's total applies to them.
  MessengerBuilder& set_http_max_connections_per_peer(size_t n);
  // Past a full pool, or a peer's full share, up to `n` more connections
  // (4 by default, at most 1,024; 0: none) serve /healthz alone: one
  // request each, anything else answered 503, closed after the answer or
  // within the negotiation timeout; one address holds at most half of them.
  // So an orchestrator's probe is answered however the pool is held.
  MessengerBuilder& set_http_healthz_reserve(size_t n);
  // A keep-alive HTTP connection closes after `max_requests` answers (1,000
  // by default) or once `max_age` old (10 minutes), whichever comes first;
  // the answer that reaches a cap says "Connection: close", and one idle at
  // its age goes then. 0 (either): no such cap.
  MessengerBuilder& set_http_keepalive_limits(size_t max_requests, MonoDelta max_age);
  // HTTPS on the ListenHttp addresses (the RPC port's pages stay plain),
  // off by default: the pages are served over TLS with this server's
  // certificate (set_tls_certificate_files, needed), and, with
  // `require_client_certificate`, only to clients presenting a certificate
  // the CA file (set_tls_ca_file, then needed) signed; others fail the
  // handshake. Without the requirement a certificate a client presents is
  // still verified. Plain HTTP there is answered 400. Works whatever
  // rpc_encryption is.
  MessengerBuilder& set_http_tls(bool enabled, bool require_client_certificate = false);
  // Host names an HTTP request may name in its Host header besides this
  // server's address, "localhost" on loopback and this machine's host name
  // (against DNS rebinding: see transport/http_host_check.h); "*" allows
  // any. Others are answered 403.
  MessengerBuilder& set_http_allowed_hosts(std::vector<std::string> hosts);
  // A Kerberos login for the HTTP endpoints, as Kudu's
  // --webserver_require_spnego: every page but /healthz then needs an
  // "Authorization: Negotiate" header (SPNEGO, RFC 4559: curl --negotiate
  // -u :, a browser of the realm) with a ticket for `principal` (Kudu's
  // "HTTP/_HOST"; _HOST becomes this machine's fully qualified name) whose
  // key is in `keytab_file` (empty: set_keytab_file's). Without one the
  // answer is 401 with "WWW-Authenticate: Negotiate" and how to log in; a
  // ticket that does not verify, 401 with Kerberos's reason. Any principal
  // the KDC vouches for reads the pages (set_http_readers narrows that).
  // Build fails when the keytab holds no key for the principal. Over plain
  // HTTP the pages themselves still travel in the clear: add set_http_tls.
  MessengerBuilder& set_http_spnego(bool enabled, std::string principal = "HTTP/_HOST",
                                    std::string keytab_file = "");
  // Who may read the pages once logged in (set_http_spnego): these local
  // user names, as the RPC layer maps principals ("alice@EXAMPLE.COM" and
  // "alice/admin@EXAMPLE.COM" are "alice", or krb5.conf's auth_to_local
  // says). Another login gets 403 Forbidden naming its user; /healthz stays
  // open. Empty (the default): any principal the KDC vouches for, as Kudu's
  // webserver. Build fails with a list but no login, or a blank name.
  MessengerBuilder& set_http_readers(std::vector<std::string> users);
  // Calls that take at least this long are kept for /rpcz, the last 20 per
  // method and direction (1 s by default).
  MessengerBuilder& set_slow_call_threshold(MonoDelta threshold);

  // Exactly-once methods (Kudu's track_rpc_result): what the server
  // remembers for the clients' retries (see RememberedResults).
  MessengerBuilder& set_remembered_results(const RememberedResults& remembered);

  // Server reflection, off by default: a built-in service,
  // osprey.reflection.ServerReflection (osprey/rpc/reflection.proto), that
  // lists the registered services with their methods and answers the
  // .proto definitions (FileDescriptorProtos) of their services and
  // messages, so a tool such as `osprey` can call them without their
  // .proto files. It describes nothing else linked into the process.
  MessengerBuilder& set_reflection(bool enabled);

  // Client overload guards, per server this messenger calls (see
  // ServerGuards). The retry budget: retries of calls that server refused
  // as overloaded (ERROR_SERVER_TOO_BUSY or ERROR_UNAVAILABLE) are capped
  // at `ratio` of the calls started to it over `window`, plus a floor of
  // `min_retries_per_second` for each second of the window (0.1, 10 a
  // second, 10 s by default, as Finagle's); a ratio of 0 with no floor
  // never retries them, and `enabled` false turns the cap off. Such calls
  // are retried only within it, after the policy's jittered backoff.
  // Retries after a broken or refused connection, or a server shutting
  // down, do not spend it: they are bounded by their policy's attempts and
  // backoff (a cut connection fails every call it carried at once, one
  // event that must not use up the budget call by call).
  MessengerBuilder& set_retry_budget(
      bool enabled, double ratio = ClientGuardOptions().retry_budget_ratio,
      double min_retries_per_second = ClientGuardOptions().retry_budget_min_per_second,
      MonoDelta window = ClientGuardOptions().retry_budget_window);
  // Google SRE's adaptive throttling (ClientThrottle): a call is refused
  // locally, ServiceUnavailable and never sent, with probability
  // max(0, (requests - k x accepts) / (requests + 1)) over `window`. Off by
  // default.
  MessengerBuilder& set_client_throttling(bool enabled, double k = ClientGuardOptions().throttle_k,
                                          MonoDelta window = ClientGuardOptions().throttle_window);

  // Hedged calls (HedgingPolicy, issue 50): the policy of every proxy made
  // on this messenger whose target is a set of servers, until its
  // Proxy::set_hedging. Off by default. Checked by Build (Validate).
  MessengerBuilder& set_hedging(const HedgingPolicy& policy);

  // Registration (issue 50): once listening, the server registers its
  // address under `target` ("etcd://HOST:PORT[,HOST:PORT...]/PREFIX") with
  // a lease of `ttl` (whole seconds, at least 1) that it keeps alive; a
  // client whose target is the same URL finds it. Drain() and Shutdown()
  // withdraw it first (revoke the lease); a process that dies disappears
  // when the TTL runs out. A wildcard listen address (0.0.0.0) registers
  // the host's name. Empty: off (the default).
  MessengerBuilder& set_registry(std::string target, MonoDelta ttl = MonoDelta::FromSeconds(5));
  // etcd over TLS, for "etcds://" targets (the registry's, and proxies'
  // made on this messenger): the CA file that signed etcd's certificate
  // (empty: the system's CAs), and the certificate and key this process
  // presents to an etcd that requires them (--client-cert-auth; both or
  // neither). etcd's certificate must name the HOST of the target. Build
  // fails if a file cannot be read. Unset: the system's CAs, no
  // certificate.
  MessengerBuilder& set_etcd_tls(std::string ca_file, std::string cert_file = "",
                                 std::string key_file = "");
  // A user of an etcd with authentication on, for every etcd target (the
  // registry's and proxies' made on this messenger): its name, and a file
  // whose first line is its password (read by Build; a file, so that the
  // password is in no command line). Each client asks etcd for a token
  // with them and sends it with every request. Only over TLS: Build, and
  // a proxy's target, refuse an etcd:// target with a user. Empty user:
  // none (the default).
  MessengerBuilder& set_etcd_credentials(std::string user, std::string password_file);
  // etcd targets of proxies made on this messenger: a watch that has been
  // silent for `after_silence` asks its member for a read (2 s to answer);
  // without an answer the client watches through the next member. A member
  // that hangs with its connection up is so left within about
  // `after_silence` + 2 s. Zero: off (such a member then holds the watch
  // until it answers again or its connection breaks). Default 5 s.
  MessengerBuilder& set_etcd_watch_probe(MonoDelta after_silence);
  // Whether the proxies of this messenger on one etcd target share one
  // watch of it (one read, one thread, one stream to etcd), so that a
  // proxy made per call costs neither etcd nor the client a watch. Off:
  // each proxy reads and watches etcd on its own, as before. Default on.
  MessengerBuilder& set_share_etcd_watches(bool on);

  // InvalidArgument for settings out of range and for TLS files that do
  // not load.
  Status Build(std::shared_ptr<Messenger>* out) const;

 private:
  friend class Messenger;
  // Copy on write: builders are values, copies share until one is changed.
  transport::ConnectionOptions& MutableOptions();
  std::string name_;
  std::optional<int> num_reactors_;  // unset: DefaultNumReactors()
  std::shared_ptr<transport::ConnectionOptions> options_;
  std::string tls_cert_file_, tls_key_file_, tls_ca_file_;
  bool tls_verify_server_host_ = true;
  std::optional<std::vector<std::string>> trusted_subnets_;  // unset: Kudu's default
  std::string keytab_file_;
  std::string principal_ = "kudu/_HOST";
  bool metrics_ = true;
  bool http_endpoints_ = false;
  std::optional<bool> http_on_rpc_port_;  // unset: see set_http_on_rpc_port
  bool http_tls_ = false;
  bool http_tls_require_client_certificate_ = false;
  bool http_spnego_ = false;
  std::string http_spnego_principal_, http_spnego_keytab_file_;
  std::vector<std::string> http_readers_;
  std::vector<std::string> http_allowed_hosts_;
  MonoDelta slow_call_threshold_ = MonoDelta::FromSeconds(1);
  RememberedResults remembered_;
  bool reflection_ = false;
  ClientGuardOptions guards_;
  std::string registry_;
  MonoDelta registry_ttl_ = MonoDelta::FromSeconds(5);
  std::string etcd_ca_file_, etcd_cert_file_, etcd_key_file_;
  std::optional<MonoDelta> etcd_watch_probe_after_;  // unset: EtcdWatchTimeouts's
  bool share_etcd_watches_ = true;
  std::string etcd_user_, etcd_password_file_;
  HedgingPolicy hedging_;
};

class Messenger {
 public:
  ~Messenger();
  Messenger(const Messenger&) = delete;
  Messenger& operator=(const Messenger&) = delete;

  // Listens on `addr` (port 0 picks a free port); *bound gets the address
  // actually bound. Once per Messenger.
  Status Listen(const Sockaddr& addr, Sockaddr* bound = nullptr);
  // Serves the HTTP endpoints, and nothing else, on `addr` as well: a
  // scrape address apart from the RPC port (another interface, a fixed
  // port). Needs MessengerBuilder::set_http_endpoints(true); any number of
  // addresses. Each address has a pool of HTTP connections of its own
  // (set_http_connection_limits and the settings after it), apart from the
  // RPC port's and from RPC connections. An RPC client there is answered 400 and
  // its calls fail with NetworkError "the server answered in HTTP…".
  Status ListenHttp(const Sockaddr& addr, Sockaddr* bound = nullptr);
  Status RegisterService(std::unique_ptr<ServiceIf> service,
                         const ServicePoolOptions& options = ServicePoolOptions());
  void Shutdown() { Shutdown(MonoDelta::Max()); }
  // As Shutdown(), but waits at most `handler_wait` for running handlers;
  // then their connections close (their clients' calls fail, each callback
  // exactly once) and their answers, when they come, are dropped. The
  // handlers' threads cannot be stopped: they finish on their own, keeping
  // their service alive until then.
  void Shutdown(MonoDelta handler_wait);

  // Graceful drain (issue 49), for a server about to stop (a rolling
  // restart): at once /healthz answers 503 "draining" and every new call is
  // refused ERROR_UNAVAILABLE, "did not run" (an Osprey client with a set of
  // servers moves it to another at once, without spending its retries;
  // Kudu's client retries ERROR_UNAVAILABLE as it does
  // ERROR_SERVER_TOO_BUSY); the calls queued and running finish and are
  // answered; then the messenger shuts down (connections close, TLS with
  // close_notify). Returns then, at the latest at `grace` from now, when
  // the calls still running are dropped as Shutdown(0) drops them. Not
  // from a reactor thread. Only before Shutdown; a second Drain waits for
  // the first.
  void Drain(MonoDelta grace);
  // True from Drain() on.
  bool draining() const { return draining_.load(std::memory_order_acquire); }

  // A snapshot of this messenger's open connections, both directions, with
  // what negotiation chose for each (clear, TLS authentication only, TLS
  // encrypted). IllegalState from a reactor thread, where waiting for the
  // reactors would deadlock, and once shut down.
  Status DumpConnections(std::vector<ConnectionInfo>* out) const;

  const std::string& name() const { return name_; }
  int num_reactors() const { return static_cast<int>(reactors_.size()); }

  // The registry of this messenger's metrics: the RPC layer's own, and any
  // a user adds (they are served on /metrics too). Read it with
  // Snapshot(). Thread-safe.
  MetricRegistry* metrics();
  // True once Shutdown() has begun (/healthz then answers 503).
  bool shutting_down() const { return closing_.load(std::memory_order_acquire); }

 private:
  friend class MessengerBuilder;
  friend class Proxy;
  friend class HttpEndpoints;

  // What the builder sets beyond the connections' options.
  struct Settings {
    bool metrics = true;
    bool http_endpoints = false;
    bool http_on_rpc_port = true;
    std::vector<std::string> http_allowed_hosts;
    MonoDelta slow_call_threshold;
    // What the server remembers of exactly-once answers.
    RememberedResults remembered;
    // Client overload guards (MessengerBuilder::set_retry_budget and
    // set_client_throttling).
    ClientGuardOptions guards;
    // Where Listen registers the server (set_registry); empty: nowhere.
    std::string registry;
    MonoDelta registry_ttl;
    // etcds:// targets' files (set_etcd_tls).
    std::string etcd_ca_file, etcd_cert_file, etcd_key_file;
    MonoDelta etcd_watch_probe_after;  // set_etcd_watch_probe
    bool share_etcd_watches = true;    // set_share_etcd_watches
    // set_etcd_credentials: the user, and the password Build read.
    std::string etcd_user, etcd_password;
    // Proxies' hedging until they set their own (set_hedging).
    HedgingPolicy hedging;
  };
  // Proxy: the overload guards of calls to `server`, or null when neither
  // applies (no throttling, and no retries: `retrying` false).
  std::shared_ptr<ServerGuards> GuardsFor(const Sockaddr& server, bool retrying);
  bool client_throttling() const { return guard_settings_.guards.client_throttling; }
  const HedgingPolicy& default_hedging() const { return guard_settings_.hedging; }
  // set_etcd_tls's files, for etcds:// targets.
  EtcdTlsFiles etcd_tls_files() const;
  // set_etcd_credentials's user and password, for etcd targets.
  EtcdCredentials etcd_credentials() const;
  MonoDelta etcd_watch_probe_after() const { return guard_settings_.etcd_watch_probe_after; }
  // Proxies' etcd watches, shared by target; null with set_share_etcd_watches off.
  const std::shared_ptr<EtcdWatches>& etcd_watches() const { return etcd_watches_; }
  // Proxy: the client metrics of `method` (null with metrics off). Cached
  // per thread: a hit takes no lock and makes no string.
  ClientMethodMetrics* ClientMetricsFor(const RemoteMethod& method);
  SlowCallLog* slow_calls() const;
  // Request ids of this messenger's calls to methods that track results.
  const std::shared_ptr<RequestTracker>& request_tracker() const { return request_tracker_; }
  // Proxy: sends `call` over the connection to its destination.
  // `sync`: the caller is about to block on the call; it may then send it
  // itself if the connection's reactor is idle. `parked` (sync only): set
  // when the caller is to read the answer itself (Reactor::ParkForCaller).
  void QueueCall(std::shared_ptr<OutboundCall> call, bool sync = false,
                 transport::ParkedConnection* parked = nullptr);

  // The reactors' way in: hands each request frame to its service. Defined
  // in messenger.cc, so the transport stays out of this header.
  class InboundHandler;
  std::unique_ptr<InboundHandler> inbound_;

  Messenger(std::string name, int num_reactors, transport::ConnectionOptions options,
            const Settings& settings);
  Status Start();
  // The deleter of the references Build hands out: shuts the messenger
  // down and frees it, on a thread of its own when called on one of ours.
  static void LastExternalReferenceDropped(std::shared_ptr<Messenger> self);
  // A thread that Shutdown() would have to wait for: one of our reactors
  // or service-pool workers.
  bool OnOwnThread();

  transport::Reactor* NextServerReactor();
  // Binds `addr` and accepts there on reactor 0: RPC (which may turn out
  // to be HTTP), or `http_only`. Waits for reactor 0, which takes mu_ for
  // every call it hands to a service: so never under mu_.
  Status AddListener(const Sockaddr& addr, bool http_only, Sockaddr* bound) OSPREY_EXCLUDES(mu_);
  // Registers `bound` as set_registry says (after Listen).
  void Register(const Sockaddr& bound) OSPREY_EXCLUDES(mu_);
  // Revokes the registration, if any: its key goes at once. Waits for etcd
  // (a second at most): not on a reactor thread.
  void WithdrawRegistration() OSPREY_EXCLUDES(mu_);
  // Stops them on reactor 0 and waits (also never under mu_).
  void StopAcceptors(const std::vector<std::shared_ptr<transport::Acceptor>>& acceptors)
      OSPREY_EXCLUDES(mu_);

  const std::string name_;
  // Unique among messengers ever made: the client-metrics cache's key.
  const uint64_t id_;
  // Before metrics_, which counts them.
  const std::shared_ptr<std::atomic<int64_t>> open_server_connections_ =
      std::make_shared<std::atomic<int64_t>>(0);
  // Shared with the reactors: see messenger_metrics.h.
  const std::shared_ptr<MessengerMetrics> metrics_;
  const std::shared_ptr<RequestTracker> request_tracker_;
  // What RegisterService registered, for the reflection service.
  const std::shared_ptr<ServiceDirectory> directory_;
  // Answers of methods that track results, by request id. Shared with the
  // calls, which may answer after the messenger is gone.
  const std::shared_ptr<ResultTracker> result_tracker_;
  const Settings guard_settings_;
  const std::shared_ptr<EtcdWatches> etcd_watches_;
  // Per server; at most kMaxGuardedServers, past which servers share one.
  static constexpr size_t kMaxGuardedServers = 4096;
  Mutex guards_mu_;
  std::unordered_map<std::string, std::shared_ptr<ServerGuards>> guards_
      OSPREY_GUARDED_BY(guards_mu_);
  std::shared_ptr<ServerGuards> overflow_guards_ OSPREY_GUARDED_BY(guards_mu_);
  std::unique_ptr<HttpEndpoints> http_;
  std::vector<std::shared_ptr<transport::Reactor>> reactors_;
  std::atomic<uint32_t> next_server_reactor_{0};
  std::atomic<bool> closing_{false};
  std::atomic<bool> draining_{false};
  // When a call was last refused for draining (MonoTime nanoseconds): the
  // drain waits for a quiet spell, so that its clients stop sending
  // before the connections close under calls in flight.
  std::atomic<int64_t> last_drain_refusal_ns_{0};

  Mutex mu_;
  // The RPC listener (Listen(), once) and the HTTP-only ones.
  std::vector<std::shared_ptr<transport::Acceptor>> acceptors_ OSPREY_GUARDED_BY(mu_);
  bool listen_started_ OSPREY_GUARDED_BY(mu_) = false;
  // The server's registration in etcd (set_registry), from Listen until a
  // drain or shutdown withdraws it.
  std::unique_ptr<EtcdRegistration> registration_ OSPREY_GUARDED_BY(mu_);
  // Transparent hashing: looking a service up by the request's name (a
  // view into the frame) allocates nothing.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  using ServiceMap =
      std::unordered_map<std::string, std::shared_ptr<ServicePool>, NameHash, std::equal_to<>>;
  ServiceMap services_ OSPREY_GUARDED_BY(mu_);
  // The waiting half of Shutdown(): stops pools and reactors.
  void FinishShutdown(std::vector<std::shared_ptr<transport::Acceptor>> acceptors,
                      ServiceMap services, MonoTime handler_deadline);
  bool shut_down_ OSPREY_GUARDED_BY(mu_) = false;  // Shutdown() began
  bool shutdown_done_ OSPREY_GUARDED_BY(mu_) = false;
  CondVar shutdown_done_cv_;
  // The owning reference that MessengerBuilder::Build made; what users hold
  // are references whose deleter releases it.
  std::weak_ptr<Messenger> self_;
};

}  // namespace osprey
