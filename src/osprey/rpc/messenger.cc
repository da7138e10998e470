#include "osprey/rpc/messenger.h"

#include <glog/logging.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "osprey/base/countdown_latch.h"
#include "osprey/rpc/etcd_registry.h"
#include "osprey/rpc/http_endpoints.h"
#include "osprey/rpc/inbound_call.h"
#include "osprey/rpc/message_pool.h"
#include "osprey/rpc/messenger_metrics.h"
#include "osprey/rpc/outbound_call.h"
#include "osprey/rpc/reflection_service.h"
#include "osprey/rpc/request_tracker.h"
#include "osprey/rpc/result_tracker.h"
#include "osprey/rpc/rpc_metrics.h"
#include "osprey/rpc/service_pool.h"
#include "osprey/rpc/slow_call_log.h"
#include "osprey/transport/acceptor.h"
#include "osprey/transport/blocking_worker.h"
#include "osprey/transport/client_call.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/connection_options.h"
#include "osprey/transport/http_connection_pool.h"
#include "osprey/transport/http_host_check.h"
#include "osprey/transport/reactor.h"
#include "osprey/transport/sasl_gssapi.h"
#include "osprey/transport/tls_context.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey {

namespace {
// A reserve beyond this would be a second pool, not room for probes.
constexpr size_t kMaxHttpHealthzReserve = 1024;

transport::HttpConnectionPool::Limits HttpPoolLimits(const transport::ConnectionOptions& o) {
  return {.max_connections = o.max_http_connections,
          .max_per_peer = o.max_http_connections_per_peer,
          .healthz_reserve = o.http_healthz_reserve};
}
}  // namespace

MessengerBuilder::MessengerBuilder(std::string name)
    : name_(std::move(name)), options_(std::make_shared<transport::ConnectionOptions>()) {}

transport::ConnectionOptions& MessengerBuilder::MutableOptions() {
  if (options_.use_count() > 1)
    options_ = std::make_shared<transport::ConnectionOptions>(*options_);
  return *options_;  // only this builder holds it now
}

