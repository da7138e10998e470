// Proxy: the client side of one service at one address. Generated proxies
// (FooServiceProxy) wrap it with typed methods. Thread-safe: many threads
// may share one proxy; each call needs its own RpcController.
#pragma once

#include <google/protobuf/message.h>

#include <functional>
#include <memory>
#include <string>

#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/rpc/remote_method.h"
#include "osprey/rpc/rpc_controller.h"

namespace osprey {

class Messenger;
using ResponseCallback = std::function<void()>;

class Proxy {
 public:
  Proxy(std::shared_ptr<Messenger> messenger, const Sockaddr& remote, std::string service_name);
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
  void set_user(std::string user) { user_ = std::move(user); }
  const Sockaddr& remote() const { return remote_; }
  const std::string& service_name() const { return service_name_; }

 private:
  std::shared_ptr<Messenger> messenger_;
  Sockaddr remote_;
  std::string service_name_;
  std::string user_;

  // `sync`: the caller will block on the call, so it may send it itself
  // when the reactor is idle (Reactor::TryRunHere).
  void StartCall(const RemoteMethod* method, std::unique_ptr<RemoteMethod> owned,
                 const google::protobuf::Message& request, google::protobuf::Message* response,
                 RpcController* controller, ResponseCallback callback, bool sync) const;
  template <class M>
  Status WaitFor(const M& method, const google::protobuf::Message& request,
                 google::protobuf::Message* response, RpcController* controller) const;
};

}  // namespace osprey
