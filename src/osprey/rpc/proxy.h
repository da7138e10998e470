// Proxy: the client side of one service at one address, or at a set of
// servers that serve it alike (a target, see below). Generated proxies
// (FooServiceProxy) wrap it with typed methods. Thread-safe: many threads
// may share one proxy, and change its settings while others call through
// it (a call uses the settings of the moment it starts); each call needs
// its own RpcController.
#pragma once

#include <google/protobuf/message.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/rpc/hedging.h"
#include "osprey/rpc/load_balancer.h"
#include "osprey/rpc/remote_method.h"
#include "osprey/rpc/rpc_controller.h"

namespace osprey {

class Hedger;
struct HedgeCounters;
class Messenger;
class NameResolution;
class ServerSet;
namespace transport {
struct ParkedConnection;
}  // namespace transport
using ResponseCallback = std::function<void()>;

class Proxy {
 public:
  Proxy(std::shared_ptr<Messenger> messenger, const Sockaddr& remote, std::string service_name);
  // `host_port` names its host ("db-7.example:7050"; an address works too).
  // The name is resolved (getaddrinfo, on the calling thread) by the first
  // call, and again by the first call after a call failed with a network
  // error, so a server that moved is found (Kudu's KUDU-75). Each call
  // tries the name's addresses in order until one accepts a connection. A
  // name that does not resolve fails the call with NetworkError.
  //
  // Or `host_port` is a target naming a set of servers (issue 49):
  // "HOST:PORT,HOST:PORT,..." or "dns:NAME:PORT" (every A/AAAA record of
  // NAME a server, resolved again every 30 s and after a refused
  // connection). Each call then picks one (set_load_balancing; power of
  // two choices on the calls outstanding by default), servers that fail
  // are ejected for a while (set_outlier_detection), and a call a server
  // did not run (draining, shutting down, no connection) moves to another
  // at once, without spending its retries or the retry budget. A target
  // that does not parse or resolve fails every call with its error.
  //
  // Or "etcd://HOST:PORT[,HOST:PORT...]/PREFIX" (issue 50): the servers
  // registered under PREFIX in etcd (MessengerBuilder::set_registry), read
  // and watched by a thread, one per target for all of the messenger's
  // proxies (MessengerBuilder::set_share_etcd_watches): a server that
  // registers gets calls within a watch event, one whose key goes gets
  // none. While etcd is unreachable the last known servers keep serving.
  // With none registered, calls fail ServiceUnavailable.
  Proxy(std::shared_ptr<Messenger> messenger, std::string host_port, std::string service_name);
  ~Proxy();

  // Sends the call and returns at once; `callback` runs exactly once, on a
  // reactor thread (or on this thread if the call cannot start), after
  // `controller` and `response` hold the outcome. `response` and
  // `controller` must stay alive until then.
  void AsyncRequest(const std::string& method, const google::protobuf::Message& request,
                    google::protobuf::Message* response, RpcController* controller,
                    ResponseCallback callback) const;
  // As above, for a method of this proxy's service whose RemoteMethod
  // outlives the call (generated proxies pass a static one).
  void AsyncRequest(const RemoteMethod& method, const google::protobuf::Message& request,
                    google::protobuf::Message* response, RpcController* controller,
                    ResponseCallback callback) const;

  // Blocks until the call completes; returns controller->status(). Not
  // from a reactor thread (a callback), where it would deadlock.
  Status SyncRequest(const std::string& method, const google::protobuf::Message& request,
                     google::protobuf::Message* response, RpcController* controller) const;
  Status SyncRequest(const RemoteMethod& method, const google::protobuf::Message& request,
                     google::protobuf::Message* response, RpcController* controller) const;

  // Authenticate as `user` instead of the OS user (a separate connection).
  void set_user(std::string user) OSPREY_EXCLUDES(settings_mu_);
  // Retries for calls whose controller sets none (RetryPolicy: none by
  // default).
  // InvalidArgument, and nothing changes, if the policy is not valid
  // (RetryPolicy::Validate).
  Status set_retry_policy(const RetryPolicy& policy) OSPREY_EXCLUDES(settings_mu_);
  // A set of servers only: how each call picks one, and whether servers
  // that fail are ejected (on by default). No effect on one address.
  void set_load_balancing(LoadBalancing lb);
  void set_outlier_detection(bool on);
  // A set of servers only: hedged calls (HedgingPolicy; the messenger's
  // MessengerBuilder::set_hedging until this is called, off by default). A
  // call of an idempotent method (its .proto's idempotency_level), or one
  // whose controller says it is idempotent, and not exactly-once, gets a
  // second attempt to another server if no answer came within the delay;
  // the first answer wins. InvalidArgument, and nothing changes, if the
  // policy is not valid. No effect on one address.
  Status set_hedging(const HedgingPolicy& policy) OSPREY_EXCLUDES(settings_mu_);
  // What hedging did through this proxy (zeros for one address).
  HedgeStats hedging_stats() const;
  // A set of servers only: each server's address, with the attempts sent
  // to it, and whether it is ejected or draining now.
  using ServerReport = osprey::ServerReport;
  std::vector<ServerReport> servers() const;
  // An etcd target's: whether its watch of etcd is established now; false
  // while etcd is unreachable, when the servers are the last known. True
  // for any other proxy.
  bool registry_connected() const;
  // The address calls go to; a named proxy's is the first of its name's
  // last resolution (0.0.0.0:0 before the first); a set's, its first.
  Sockaddr remote() const;
  // A named proxy's "host:port"; empty for one made with an address.
  const std::string& host_port() const { return host_port_; }
  const std::string& service_name() const { return service_name_; }

 private:
  std::shared_ptr<Messenger> messenger_;
  Sockaddr remote_;
  const std::string host_port_;
  // The host dialled, without the port: Kerberos's service principal and
  // the name the server's certificate must have.
  const std::string host_;
  // Named proxies only; shared with their calls, which mark it stale when
  // they fail with a network error.
  std::shared_ptr<NameResolution> resolution_;
  // A target naming a set of servers: the set, or why it could not be made
  // (every call then fails with it).
  std::shared_ptr<ServerSet> servers_;
  Status servers_status_;
  std::string service_name_;
  mutable Mutex settings_mu_;
  std::string user_ OSPREY_GUARDED_BY(settings_mu_);
  RetryPolicy retry_policy_ OSPREY_GUARDED_BY(settings_mu_);
  // A set's hedging: null while off (calls then pay nothing for it).
  std::shared_ptr<Hedger> hedger_ OSPREY_GUARDED_BY(settings_mu_);
  std::shared_ptr<HedgeCounters> hedge_counters_;  // a set's; kept across set_hedging
  std::shared_ptr<Hedger> MakeHedger(const HedgingPolicy& policy) const;

  // `sync`: the caller will block on the call, so it may send it itself
  // when the reactor is idle (Reactor::TryRunHere). `parked` (sync only):
  // set when it is to read the answer itself (Reactor::ParkForCaller).
  void StartCall(const RemoteMethod* method, std::unique_ptr<RemoteMethod> owned,
                 const google::protobuf::Message& request, google::protobuf::Message* response,
                 RpcController* controller, ResponseCallback callback, bool sync,
                 transport::ParkedConnection* parked = nullptr) const;
  Status NoServers(const RemoteMethod& method) const;
  template <class M>
  Status WaitFor(const M& method, const google::protobuf::Message& request,
                 google::protobuf::Message* response, RpcController* controller) const;
};

}  // namespace osprey
