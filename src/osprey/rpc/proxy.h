// Proxy: the client side of one service at one address. Generated proxies
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
#include "osprey/rpc/remote_method.h"
#include "osprey/rpc/rpc_controller.h"

namespace osprey {

class Messenger;
class NameResolution;
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
  void set_user(std::string user) EXCLUDES(settings_mu_);
  // Retries for calls whose controller sets none (RetryPolicy: none by
  // default).
  // InvalidArgument, and nothing changes, if the policy is not valid
  // (RetryPolicy::Validate).
  Status set_retry_policy(const RetryPolicy& policy) EXCLUDES(settings_mu_);
  // The address calls go to; a named proxy's is the first of its name's
  // last resolution (0.0.0.0:0 before the first).
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
  std::string service_name_;
  mutable Mutex settings_mu_;
  std::string user_ GUARDED_BY(settings_mu_);
  RetryPolicy retry_policy_ GUARDED_BY(settings_mu_);

  // `sync`: the caller will block on the call, so it may send it itself
  // when the reactor is idle (Reactor::TryRunHere). `parked` (sync only):
  // set when it is to read the answer itself (Reactor::ParkForCaller).
  void StartCall(const RemoteMethod* method, std::unique_ptr<RemoteMethod> owned,
                 const google::protobuf::Message& request, google::protobuf::Message* response,
                 RpcController* controller, ResponseCallback callback, bool sync,
                 transport::ParkedConnection* parked = nullptr) const;
  template <class M>
  Status WaitFor(const M& method, const google::protobuf::Message& request,
                 google::protobuf::Message* response, RpcController* controller) const;
};

}  // namespace osprey