MessengerBuilder& MessengerBuilder::set_num_reactors(int n) {
  num_reactors_ = n;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_max_frame_size(size_t bytes) {
  MutableOptions().max_frame_size = bytes;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_negotiation_timeout(MonoDelta timeout) {
  MutableOptions().negotiation_timeout = timeout;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_max_negotiation_frame_size(size_t bytes) {
  MutableOptions().max_negotiation_frame_size = bytes;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_idle_timeout(MonoDelta timeout) {
  MutableOptions().idle_timeout = timeout;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_caller_reads(bool on) {
  MutableOptions().caller_reads = on;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_worker_reads(bool on) {
  MutableOptions().worker_reads = on;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_spin_before_sleep(MonoDelta window) {
  MutableOptions().spin_before_sleep = window;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_max_server_connections(size_t n) {
  MutableOptions().max_server_connections = n;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_tcp_keepalive(const TcpKeepalive& keepalive) {
  MutableOptions().tcp_keepalive = keepalive;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_unauthenticated_limits(size_t max_connections,
                                                               size_t max_per_address,
                                                               size_t max_bytes) {
  transport::ConnectionOptions& o = MutableOptions();
  o.max_unauthenticated_connections = max_connections;
  o.max_unauthenticated_connections_per_address = max_per_address;
  o.max_unauthenticated_bytes = max_bytes == 0 ? 32 * 1024 * 1024 : max_bytes;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_max_outbound_queue_bytes(size_t bytes) {
  MutableOptions().max_outbound_queue_bytes = bytes;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_rpc_encryption(RpcEncryption policy) {
  MutableOptions().encryption = policy;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_rpc_encrypt_loopback(bool encrypt) {
  MutableOptions().encrypt_loopback = encrypt;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_tls_certificate_files(std::string cert_file,
                                                              std::string key_file) {
  tls_cert_file_ = std::move(cert_file);
  tls_key_file_ = std::move(key_file);
  return *this;
}
MessengerBuilder& MessengerBuilder::set_tls_ca_file(std::string ca_file) {
  tls_ca_file_ = std::move(ca_file);
  return *this;
}
MessengerBuilder& MessengerBuilder::set_tls_verify_server_host(bool verify) {
  tls_verify_server_host_ = verify;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_rpc_authentication(RpcAuthentication policy) {
  MutableOptions().authentication = policy;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_keytab_file(std::string keytab_file) {
  keytab_file_ = std::move(keytab_file);
  return *this;
}
MessengerBuilder& MessengerBuilder::set_principal(std::string principal) {
  principal_ = std::move(principal);
  return *this;
}
MessengerBuilder& MessengerBuilder::set_authn_token(std::string token) {
  MutableOptions().authn_token = std::move(token);
  return *this;
}
MessengerBuilder& MessengerBuilder::set_tls_client_cert_authentication(bool enabled) {
  MutableOptions().tls_client_cert_authentication = enabled;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_token_verifier(
    std::shared_ptr<const TokenVerifier> verifier) {
  MutableOptions().token_verifier = std::move(verifier);
  return *this;
}
MessengerBuilder& MessengerBuilder::set_sasl_protocol_name(std::string name) {
  MutableOptions().sasl_proto_name = std::move(name);
  return *this;
}
MessengerBuilder& MessengerBuilder::set_metrics(bool enabled) {
  metrics_ = enabled;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_http_endpoints(bool enabled) {
  http_endpoints_ = enabled;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_http_connection_limits(size_t max_connections,
                                                               MonoDelta idle_timeout) {
  MutableOptions().max_http_connections = max_connections;
  MutableOptions().http_idle_timeout = idle_timeout;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_http_max_connections_per_peer(size_t n) {
  MutableOptions().max_http_connections_per_peer = n;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_http_healthz_reserve(size_t n) {
  MutableOptions().http_healthz_reserve = n;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_http_keepalive_limits(size_t max_requests,
                                                              MonoDelta max_age) {
  MutableOptions().http_max_requests_per_connection = max_requests;
  MutableOptions().http_max_connection_age = max_age;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_http_tls(bool enabled, bool require_client_certificate) {
  http_tls_ = enabled;
  http_tls_require_client_certificate_ = require_client_certificate;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_http_allowed_hosts(std::vector<std::string> hosts) {
  http_allowed_hosts_ = std::move(hosts);
  return *this;
}

MessengerBuilder& MessengerBuilder::set_http_on_rpc_port(bool enabled) {
  http_on_rpc_port_ = enabled;
  return *this;
}
MessengerBuilder& MessengerBuilder::set_reflection(bool enabled) {
  reflection_ = enabled;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_retry_budget(bool enabled, double ratio,
                                                     double min_retries_per_second,
                                                     MonoDelta window) {
  retry_budget_ = enabled;
  retry_budget_ratio_ = ratio;
  retry_budget_min_per_second_ = min_retries_per_second;
  retry_budget_window_ = window;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_client_throttling(bool enabled, double k,
                                                          MonoDelta window) {
  client_throttling_ = enabled;
  throttle_k_ = k;
  throttle_window_ = window;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_registry(std::string target, MonoDelta ttl) {
  registry_ = std::move(target);
  registry_ttl_ = ttl;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_remembered_results(const RememberedResults& remembered) {
  remembered_ = remembered;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_slow_call_threshold(MonoDelta threshold) {
  slow_call_threshold_ = threshold;
  return *this;
}

Status MessengerBuilder::Build(std::shared_ptr<Messenger>* out) const {
  const transport::ConnectionOptions& o = *options_;
  if (num_reactors_ < 1 || num_reactors_ > 1024) {
    return Status::InvalidArgument("number of reactors must be from 1 to 1024, got " +
                                   std::to_string(num_reactors_));
  }
  if (o.max_frame_size < 64 || o.max_frame_size > wire::kMaxMaxFrameSize) {
    return Status::InvalidArgument(
        "max frame size must be from 64 bytes to 2147483647 (INT32_MAX, Kudu's cap), got " +
        std::to_string(o.max_frame_size));
  }
  if (o.max_negotiation_frame_size < 64) {
    return Status::InvalidArgument("max negotiation frame size must be at least 64 bytes, got " +
                                   std::to_string(o.max_negotiation_frame_size));
  }
  if (o.negotiation_timeout <= MonoDelta()) {
    return Status::InvalidArgument("negotiation timeout must be positive");
  }
  if (o.max_http_connections < 1 || o.http_idle_timeout <= MonoDelta()) {
    return Status::InvalidArgument(
        "HTTP connection limits need at least one connection and a positive idle timeout");
  }
  if (o.http_healthz_reserve > kMaxHttpHealthzReserve) {
    return Status::InvalidArgument("set_http_healthz_reserve: at most " +
                                   std::to_string(kMaxHttpHealthzReserve) +
                                   " connections (0: none)");
  }
  if (o.http_max_connection_age < MonoDelta()) {
    return Status::InvalidArgument(
        "set_http_keepalive_limits: the maximum age must not be negative (0: no cap)");
  }
  if (http_on_rpc_port_ == false && !http_endpoints_) {
    return Status::InvalidArgument(
        "set_http_on_rpc_port(false) moves the HTTP endpoints off the RPC port, but they are "
        "off: add set_http_endpoints(true)");
  }
  if (o.idle_timeout <= MonoDelta()) {
    return Status::InvalidArgument("idle timeout must be positive");
  }
  if (o.spin_before_sleep < MonoDelta() || o.spin_before_sleep > MonoDelta::FromMilliseconds(1)) {
    return Status::InvalidArgument("spin before sleep must be from 0 to 1 ms");
  }
  if (o.max_outbound_queue_bytes < o.max_frame_size) {
    return Status::InvalidArgument("max outbound queue bytes must be at least the max frame size");
  }
  if (o.tcp_keepalive.enabled &&
      (o.tcp_keepalive.idle <= MonoDelta() || o.tcp_keepalive.interval <= MonoDelta() ||
       o.tcp_keepalive.count < 1 || o.tcp_keepalive.count > 127)) {
    return Status::InvalidArgument(
        "TCP keepalive needs a positive idle time and interval and a probe count from 1 to 127");
  }
  if (o.tcp_keepalive.user_timeout < MonoDelta()) {
    return Status::InvalidArgument("TCP user timeout must not be negative (0: the kernel's)");
  }
  if (remembered_.response_ttl <= MonoDelta() || remembered_.client_ttl <= MonoDelta() ||
      remembered_.max_bytes == 0) {
    return Status::InvalidArgument(
        "remembered results need positive times to live and a positive byte bound");
  }
  if (remembered_.max_bytes_per_user > remembered_.max_bytes) {
    return Status::InvalidArgument(
        "remembered results: a user's share (max_bytes_per_user) cannot exceed max_bytes");
  }
  if (slow_call_threshold_ < MonoDelta()) {
    return Status::InvalidArgument("slow call threshold must not be negative");
  }
  if (o.tls_client_cert_authentication && (o.encryption == RpcEncryption::kDisabled ||
                                           tls_cert_file_.empty() || tls_ca_file_.empty())) {
    return Status::InvalidArgument(
        "certificate authentication (set_tls_client_cert_authentication) needs rpc_encryption, "
        "a certificate of this side's own (set_tls_certificate_files) and a CA file "
        "(set_tls_ca_file)");
  }
  transport::ConnectionOptions options = o;
  bool files = !tls_cert_file_.empty() || !tls_key_file_.empty() || !tls_ca_file_.empty();
  if (http_tls_) {
    if (!http_endpoints_) {
      return Status::InvalidArgument(
          "set_http_tls: there are no HTTP endpoints to serve (set_http_endpoints(true))");
    }
    if (tls_cert_file_.empty()) {
      return Status::InvalidArgument(
          "set_http_tls: HTTPS needs this server's certificate and key "
          "(set_tls_certificate_files), which clients verify");
    }
    if (http_tls_require_client_certificate_ && tls_ca_file_.empty()) {
      return Status::InvalidArgument(
          "set_http_tls: requiring client certificates needs the CA that signs them "
          "(set_tls_ca_file)");
    }
    transport::TlsOptions tls;
    tls.cert_file = tls_cert_file_;
    tls.key_file = tls_key_file_;
    tls.ca_file = tls_ca_file_;
    std::unique_ptr<transport::TlsContext> http_tls;
    OSPREY_RETURN_NOT_OK(transport::TlsContext::CreateServer(tls, &http_tls));
    options.http_tls = std::move(http_tls);
    options.http_tls_require_client_certificate = http_tls_require_client_certificate_;
  }
  if (options.encryption == RpcEncryption::kDisabled) {
    if (files && !http_tls_) {
      return Status::InvalidArgument(
          "TLS certificate, key or CA files are set but rpc_encryption is disabled (and "
          "set_http_tls is off)");
    }
  } else {
    transport::TlsOptions tls;
    tls.cert_file = tls_cert_file_;
    tls.key_file = tls_key_file_;
    tls.ca_file = tls_ca_file_;
    tls.verify_server_host = tls_verify_server_host_;
    std::unique_ptr<transport::TlsContext> server, client;
    OSPREY_RETURN_NOT_OK(transport::TlsContext::CreateServer(tls, &server));
    OSPREY_RETURN_NOT_OK(transport::TlsContext::CreateClient(tls, &client));
    options.tls_server = std::move(server);
    options.tls_client = std::move(client);
  }
  if (options.sasl_proto_name.empty()) {
    return Status::InvalidArgument("the SASL protocol name must not be empty");
  }
  if (options.authentication != RpcAuthentication::kDisabled) {
    options.blocking_worker = std::make_shared<transport::BlockingWorker>();
  }
  if (!keytab_file_.empty()) {
    if (options.authentication == RpcAuthentication::kDisabled) {
      return Status::InvalidArgument(
          "a keytab file is set but rpc_authentication is disabled: set it to optional or "
          "required");
    }
    OSPREY_RETURN_NOT_OK(transport::KerberosCredentials::ForServer(keytab_file_, principal_,
                                                                   &options.kerberos_server));
    OSPREY_RETURN_NOT_OK(transport::KerberosCredentials::ForClient(keytab_file_, principal_,
                                                                   &options.kerberos_client));
  }
  Messenger::Settings obs;
  obs.metrics = metrics_;
  obs.http_endpoints = http_endpoints_;
  const bool secured =
      o.authentication == RpcAuthentication::kRequired || o.encryption == RpcEncryption::kRequired;
  obs.http_on_rpc_port = http_on_rpc_port_.value_or(!secured);
  if (http_endpoints_ && secured && http_on_rpc_port_ == true) {
    LOG(WARNING) << "messenger " << name_
                 << ": HTTP endpoints are served on the RPC port (set_http_on_rpc_port(true)) "
                    "although rpc_authentication or rpc_encryption is required: anyone who "
                    "reaches the port reads every client's user, address and calls, in the "
                    "clear. Serve them with ListenHttp on an address of their own instead.";
  }
  obs.http_allowed_hosts = http_allowed_hosts_;
  obs.slow_call_threshold = slow_call_threshold_;
  obs.remembered = remembered_;
  if (retry_budget_ &&
      (!(retry_budget_ratio_ >= 0 && retry_budget_ratio_ <= 100) ||
       !(retry_budget_min_per_second_ >= 0 && retry_budget_min_per_second_ <= 1e6) ||
       retry_budget_window_ <= MonoDelta())) {
    return Status::InvalidArgument(
        "set_retry_budget: the ratio must be from 0 to 100, the floor from 0 to 1,000,000 "
        "retries a second and the window above 0");
  }
  if (client_throttling_ &&
      (!(throttle_k_ >= 1 && throttle_k_ <= 1000) || throttle_window_ <= MonoDelta())) {
    return Status::InvalidArgument(
        "set_client_throttling: k must be from 1 to 1000 and the window above 0");
  }
  obs.retry_budget = retry_budget_;
  obs.retry_budget_ratio = retry_budget_ratio_;
  obs.retry_budget_min_per_second = retry_budget_min_per_second_;
  obs.retry_budget_window = retry_budget_window_;
  obs.client_throttling = client_throttling_;
  obs.throttle_k = throttle_k_;
  obs.throttle_window = throttle_window_;
  if (!registry_.empty()) {
    EtcdTarget parsed;
    Status bad = EtcdTarget::Parse(registry_, &parsed);
    if (!bad.ok()) return bad.CloneAndPrepend("set_registry");
    if (registry_ttl_ < MonoDelta::FromSeconds(1)) {
      return Status::InvalidArgument("set_registry: the TTL must be at least 1 s");
    }
  }
  obs.registry = registry_;
  obs.registry_ttl = registry_ttl_;
  std::shared_ptr<Messenger> m(new Messenger(name_, num_reactors_, std::move(options), obs));
  m->self_ = m;
  OSPREY_RETURN_NOT_OK(m->Start());
  if (reflection_) {
    // On the reactors: its answers only copy what the directory holds.
    ServicePoolOptions pool;
    pool.worker_threads = 0;
    Status s = m->RegisterService(std::make_unique<ReflectionService>(m->directory_), pool);
    if (!s.ok()) {
      m->Shutdown();
      return s;
    }
  }
  Messenger* raw = m.get();
  // Users hold references of their own, whose last drop shuts down and
  // frees the messenger wherever it happens (Kudu's retain_self_).
  struct Release {
    std::shared_ptr<Messenger> owner;
    void operator()(Messenger*) { Messenger::LastExternalReferenceDropped(std::move(owner)); }
  };
  *out = std::shared_ptr<Messenger>(raw, Release{std::move(m)});
  return Status::OK();
}

void Messenger::LastExternalReferenceDropped(std::shared_ptr<Messenger> self) {
  if (self->OnOwnThread() || transport::Reactor::OnAnyReactorThread()) {
    // Joining our own thread is impossible, and a reactor (of another
    // messenger) must not stop for the joins: a thread of its own does it.
    std::thread([m = std::move(self)]() mutable {
      m->Shutdown();
      m.reset();
    }).detach();
    return;
  }
  self->Shutdown();
}

bool Messenger::OnOwnThread() {
  for (const auto& r : reactors_) {
    if (r->IsCurrentThread()) return true;
  }
  MutexLock l(mu_);
  for (const auto& [name, pool] : services_) {
    if (pool->OnWorkerThread()) return true;
  }
  return false;
}

namespace {
std::atomic<uint64_t> next_messenger_id{1};
}  // namespace

Messenger::Messenger(std::string name, int num_reactors, transport::ConnectionOptions options,
                     const Settings& obs)
    : inbound_(std::make_unique<InboundHandler>(this)),
      name_(std::move(name)),
      id_(next_messenger_id.fetch_add(1)),
      metrics_(std::make_shared<MessengerMetrics>(obs.metrics, obs.http_endpoints,
                                                  obs.slow_call_threshold, num_reactors,
                                                  open_server_connections_)),
      request_tracker_(std::make_shared<RequestTracker>()),
      directory_(std::make_shared<ServiceDirectory>()),
      result_tracker_(std::make_shared<ResultTracker>(
          ResultTracker::Options{.response_ttl = obs.remembered.response_ttl,
                                 .client_ttl = obs.remembered.client_ttl,
                                 .max_bytes = obs.remembered.max_bytes,
                                 .max_bytes_per_user = obs.remembered.max_bytes_per_user,
                                 .clock = obs.remembered.clock})),
      guard_settings_(obs) {
  options.metrics = metrics_->transport();
  if (metrics_->counting()) {
    MetricRegistry* r = metrics_->registry();
    std::shared_ptr<ResultTracker> t = result_tracker_;
    Status s = r->AddGauge("osprey_server_remembered_answers",
                           "Answers of exactly-once methods kept for the clients' retries.", {},
                           [t] { return static_cast<double>(t->stored_answers()); });
    if (s.ok()) {
      s = r->AddGauge("osprey_server_remembered_bytes",
                      "Bytes the memory of exactly-once requests takes: answers, request "
                      "records, clients and waiting retries (bounded; oldest answers go first).",
                      {}, [t] { return static_cast<double>(t->memory_bytes()); });
    }
    if (s.ok()) {
      s = r->AddGauge("osprey_server_remembered_clients",
                      "Clients whose exactly-once requests this server remembers.", {},
                      [t] { return static_cast<double>(t->clients()); });
    }
    if (s.ok()) {
      s = r->AddGauge("osprey_server_pooled_message_bytes",
                      "Bytes of large request and response messages kept, cleared, for their "
                      "methods' next large calls, over every service in the process (bounded).",
                      {}, [] { return static_cast<double>(MessagePool::total_kept_bytes()); });
    }
    using Counts = ResultTracker::DuplicateCounts;
    const std::pair<const char*, uint64_t Counts::*> outcomes[] = {
        {"after_waiting", &Counts::after_waiting},
        {"from_memory", &Counts::from_memory},
        {"stale", &Counts::stale},
        {"refused", &Counts::refused}};
    for (const auto& [label, field] : outcomes) {
      if (!s.ok()) break;
      s = r->AddCounterFunction(
          "osprey_server_tracked_duplicates_total",
          "Attempts of exactly-once requests that were not the first, by what answered them: "
          "the first attempt when it finished, a stored answer, a stale refusal, or a "
          "refusal (memory full, too many waiting).",
          {{"answer", label}},
          [t, field = field] { return static_cast<double>(t->duplicate_counts().*field); });
    }
    CHECK(s.ok()) << s.ToString();  // fixed, valid names
  }
  options.keepalive = metrics_;
  options.http_connections = transport::HttpConnectionPool::Make(HttpPoolLimits(options));
  transport::ResolveConnectionLimits(&options);
  if (obs.http_endpoints) {
    http_ = std::make_unique<HttpEndpoints>(this);
    options.http_handler = http_.get();
    options.http_on_rpc_port = obs.http_on_rpc_port;
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    options.http_host_check =
        std::make_shared<transport::HttpHostCheck>(obs.http_allowed_hosts, host);
    options.track_calls = true;
  }
  for (int i = 0; i < num_reactors; ++i) {
    reactors_.push_back(std::make_shared<transport::Reactor>(
        name_ + "-reactor-" + std::to_string(i), options, inbound_.get(), i));
  }
}

std::shared_ptr<ServerGuards> Messenger::GuardsFor(const Sockaddr& server, bool retrying) {
  const Settings& g = guard_settings_;
  if (!g.client_throttling && !(retrying && g.retry_budget)) return nullptr;
  auto make = [&g] {
    auto guards = std::make_shared<ServerGuards>();
    if (g.retry_budget) {
      guards->retry_budget = std::make_unique<RetryBudget>(
          g.retry_budget_ratio, g.retry_budget_min_per_second, g.retry_budget_window);
    }
    if (g.client_throttling) {
      guards->throttle = std::make_unique<ClientThrottle>(g.throttle_k, g.throttle_window);
    }
    return guards;
  };
  std::string key = server.ToString();
  MutexLock l(guards_mu_);
  auto it = guards_.find(key);
  if (it != guards_.end()) return it->second;
  if (guards_.size() >= kMaxGuardedServers) {
    // Forget the servers no call is using now, then share one if still full.
    std::erase_if(guards_, [](const auto& e) { return e.second.use_count() == 1; });
    if (guards_.size() >= kMaxGuardedServers) {
      if (overflow_guards_ == nullptr) overflow_guards_ = make();
      return overflow_guards_;
    }
  }
  return guards_.emplace(std::move(key), make()).first->second;
}

MetricRegistry* Messenger::metrics() { return metrics_->registry(); }
SlowCallLog* Messenger::slow_calls() const { return metrics_->slow_calls(); }

ClientMethodMetrics* Messenger::ClientMetricsFor(const RemoteMethod& method) {
  if (!metrics_->counting()) return nullptr;
  struct Entry {
    uint64_t messenger;
    uint64_t method;  // RemoteMethod::id(): the same names, not only the same address
    ClientMethodMetrics* metrics;
  };
  thread_local std::vector<Entry> cache;
  for (const Entry& e : cache) {
    if (e.messenger == id_ && e.method == method.id()) return e.metrics;
  }
  ClientMethodMetrics* found = metrics_->ClientMethod(method.service() + "." + method.method());
  if (cache.size() >= 32) cache.erase(cache.begin());
  cache.push_back({id_, method.id(), found});
  return found;
}

Messenger::~Messenger() {
  // The last owning reference drops on an ordinary thread (see
  // LastExternalReferenceDropped), so this never waits for itself.
  Shutdown();
}

Status Messenger::Start() {
  for (auto& r : reactors_) OSPREY_RETURN_NOT_OK(r->Start());
  return Status::OK();
}

transport::Reactor* Messenger::NextServerReactor() {
  return reactors_[next_server_reactor_.fetch_add(1, std::memory_order_relaxed) % reactors_.size()]
      .get();
}

Status Messenger::Listen(const Sockaddr& addr, Sockaddr* bound) {
  {
    MutexLock l(mu_);
    if (listen_started_) {
      return Status::IllegalState("messenger " + name_ + " is already listening");
    }
    listen_started_ = true;
  }
  Sockaddr actual;
  Status s = AddListener(addr, /*http_only=*/false, &actual);
  if (!s.ok()) {
    MutexLock l(mu_);
    listen_started_ = false;
    return s;
  }
  if (bound) *bound = actual;
  if (!guard_settings_.registry.empty()) Register(actual);
  return s;
}

void Messenger::Register(const Sockaddr& bound) {
  std::string address = bound.ToString();
  if (!bound.is_unix() && (bound.host() == "0.0.0.0" || bound.host() == "::")) {
    // Every interface: the clients dial the host by its name.
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    address = std::string(host) + ":" + std::to_string(bound.port());
  }
  EtcdTarget target;
  Status parsed = EtcdTarget::Parse(guard_settings_.registry, &target);
  CHECK(parsed.ok()) << parsed.ToString();  // Build checked it
  auto reg = std::make_unique<EtcdRegistration>(
      std::move(target), std::vector<std::string>{address}, guard_settings_.registry_ttl);
  reg->Start();
  // Registered when Listen returns, unless etcd is slow or away: then the
  // registration's thread keeps trying, and Listen does not fail for it
  // (the server serves the clients that know it).
  if (!reg->WaitRegistered(MonoDelta::FromSeconds(3))) {
    LOG(WARNING) << "messenger " << name_ << ": " << address << " not registered in "
                 << guard_settings_.registry << " yet; still trying";
  }
  MutexLock l(mu_);
  if (shut_down_) return;  // a shutdown began meanwhile: `reg` withdraws as it goes
  registration_ = std::move(reg);
}

void Messenger::WithdrawRegistration() {
  std::unique_ptr<EtcdRegistration> reg;
  {
    MutexLock l(mu_);
    reg = std::move(registration_);
  }
  if (reg != nullptr) reg->Withdraw();
}

Status Messenger::ListenHttp(const Sockaddr& addr, Sockaddr* bound) {
  if (http_ == nullptr) {
    return Status::IllegalState("messenger " + name_ +
                                " has no HTTP endpoints to serve: build it with "
                                "MessengerBuilder::set_http_endpoints(true)");
  }
  return AddListener(addr, /*http_only=*/true, bound);
}

Status Messenger::AddListener(const Sockaddr& addr, bool http_only, Sockaddr* bound) {
  const std::string what = http_only ? "ListenHttp" : "Listen";
  if (transport::Reactor::OnAnyReactorThread()) {
    return Status::IllegalState(what + " waits for a reactor; it cannot run on a reactor thread");
  }
  {
    MutexLock l(mu_);
    if (shut_down_) return Status::IllegalState("messenger " + name_ + " is shut down");
  }
  using Serves = transport::Acceptor::Serves;
  const transport::ConnectionOptions& options = reactors_.front()->options();
  if (!http_only && options.authentication == RpcAuthentication::kRequired &&
      options.kerberos_server == nullptr) {
    return Status::InvalidArgument(
        "rpc_authentication=required: a server needs a keytab and principal "
        "(MessengerBuilder::set_keytab_file, set_principal) to authenticate its clients");
  }
  Socket listener;
  Sockaddr actual;
  OSPREY_RETURN_NOT_OK(transport::Acceptor::Listen(addr, &listener, &actual));
  transport::Reactor* r = reactors_[0].get();
  // Apart, so that scrapes still connect when RPC clients fill their
  // limit, scrapers never take an RPC client's place, and each HTTP address
  // has a pool of its own (filling one, or the RPC port's, shuts no other).
  auto acceptor = std::make_shared<transport::Acceptor>(
      r, std::move(listener), http_only ? Serves::kHttp : Serves::kRpc,
      [this] { return NextServerReactor(); }, http_only ? nullptr : open_server_connections_,
      http_only ? transport::HttpConnectionPool::Make(HttpPoolLimits(options)) : nullptr);
  Status result;
  CountDownLatch started(1);
  if (!r->Schedule([&] {
        result = acceptor->Start();
        started.CountDown();
      })) {
    return Status::IllegalState("messenger " + name_ + " is shutting down");
  }
  started.Wait();
  OSPREY_RETURN_NOT_OK(result);
  {
    MutexLock l(mu_);
    if (!shut_down_) {
      acceptors_.push_back(std::move(acceptor));
      if (bound) *bound = actual;
      LOG(INFO) << "messenger " << name_ << (http_only ? " serving HTTP on " : " listening on ")
                << actual.ToString();
      return Status::OK();
    }
  }
  StopAcceptors({acceptor});  // Shutdown() began while it started
  return Status::IllegalState("messenger " + name_ + " is shut down");
}

Status Messenger::RegisterService(std::unique_ptr<ServiceIf> service,
                                  const ServicePoolOptions& options) {
  if (!service) return Status::InvalidArgument("null service");
  std::string name = service->service_name();
  auto pool = std::make_shared<ServicePool>(std::move(service), options, metrics_);
  MutexLock l(mu_);
  if (shut_down_) return Status::IllegalState("messenger " + name_ + " is shut down");
  if (services_.count(name)) {
    return Status::IllegalState("service " + name + " is already registered");
  }
  OSPREY_RETURN_NOT_OK(pool->Start());
  directory_->Add(*pool->service());
  services_.emplace(std::move(name), std::move(pool));
  return Status::OK();
}

void Messenger::Shutdown(MonoDelta handler_wait) {
  const MonoTime handler_deadline = MonoTime::Now() + handler_wait;
  const bool own_thread = OnOwnThread();
  std::vector<std::shared_ptr<transport::Acceptor>> acceptors;
  ServiceMap services;
  {
    MutexLock l(mu_);
    if (shut_down_) {
      // A second caller waits for the first, unless it is one of the
      // threads the first waits for.
      while (!shutdown_done_ && !own_thread) shutdown_done_cv_.Wait(&mu_);
      return;
    }
    shut_down_ = true;
    closing_.store(true);
    acceptors = std::move(acceptors_);
    services = services_;  // keep them registered so late calls find them shutting down
  }
  if (own_thread) {
    // From a callback or a handler: the caller's thread is one that the
    // shutdown waits for, so another thread finishes it. The owning
    // reference keeps the messenger alive until then; it exists, since
    // whoever called us holds a reference.
    std::shared_ptr<Messenger> keep = self_.lock();
    CHECK(keep) << "Shutdown() of messenger " << name_ << " from its own thread during destruction";
    std::thread([keep = std::move(keep), acceptors = std::move(acceptors),
                 services = std::move(services), handler_deadline]() mutable {
      keep->FinishShutdown(std::move(acceptors), std::move(services), handler_deadline);
    }).detach();
    return;
  }
  FinishShutdown(std::move(acceptors), std::move(services), handler_deadline);
}

void Messenger::StopAcceptors(const std::vector<std::shared_ptr<transport::Acceptor>>& acceptors) {
  if (acceptors.empty()) return;
  CountDownLatch stopped(1);
  if (reactors_[0]->Schedule([&] {
        for (auto& a : acceptors) a->Stop();
        stopped.CountDown();
      })) {
    stopped.Wait();
  }
  // Refused: reactor 0 has stopped, and each listener closes (its Unix
  // socket file removed) when its Acceptor goes.
}

void Messenger::FinishShutdown(std::vector<std::shared_ptr<transport::Acceptor>> acceptors,
                               ServiceMap services, MonoTime handler_deadline) {
  // Out of the registry before the listener closes (a no-op after Drain).
  WithdrawRegistration();
  StopAcceptors(acceptors);
  // Services first, so the answers to queued calls still go out.
  for (auto& [name, pool] : services) (void)pool->Shutdown(handler_deadline);
  for (auto& r : reactors_) r->Shutdown();
  MutexLock l(mu_);
  shutdown_done_ = true;
  shutdown_done_cv_.Broadcast();
}

namespace {
// How long no call may have been refused, counted from the drain's start
// or its last refusal, whichever is later, before a drain closes the
// connections. Long enough that a client still sending learns of the
// drain from a refusal first: a call it sends as the connection closes is
// lost, its outcome unknown. At 50 ms, one call in 10,000 of
// FleetProcessTest's rolling restart (TSan) was reset so; counted from the
// last refusal only, a drain with none yet closed at once, and lost one
// the same way (FleetTest.ADrainWithNothingHeldStillRefusesACallSentJustAfterItBegan).
constexpr MonoDelta kDrainQuiet = MonoDelta::FromMilliseconds(250);
}  // namespace

void Messenger::Drain(MonoDelta grace) {
  CHECK(!transport::Reactor::OnAnyReactorThread())
      << "Drain() waits for the reactors; it cannot run on a reactor thread";
  const MonoTime deadline = MonoTime::Now() + grace;
  bool has_registration;
  {
    MutexLock l(mu_);
    has_registration = registration_ != nullptr;
  }
  if (has_registration) {
    // Out of the registry first, still serving: the clients watching it
    // stop picking this server within a watch event, and the calls they
    // send meanwhile run here rather than being refused and moved.
    WithdrawRegistration();
    const MonoDelta settle = std::min(MonoDelta::FromMilliseconds(100),
                                      MonoDelta::FromNanoseconds(grace.ToNanoseconds() / 4));
    if (settle > MonoDelta())
      std::this_thread::sleep_for(std::chrono::nanoseconds(settle.ToNanoseconds()));
  }
  if (!draining_.exchange(true, std::memory_order_acq_rel)) {
    LOG(INFO) << "messenger " << name_ << " draining: new calls are refused, the "
              << "calls it holds finish (grace " << grace.ToString() << ")";
  }
  const MonoTime drain_began = MonoTime::Now();
  // The calls it holds: queued or running, or answered and not yet sent.
  while (MonoTime::Now() < deadline) {
    std::vector<ConnectionInfo> connections;
    if (!DumpConnections(&connections).ok()) break;  // already shut down
    size_t held = 0;
    for (const ConnectionInfo& c : connections) {
      if (c.inbound) held += c.calls_in_flight;
    }
    // Its clients saw a refusal and stopped sending: a call still on its
    // way when the connections close would be lost, its outcome unknown.
    const MonoTime last_refusal =
        MonoTime() + MonoDelta::FromNanoseconds(last_drain_refusal_ns_.load());
    const MonoTime quiet_since = std::max(drain_began, last_refusal);
    if (held == 0 && MonoTime::Now() - quiet_since >= kDrainQuiet) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const MonoTime now = MonoTime::Now();
  Shutdown(now < deadline ? deadline - now : MonoDelta());
}

Status Messenger::DumpConnections(std::vector<ConnectionInfo>* out) const {
  out->clear();
  if (transport::Reactor::OnAnyReactorThread()) {
    return Status::IllegalState(
        "DumpConnections waits for every reactor; it cannot run on a reactor thread");
  }
  // Each reactor fills its own part; the latch orders their writes before
  // our reads.
  std::vector<std::vector<ConnectionInfo>> parts(reactors_.size());
  CountDownLatch done(static_cast<int>(reactors_.size()));
  for (size_t i = 0; i < reactors_.size(); ++i) {
    transport::Reactor* r = reactors_[i].get();
    if (!r->Schedule([r, part = &parts[i], &done] {
          size_t total = 0;  // the library's caller gets every connection
          r->CollectConnections(SIZE_MAX, part, &total);
          done.CountDown();
        })) {
      done.CountDown();
    }
  }
  done.Wait();
  for (auto& part : parts) out->insert(out->end(), part.begin(), part.end());
  if (closing_.load()) return Status::IllegalState("messenger " + name_ + " is shut down");
  return Status::OK();
}

void Messenger::QueueCall(std::shared_ptr<OutboundCall> call, bool sync,
                          transport::ParkedConnection* parked) {
  transport::Reactor* r =
      reactors_[transport::ConnectionKeyHash()(call->destination()) % reactors_.size()].get();
  call->set_reactor_for_cancel(r);
  if (closing_.load()) {
    call->FailUnsent(Status::Aborted("messenger " + name_ + " is shut down"));
    return;
  }
  // A blocking caller sends its call itself when the reactor sleeps: that
  // saves waking the reactor only to write one frame.
  if (sync && r->TryRunHere([&] {
        r->AssignCall(call);
        if (parked != nullptr) *parked = r->ParkForCaller(call.get());
      })) {
    return;
  }
  // Runs on the reactor; if the reactor already stopped, fail it here
  // (ScheduleCall leaves the call with us when it refuses it).
  std::shared_ptr<transport::ClientCall> client_call = std::move(call);
  if (!r->ScheduleCall(std::move(client_call))) {
    client_call->FailUnsent(Status::Aborted("messenger " + name_ + " is shut down"));
  }
}

namespace {

// The calls for workers that one read of a connection brought, queued
// together at its end (InboundCallHandler::EndOfInboundCalls) with one lock
// of their service's queue rather than one each. Per thread: reactors, and
// workers reading their own connection, decode requests. At most
// kMaxHeldCalls, and never held past the read.
struct HeldCalls {
  std::shared_ptr<ServicePool> pool;
  std::vector<std::unique_ptr<InboundCall>> calls;
};
thread_local HeldCalls tls_held_calls;
constexpr size_t kMaxHeldCalls = 64;

void QueueHeldCalls() {
  HeldCalls& held = tls_held_calls;
  if (held.calls.empty()) return;
  std::shared_ptr<ServicePool> pool = std::move(held.pool);
  held.pool.reset();
  pool->QueueInboundCalls(&held.calls);
}

}  // namespace

class Messenger::InboundHandler final : public transport::InboundCallHandler {
 public:
  explicit InboundHandler(Messenger* m) : m_(m) {}
  // Reactor thread of `conn`.
  void HandleInboundCall(const std::shared_ptr<transport::Connection>& conn,
                         wire::InboundRequest frame, transport::InboundCallTrace* trace) override;
  void EndOfInboundCalls() override { QueueHeldCalls(); }
  void ConnectionClosed(const transport::Connection* conn) override;

 private:
  Messenger* const m_;
};

void Messenger::InboundHandler::HandleInboundCall(
    const std::shared_ptr<transport::Connection>& conn, wire::InboundRequest frame,
    transport::InboundCallTrace* trace) {
  Messenger* m = m_;
  auto call = std::make_unique<InboundCall>(conn, std::move(frame));
  if (trace != nullptr) call->set_trace(trace);
  if (m->draining_.load(std::memory_order_relaxed)) {
    m->last_drain_refusal_ns_.store((conn->reactor()->loop_time() - MonoTime()).ToNanoseconds());
    // ERROR_UNAVAILABLE: retried by Kudu's client as by ours, which moves
    // it to another server of its set; the text says it did not run.
    call->RespondFailure(wire::ErrorStatusPB::ERROR_UNAVAILABLE,
                         Status::ServiceUnavailable("server " + m->name_ +
                                                    " is draining: this call did not run; "
                                                    "send it to another server"));
    return;
  }
  std::string_view service_name = call->remote_method().service_name();
  std::shared_ptr<ServicePool> pool;
  HeldCalls& held = tls_held_calls;
  if (held.pool != nullptr && held.pool->service()->service_name() == service_name) {
    pool = held.pool;  // a service is never unregistered: no need to look again
  } else {
    MutexLock l(m->mu_);
    auto it = m->services_.find(service_name);
    if (it != m->services_.end()) pool = it->second;
  }
  if (!pool) {
    call->RespondFailure(wire::ErrorStatusPB::ERROR_NO_SUCH_SERVICE,
                         Status::NotFound("service " + std::string(service_name) +
                                          " is not registered on " + m->name_));
    return;
  }
  const ServiceMethod* method = pool->service()->FindMethod(call->remote_method().method_name());
  if (method == nullptr) {
    call->RespondFailure(
        wire::ErrorStatusPB::ERROR_NO_SUCH_METHOD,
        Status::NotFound("service " + std::string(service_name) + " has no method " +
                         std::string(call->remote_method().method_name())));
    return;
  }
  if (!call->required_feature_flags().empty()) {
    std::vector<uint32_t> unsupported;
    for (uint32_t f : call->required_feature_flags()) {
      if (!pool->service()->SupportsFeature(f)) unsupported.push_back(f);
    }
    if (!unsupported.empty()) {
      call->RespondUnsupportedFeatures(unsupported);
      return;
    }
  }
  const ServicePool::MethodObservers* observers = pool->ObserversFor(method);
  call->set_method(method, observers != nullptr ? observers->metrics : nullptr,
                   m->metrics_->slow_calls());
  if (call->trace() != nullptr && observers != nullptr) {
    call->trace()->method.store(&observers->label, std::memory_order_release);
  }
  // Exactly once: a retry of a request this server has seen is answered,
  // not run. (A call of such a method without a request id just runs.)
  // The id is checked here; the tracker sees the call once it is authorized.
  if (method->track_result && call->has_request_id()) {
    wire::RequestIdPB id;
    std::string_view bytes = call->request_id_pb();
    if (!id.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      call->RespondFailure(wire::ErrorStatusPB::ERROR_INVALID_REQUEST,
                           Status::InvalidArgument("the request_id does not parse as RequestIdPB"));
      return;
    }
    // Tracked once authorized (ServiceIf::Handle), as Kudu does.
    call->set_request_id(m->result_tracker_, std::move(id));
  }
  if (!pool->has_workers()) {
    pool->QueueInboundCall(std::move(call));  // runs it here, now
    return;
  }
  if (held.pool != pool) QueueHeldCalls();
  held.pool = std::move(pool);
  held.calls.push_back(std::move(call));
  if (held.calls.size() >= kMaxHeldCalls) QueueHeldCalls();
}

void Messenger::InboundHandler::ConnectionClosed(const transport::Connection* conn) {
  std::vector<std::shared_ptr<ServicePool>> pools;
  {
    MutexLock l(m_->mu_);
    pools.reserve(m_->services_.size());
    for (const auto& [name, pool] : m_->services_) pools.push_back(pool);
  }
  for (const auto& pool : pools) pool->DropCallsOf(conn);
}

}  // namespace osprey
