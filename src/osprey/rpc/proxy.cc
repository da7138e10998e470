#include "osprey/rpc/proxy.h"

#include <glog/logging.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <type_traits>

#include "osprey/base/user.h"
#include "osprey/rpc/etcd_registry.h"
#include "osprey/rpc/hedger.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/messenger_metrics.h"
#include "osprey/rpc/name_resolution.h"
#include "osprey/rpc/outbound_call.h"
#include "osprey/rpc/request_tracker.h"
#include "osprey/rpc/server_set.h"
#include "osprey/transport/caller_wait.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/reactor.h"

namespace osprey {

Proxy::Proxy(std::shared_ptr<Messenger> messenger, const Sockaddr& remote, std::string service_name)
    : messenger_(std::move(messenger)),
      remote_(remote),
      host_(remote.is_unix() ? "" : remote.host()),
      service_name_(std::move(service_name)),
      user_(CurrentUserName()) {}

namespace {
// An etcd target's watch on the client's /metrics, by target: whether it is
// established now (0 while etcd is unreachable and the calls go to the last
// known servers), how often it had to be made again, and how many servers
// the set holds. A later proxy of the same target takes the series over;
// once no proxy holds the set it reads 0 (no watch, no servers).
void AddRegistryMetrics(MetricRegistry* r, const std::string& target,
                        const std::shared_ptr<ServerSet>& set) {
  std::weak_ptr<ServerSet> weak = set;
  const MetricLabels labels = {{"target", target}};
  Status s = r->AddGauge(
      "osprey_client_registry_connected",
      "1 while the watch of this etcd target is established; 0 while etcd is unreachable and "
      "calls go to the servers last known.",
      labels, [weak] {
        std::shared_ptr<ServerSet> p = weak.lock();
        return p != nullptr && p->registry_connected() ? 1.0 : 0.0;
      });
  if (s.ok()) {
    s = r->AddCounterFunction(
        "osprey_client_registry_reconnects_total",
        "Times the watch of this etcd target had to be made again (etcd went away or lost it).",
        labels, [weak] {
          std::shared_ptr<ServerSet> p = weak.lock();
          return p != nullptr ? static_cast<double>(p->registry_reconnects()) : 0.0;
        });
  }
  if (s.ok()) {
    s = r->AddGauge("osprey_client_registry_servers",
                    "Servers the client knows under this etcd target now.", labels, [weak] {
                      std::shared_ptr<ServerSet> p = weak.lock();
                      return p != nullptr ? static_cast<double>(p->size()) : 0.0;
                    });
  }
  CHECK(s.ok()) << s.ToString();  // fixed, valid names
}
}  // namespace

Proxy::Proxy(std::shared_ptr<Messenger> messenger, std::string host_port, std::string service_name)
    : messenger_(std::move(messenger)),
      host_port_(std::move(host_port)),
      host_(Sockaddr::HostOf(host_port_)),
      service_name_(std::move(service_name)),
      user_(CurrentUserName()) {
  if (ServerSet::IsSetTarget(host_port_)) {
    ServerSet::Options options;
    options.etcd_tls = messenger_->etcd_tls_files();
    options.etcd_credentials = messenger_->etcd_credentials();
    options.etcd_watch_probe_after = messenger_->etcd_watch_probe_after();
    options.etcd_watches = messenger_->etcd_watches();
    servers_status_ = ServerSet::Make(host_port_, std::move(options), &servers_);
    if (servers_ != nullptr && EtcdTarget::IsEtcd(host_port_) && messenger_->metrics_->counting()) {
      AddRegistryMetrics(messenger_->metrics(), host_port_, servers_);
    }
    hedge_counters_ = std::make_shared<HedgeCounters>();
    if (messenger_->default_hedging().enabled) {
      std::shared_ptr<Hedger> hedger = MakeHedger(messenger_->default_hedging());
      MutexLock l(settings_mu_);
      hedger_ = std::move(hedger);
    }
  } else {
    resolution_ = std::make_shared<NameResolution>(host_port_);
  }
}

Proxy::~Proxy() = default;

Status Proxy::NoServers(const RemoteMethod& method) const {
  // Only an etcd target can be empty: a prefix where no server is
  // registered (yet, or any more), or one etcd has not let it read (down,
  // or refusing its user), which the caller is told rather than "none".
  const std::string call = method.service() + "." + method.method() + " RPC to " + host_port_;
  const Status etcd = servers_->registry_error();
  if (!etcd.ok() && !servers_->registry_connected()) {
    return Status::ServiceUnavailable(call + ": no server known; etcd could not be read (" +
                                      etcd.ToString() + ")");
  }
  return Status::ServiceUnavailable(call + ": no server is registered there");
}

void Proxy::set_user(std::string user) {
  MutexLock l(settings_mu_);
  user_ = std::move(user);
}

Status Proxy::set_retry_policy(const RetryPolicy& policy) {
  OSPREY_RETURN_NOT_OK(policy.Validate());
  MutexLock l(settings_mu_);
  retry_policy_ = policy;
  return Status::OK();
}

Sockaddr Proxy::remote() const {
  if (servers_ != nullptr) return servers_->first();
  return resolution_ != nullptr ? resolution_->first() : remote_;
}

bool Proxy::registry_connected() const {
  return servers_ == nullptr || servers_->registry_connected();
}

std::shared_ptr<Hedger> Proxy::MakeHedger(const HedgingPolicy& policy) const {
  // A hedge is queued as a retry is: on the messenger, if it still exists.
  std::weak_ptr<Messenger> weak = messenger_;
  return std::make_shared<Hedger>(
      policy, hedge_counters_, [weak](std::shared_ptr<OutboundCall> hedge) {
        std::shared_ptr<Messenger> m = weak.lock();
        if (m == nullptr) {
          hedge->FailUnsent(Status::Aborted(hedge->Describe() + ": the messenger is gone"));
          return;
        }
        m->QueueCall(std::move(hedge), /*sync=*/false);
      });
}

Status Proxy::set_hedging(const HedgingPolicy& policy) {
  OSPREY_RETURN_NOT_OK(policy.Validate());
  if (servers_ == nullptr) return Status::OK();
  std::shared_ptr<Hedger> hedger = policy.enabled ? MakeHedger(policy) : nullptr;
  MutexLock l(settings_mu_);
  hedger_ = std::move(hedger);
  return Status::OK();
}

HedgeStats Proxy::hedging_stats() const {
  return hedge_counters_ == nullptr ? HedgeStats() : hedge_counters_->Snapshot();
}

void Proxy::set_load_balancing(LoadBalancing lb) {
  if (servers_ != nullptr) servers_->set_lb(lb);
}

void Proxy::set_outlier_detection(bool on) {
  if (servers_ != nullptr) servers_->set_ejection(on);
}

std::vector<ServerReport> Proxy::servers() const {
  return servers_ == nullptr ? std::vector<ServerReport>() : servers_->Report();
}

void Proxy::AsyncRequest(const std::string& method, const google::protobuf::Message& request,
                         google::protobuf::Message* response, RpcController* controller,
                         ResponseCallback callback) const {
  auto owned = std::make_unique<RemoteMethod>(service_name_, method);
  const RemoteMethod* m = owned.get();
  StartCall(m, std::move(owned), request, response, controller, std::move(callback),
            /*sync=*/false);
}

void Proxy::AsyncRequest(const RemoteMethod& method, const google::protobuf::Message& request,
                         google::protobuf::Message* response, RpcController* controller,
                         ResponseCallback callback) const {
  StartCall(&method, nullptr, request, response, controller, std::move(callback),
            /*sync=*/false);
}

void Proxy::StartCall(const RemoteMethod* method, std::unique_ptr<RemoteMethod> owned,
                      const google::protobuf::Message& request, google::protobuf::Message* response,
                      RpcController* controller, ResponseCallback callback, bool sync,
                      transport::ParkedConnection* parked) const {
  auto call = std::make_shared<OutboundCall>(method, std::move(owned), request, response,
                                             controller, std::move(callback));
  RpcController::CallStart start = controller->StartCall(call);
  call->set_sidecars(std::move(start.sidecars));
  const Sockaddr* remote = &remote_;
  const std::string* host = &host_;
  std::shared_ptr<const std::vector<Sockaddr>> addresses;
  if (servers_ != nullptr) {
    // A set: this call's server, picked now (resolving a "dns:" name again
    // if it is due, unless on a reactor thread, which must not block).
    ServerSet::EntryPtr server =
        servers_->Pick(start.hash_key, nullptr, !transport::Reactor::OnAnyReactorThread());
    if (server == nullptr) {
      call->FailUnsent(NoServers(*method));
      return;
    }
    remote = &server->address;
    host = &server->host;
    call->set_server(servers_, std::move(server));
  } else if (!servers_status_.ok()) {
    call->FailUnsent(servers_status_);
    return;
  } else if (resolution_ != nullptr) {
    Status resolved = resolution_->Addresses(&addresses);
    if (!resolved.ok()) {
      call->FailUnsent(resolved);
      return;
    }
    remote = &addresses->front();
    call->set_resolution(resolution_);
    if (addresses->size() > 1) call->set_fallbacks(addresses, 1);
  }
  std::string user;
  RetryPolicy proxy_policy;
  std::shared_ptr<Hedger> hedger;
  {
    MutexLock l(settings_mu_);
    user = user_;
    if (!start.retry_policy) proxy_policy = retry_policy_;
    if (hedger_ != nullptr) hedger = hedger_;
  }
  // The call's mark or its method's (the .proto's idempotency_level).
  const bool idempotent = start.idempotent || method->idempotent();
  call->set_destination({*remote, user, *host});
  call->set_observers(messenger_->ClientMetricsFor(*method), messenger_->slow_calls());
  if (method->track_result()) {
    const std::shared_ptr<RequestTracker>& tracker = messenger_->request_tracker();
    call->set_request_id(tracker, tracker->Begin());
  }
  const RetryPolicy& policy = start.retry_policy ? *start.retry_policy : proxy_policy;
  if (std::shared_ptr<ServerGuards> guards =
          messenger_->GuardsFor(*remote, policy.max_attempts > 1)) {
    MonoTime now = MonoTime::Now();
    if (guards->throttle != nullptr) {
      thread_local std::mt19937_64 draw(std::random_device{}());
      if (guards->throttle->ShouldRefuse(now, std::uniform_real_distribution<double>(0, 1)(draw))) {
        // Before set_retry: refused here, it is not retried either.
        call->FailUnsent(Status::ServiceUnavailable(
            method->service() + "." + method->method() + " RPC to " + remote->ToString() +
            " refused by the client's adaptive throttling: the server has refused most calls "
            "lately"));
        return;
      }
    }
    if (guards->retry_budget != nullptr && policy.max_attempts > 1) {
      guards->retry_budget->RecordCall(now);
    }
    call->set_guards(std::move(guards));
  }
  if (servers_ != nullptr) {
    // A retry or a move picks its server again (OutboundCall::set_server):
    // another than the last unless the call may have run there.
    std::weak_ptr<Messenger> weak = messenger_;
    call->set_retry(policy, idempotent,
                    [weak, servers = servers_, user = user,
                     key = start.hash_key](std::shared_ptr<OutboundCall> next) {
                      std::shared_ptr<Messenger> m = weak.lock();
                      if (m == nullptr) {
                        next->FailUnsent(Status::Aborted(next->Describe() +
                                                         ": the messenger is gone; not retried"));
                        return;
                      }
                      ServerSet::EntryPtr server =
                          next->pinned_to_server()
                              ? servers->Keep(next->server())
                              : servers->Pick(key, next->server().get(), /*may_resolve=*/false);
                      if (server == nullptr) {
                        // The registry's servers all went since the call began.
                        next->FailUnsent(Status::ServiceUnavailable(
                            next->Describe() + ": no server is registered under the target now"));
                        return;
                      }
                      next->set_destination({server->address, user, server->host});
                      next->set_server(servers, std::move(server));
                      m->QueueCall(std::move(next), /*sync=*/false);
                    });
  } else if (policy.max_attempts > 1) {
    // A retry goes to the same address (a named proxy's last resolution,
    // without resolving on the reactor thread), on the same messenger if it
    // still exists.
    std::weak_ptr<Messenger> weak = messenger_;
    call->set_retry(policy, idempotent,
                    [weak, to = *remote, user = std::move(user), host = host_,
                     addresses = addresses](std::shared_ptr<OutboundCall> next) {
                      std::shared_ptr<Messenger> m = weak.lock();
                      if (m == nullptr) {
                        next->FailUnsent(Status::Aborted(next->Describe() +
                                                         ": the messenger is gone; not retried"));
                        return;
                      }
                      if (addresses != nullptr && addresses->size() > 1) {
                        next->set_fallbacks(addresses, 1);
                      }
                      next->set_destination({to, user, host});
                      m->QueueCall(std::move(next), /*sync=*/false);
                    });
  }
  if (hedger != nullptr) {
    // A set whose proxy hedges (the rest pay nothing above): when, if ever.
    LatencyWindow* window = nullptr;
    if (std::optional<MonoDelta> delay =
            hedger->Plan(*method, idempotent, method->track_result(), servers_->size(), &window)) {
      call->set_hedging(std::move(hedger), window, MonoTime::Now() + *delay, start.hash_key);
    }
  }
  // A sync call's callback only counts down the caller's latch.
  if (sync) call->set_completion_runs_no_user_code();
  if (!request.IsInitialized()) {
    call->FailUnsent(
        Status::InvalidArgument("request for " + method->service() + "." + method->method() +
                                " lacks required fields: " + request.InitializationErrorString()));
    return;
  }
  messenger_->QueueCall(std::move(call), sync, parked);
}

template <class M>
Status Proxy::WaitFor(const M& method, const google::protobuf::Message& request,
                      google::protobuf::Message* response, RpcController* controller) const {
  if (transport::Reactor::OnAnyReactorThread()) {
    return Status::IllegalState(
        "a synchronous call from a reactor thread (or a handler run in a reactor's place) "
        "would deadlock; use the async call in callbacks and reactor-run handlers");
  }
  const RemoteMethod* m;
  std::unique_ptr<RemoteMethod> owned;
  if constexpr (std::is_same_v<M, RemoteMethod>) {
    m = &method;
  } else {
    owned = std::make_unique<RemoteMethod>(service_name_, method);
    m = owned.get();
  }
  // The caller's wait and how it is woken (caller reads, the self-wake
  // rule) are the transport's: CallerWait.
  transport::CallerWait wait;
  StartCall(
      m, std::move(owned), request, response, controller, [&wait] { wait.Finish(); },
      /*sync=*/true, wait.parked());
  wait.Wait();
  return controller->status();
}

Status Proxy::SyncRequest(const std::string& method, const google::protobuf::Message& request,
                          google::protobuf::Message* response, RpcController* controller) const {
  return WaitFor(method, request, response, controller);
}

Status Proxy::SyncRequest(const RemoteMethod& method, const google::protobuf::Message& request,
                          google::protobuf::Message* response, RpcController* controller) const {
  return WaitFor(method, request, response, controller);
}

}  // namespace osprey
