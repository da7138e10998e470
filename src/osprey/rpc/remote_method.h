// RemoteMethod: a service and method name with the RemoteMethodPB bytes
// that every request header for it carries, serialized once. Immutable;
// any thread. Generated proxies keep one per rpc as a static.
#pragma once

#include <cstdint>
#include <string>

#include "osprey/base/slice.h"

namespace osprey {

class RemoteMethod {
 public:
  // `track_result`: the method has Kudu's track_rpc_result option, so its
  // calls carry request ids (exactly once). `idempotent`: its .proto marks
  // it `idempotency_level = IDEMPOTENT` (or NO_SIDE_EFFECTS): a call may
  // run twice without harm, so it may be retried after it may have reached
  // a server, and hedged (HedgingPolicy).
  RemoteMethod(std::string service, std::string method, bool track_result = false,
               bool idempotent = false);

  const std::string& service() const { return service_; }
  const std::string& method() const { return method_; }
  Slice serialized_pb() const { return serialized_; }
  // Unique to this object's names in the process: each constructor call
  // takes a new one, and copies keep it. Lets a per-call cache recognise
  // the method without comparing strings.
  uint64_t id() const { return id_; }
  bool track_result() const { return track_result_; }
  bool idempotent() const { return idempotent_; }

 private:
  uint64_t id_;
  bool track_result_;
  bool idempotent_;
  std::string service_;
  std::string method_;
  std::string serialized_;
};

}  // namespace osprey
