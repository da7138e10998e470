#include "osprey/rpc/messenger.h"

#include <glog/logging.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "osprey/base/countdown_latch.h"
#include "osprey/base/thread_name.h"
#include "osprey/rpc/etcd_registry.h"
#include "osprey/rpc/http_endpoints.h"
#include "osprey/rpc/messenger_inbound.h"
#include "osprey/rpc/messenger_metrics.h"
#include "osprey/rpc/outbound_call.h"
#include "osprey/rpc/reflection_service.h"  // ServiceDirectory
#include "osprey/rpc/request_tracker.h"
#include "osprey/rpc/result_tracker.h"
#include "osprey/rpc/rpc_metrics.h"
#include "osprey/rpc/service_pool.h"
#include "osprey/rpc/shared_etcd_watch.h"
#include "osprey/rpc/slow_call_log.h"
#include "osprey/transport/acceptor.h"
#include "osprey/transport/client_call.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/connection_options.h"
#include "osprey/transport/http_connection_pool.h"
#include "osprey/transport/http_host_check.h"
#include "osprey/transport/reactor.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey {

namespace {
transport::HttpConnectionPool::Limits HttpPoolLimits(const transport::ConnectionOptions& o) {
  return {.max_connections = o.max_http_connections,
          .max_per_peer = o.max_http_connections_per_peer,
          .healthz_reserve = o.http_healthz_reserve};
}
}  // namespace

void Messenger::LastExternalReferenceDropped(std::shared_ptr<Messenger> self) {
  if (self->OnOwnThread() || transport::Reactor::OnAnyReactorThread()) {
    // Joining our own thread is impossible, and a reactor (of another
    // messenger) must not stop for the joins: a thread of its own does it.
    std::thread([m = std::move(self)]() mutable {
      SetCurrentThreadName("osp-shutdown");
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
      guard_settings_(obs),
      etcd_watches_(obs.share_etcd_watches ? std::make_shared<EtcdWatches>() : nullptr) {
  options.metrics = metrics_->transport();
  if (metrics_->counting()) AddRememberedAnswerMetrics(metrics_->registry(), result_tracker_);
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
  const ClientGuardOptions& g = guard_settings_.guards;
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
  target.tls_files = etcd_tls_files();
  target.credentials = etcd_credentials();
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

EtcdCredentials Messenger::etcd_credentials() const {
  return {guard_settings_.etcd_user, guard_settings_.etcd_password};
}

EtcdTlsFiles Messenger::etcd_tls_files() const {
  return {guard_settings_.etcd_ca_file, guard_settings_.etcd_cert_file,
          guard_settings_.etcd_key_file};
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
      SetCurrentThreadName("osp-shutdown");
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
  // The etcd watches no proxy holds: their threads end now.
  if (etcd_watches_ != nullptr) etcd_watches_->Trim(0);
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

}  // namespace osprey
