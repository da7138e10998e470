// MessengerBuilder: its settings and Build, which checks them together
// and makes the Messenger (split from messenger.cc, issue 48).
#include <glog/logging.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include "osprey/base/ip_network.h"
#include "osprey/rpc/etcd_registry.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/reflection_service.h"
#include "osprey/rpc/service_pool.h"
#include "osprey/transport/blocking_worker.h"
#include "osprey/transport/connection_options.h"
#include "osprey/transport/sasl_gssapi.h"
#include "osprey/transport/tls_context.h"

namespace osprey {

namespace {
// A reserve beyond this would be a second pool, not room for probes.
constexpr size_t kMaxHttpHealthzReserve = 1024;

// set_num_reactors' default: 4, or the CPUs the calling thread may run on
// when fewer (4 when the mask cannot be read, e.g. over 1024 CPUs).
int DefaultNumReactors() {
  constexpr int kMost = 4;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return kMost;
  return std::clamp(CPU_COUNT(&cpus), 1, kMost);
}

// set_etcd_credentials: the first line of `file` (its line break not
// counted), at most 1 KiB, not empty. Messages name the file, never what
// it holds.
Status ReadEtcdPassword(const std::string& user, const std::string& file, std::string* password) {
  constexpr size_t kMaxPasswordBytes = 1024;
  if (user.empty() != file.empty()) {
    return Status::InvalidArgument(
        "set_etcd_credentials: give both a user and a password file, or neither");
  }
  if (user.empty()) return Status::OK();
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument("set_etcd_credentials: cannot read " + file + ": " +
                                   std::strerror(errno));
  }
  std::string line(kMaxPasswordBytes + 2, '\0');
  in.read(line.data(), static_cast<std::streamsize>(line.size()));
  line.resize(static_cast<size_t>(in.gcount()));
  line = line.substr(0, line.find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.size() > kMaxPasswordBytes) {
    return Status::InvalidArgument("set_etcd_credentials: the first line of " + file +
                                   " is longer than 1 KiB");
  }
  if (line.empty()) {
    return Status::InvalidArgument("set_etcd_credentials: " + file + " holds no password");
  }
  *password = std::move(line);
  return Status::OK();
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
MessengerBuilder& MessengerBuilder::set_trusted_subnets(std::vector<std::string> cidrs) {
  trusted_subnets_ = std::move(cidrs);
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

MessengerBuilder& MessengerBuilder::set_http_spnego(bool enabled, std::string principal,
                                                    std::string keytab_file) {
  http_spnego_ = enabled;
  http_spnego_principal_ = std::move(principal);
  http_spnego_keytab_file_ = std::move(keytab_file);
  return *this;
}

MessengerBuilder& MessengerBuilder::set_http_readers(std::vector<std::string> users) {
  http_readers_ = std::move(users);
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
  guards_.retry_budget = enabled;
  guards_.retry_budget_ratio = ratio;
  guards_.retry_budget_min_per_second = min_retries_per_second;
  guards_.retry_budget_window = window;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_client_throttling(bool enabled, double k,
                                                          MonoDelta window) {
  guards_.client_throttling = enabled;
  guards_.throttle_k = k;
  guards_.throttle_window = window;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_hedging(const HedgingPolicy& policy) {
  hedging_ = policy;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_registry(std::string target, MonoDelta ttl) {
  registry_ = std::move(target);
  registry_ttl_ = ttl;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_etcd_tls(std::string ca_file, std::string cert_file,
                                                 std::string key_file) {
  etcd_ca_file_ = std::move(ca_file);
  etcd_cert_file_ = std::move(cert_file);
  etcd_key_file_ = std::move(key_file);
  return *this;
}

MessengerBuilder& MessengerBuilder::set_etcd_credentials(std::string user,
                                                         std::string password_file) {
  etcd_user_ = std::move(user);
  etcd_password_file_ = std::move(password_file);
  return *this;
}

MessengerBuilder& MessengerBuilder::set_etcd_watch_probe(MonoDelta after_silence) {
  etcd_watch_probe_after_ = after_silence;
  return *this;
}

MessengerBuilder& MessengerBuilder::set_share_etcd_watches(bool on) {
  share_etcd_watches_ = on;
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
  const int num_reactors = num_reactors_.value_or(DefaultNumReactors());
  if (num_reactors < 1 || num_reactors > 1024) {
    return Status::InvalidArgument("number of reactors must be from 1 to 1024, got " +
                                   std::to_string(num_reactors));
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
  auto trusted = std::make_shared<std::vector<IpNetwork>>();
  if (Status bad = IpNetwork::ParseList(trusted_subnets_.value_or(KuduDefaultTrustedSubnets()),
                                        trusted.get());
      !bad.ok()) {
    return bad.CloneAndPrepend("set_trusted_subnets");
  }
  if (!trusted_subnets_.has_value()) {
    std::vector<IpNetwork> local;
    Status s = LocalIpNetworks(&local);
    LOG_IF(WARNING, !s.ok()) << "messenger " << name_
                             << ": this host's networks are not trusted subnets: " << s.ToString();
    trusted->insert(trusted->end(), local.begin(), local.end());
  }
  options.trusted_subnets = std::move(trusted);
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
  if (http_spnego_) {
    if (!http_endpoints_) {
      return Status::InvalidArgument(
          "set_http_spnego: there are no HTTP endpoints to log in to (set_http_endpoints(true))");
    }
    const std::string& keytab =
        http_spnego_keytab_file_.empty() ? keytab_file_ : http_spnego_keytab_file_;
    if (keytab.empty()) {
      return Status::InvalidArgument("set_http_spnego: no keytab for " + http_spnego_principal_ +
                                     ": give one, or set_keytab_file");
    }
    Status s = transport::KerberosCredentials::ForServer(keytab, http_spnego_principal_,
                                                         &options.http_spnego);
    if (!s.ok()) return s.CloneAndPrepend("set_http_spnego");
  }
  if (!http_readers_.empty()) {
    if (!http_spnego_) {
      return Status::InvalidArgument(
          "set_http_readers: the pages have no login to tell who reads them (set_http_spnego)");
    }
    for (const std::string& user : http_readers_) {
      if (user.empty() || user.find_first_of(" \t@/") != std::string::npos) {
        return Status::InvalidArgument("set_http_readers: '" + user +
                                       "' is not a user name (a principal's local name, "
                                       "such as 'alice')");
      }
    }
    options.http_readers =
        std::make_shared<const std::set<std::string>>(http_readers_.begin(), http_readers_.end());
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
  if (guards_.retry_budget &&
      (!(guards_.retry_budget_ratio >= 0 && guards_.retry_budget_ratio <= 100) ||
       !(guards_.retry_budget_min_per_second >= 0 && guards_.retry_budget_min_per_second <= 1e6) ||
       guards_.retry_budget_window <= MonoDelta())) {
    return Status::InvalidArgument(
        "set_retry_budget: the ratio must be from 0 to 100, the floor from 0 to 1,000,000 "
        "retries a second and the window above 0");
  }
  if (guards_.client_throttling && (!(guards_.throttle_k >= 1 && guards_.throttle_k <= 1000) ||
                                    guards_.throttle_window <= MonoDelta())) {
    return Status::InvalidArgument(
        "set_client_throttling: k must be from 1 to 1000 and the window above 0");
  }
  obs.guards = guards_;
  std::string etcd_password;
  OSPREY_RETURN_NOT_OK(ReadEtcdPassword(etcd_user_, etcd_password_file_, &etcd_password));
  if (!registry_.empty()) {
    EtcdTarget parsed;
    Status bad = EtcdTarget::Parse(registry_, &parsed);
    if (!bad.ok()) return bad.CloneAndPrepend("set_registry");
    parsed.credentials.user = etcd_user_;
    bad = parsed.CheckCredentials();
    if (!bad.ok()) return bad.CloneAndPrepend("set_registry");
    if (registry_ttl_ < MonoDelta::FromSeconds(1)) {
      return Status::InvalidArgument("set_registry: the TTL must be at least 1 s");
    }
  }
  if (etcd_cert_file_.empty() != etcd_key_file_.empty()) {
    return Status::InvalidArgument(
        "set_etcd_tls: give both a certificate file and its key file, or neither");
  }
  for (const std::string* f : {&etcd_ca_file_, &etcd_cert_file_, &etcd_key_file_}) {
    if (!f->empty() && access(f->c_str(), R_OK) != 0) {
      return Status::InvalidArgument("set_etcd_tls: cannot read " + *f + ": " +
                                     std::strerror(errno));
    }
  }
  const MonoDelta etcd_watch_probe_after =
      etcd_watch_probe_after_.value_or(EtcdWatchTimeouts().probe_after);
  if (etcd_watch_probe_after < MonoDelta()) {
    return Status::InvalidArgument("set_etcd_watch_probe: the silence must be zero (off) or more");
  }
  if (Status bad = hedging_.Validate(); !bad.ok()) return bad.CloneAndPrepend("set_hedging");
  obs.hedging = hedging_;
  obs.registry = registry_;
  obs.registry_ttl = registry_ttl_;
  obs.etcd_ca_file = etcd_ca_file_;
  obs.etcd_cert_file = etcd_cert_file_;
  obs.etcd_key_file = etcd_key_file_;
  obs.etcd_watch_probe_after = etcd_watch_probe_after;
  obs.share_etcd_watches = share_etcd_watches_;
  obs.etcd_user = etcd_user_;
  obs.etcd_password = std::move(etcd_password);
  std::shared_ptr<Messenger> m(new Messenger(name_, num_reactors, std::move(options), obs));
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

}  // namespace osprey
