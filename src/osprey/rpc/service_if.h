// ServiceIf: the server side of one protobuf service. Generated subclasses
// (FooServiceIf, from protoc-gen-osprey) register one ServiceMethod per rpc;
// users implement the pure virtual methods. Methods are registered in the
// constructor and read-only afterwards, so any thread may look them up.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "osprey/base/monotime.h"

namespace osprey {

class InboundCall;
class MessagePool;
class RpcContext;

using AuthorizeFn = std::function<bool(const google::protobuf::Message* req,
                                       google::protobuf::Message* resp, RpcContext* ctx)>;

struct ServiceMethod {
  std::string name;
  const google::protobuf::Message* request_prototype;
  const google::protobuf::Message* response_prototype;
  std::function<void(const google::protobuf::Message* req, google::protobuf::Message* resp,
                     RpcContext* ctx)>
      handler;
  // Runs before the handler (Kudu's authz_method); null: every call may run.
  AuthorizeFn authorize = nullptr;
  // Kudu's track_rpc_result: answers are remembered by request id, so a
  // retried call is answered, not run again.
  bool track_result = false;
  // Spare large request and response messages, made by RegisterMethod.
  std::shared_ptr<MessagePool> request_pool = nullptr;
  std::shared_ptr<MessagePool> response_pool = nullptr;
};

class ServiceIf {
 public:
  virtual ~ServiceIf();

  // The fully qualified protobuf name, as sent on the wire.
  virtual const std::string& service_name() const = 0;

  const ServiceMethod* FindMethod(std::string_view name) const;
  // Every method, in no particular order.
  std::vector<const ServiceMethod*> methods() const;

  // Whether this service supports the application feature flag `feature`
  // (a number the service's users agree on). A call whose request header
  // requires a flag the service does not support is refused with
  // ERROR_INVALID_REQUEST listing the flags, as Kudu's servers do; the
  // handler never runs. None by default. Any thread: must not block.
  virtual bool SupportsFeature(uint32_t feature) const;

  // Runs before `method`'s handler, on the handler's thread, with the
  // parsed request: false refuses the call and the handler never runs. A
  // refusal that answered nothing is answered as Kudu's servers answer it,
  // FATAL_UNAUTHORIZED "Not authorized: unauthorized access to method: M"
  // (the connection stays open). The default runs the method's `authorize`
  // (the generated code's authz_method), or allows the call. Override it to
  // authorize from code, without the options.
  virtual bool Authorize(const ServiceMethod& method, const google::protobuf::Message* req,
                         google::protobuf::Message* resp, RpcContext* ctx);

  // Parses the request, authorizes it and runs the handler on the calling
  // thread, which read the clock at `start`. The handler owns the call
  // through its RpcContext from then on. A call with a request id of a
  // method that tracks results goes to the ResultTracker once authorized,
  // and runs only if it is the first attempt. True if the handler ran.
  bool Handle(std::unique_ptr<InboundCall> call, MonoTime start);

 protected:
  void RegisterMethod(ServiceMethod method);

 private:
  // The authorized call of `ctx` to its tracker: true if it runs (its
  // answer is then recorded); false if the tracker answered or holds it,
  // and `ctx` is gone.
  static bool TrackAuthorized(RpcContext* ctx);

  // Transparent hashing: a lookup by string_view allocates nothing.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, ServiceMethod, NameHash, std::equal_to<>> methods_;
};

}  // namespace osprey
