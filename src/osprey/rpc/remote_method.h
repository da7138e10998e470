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
  RemoteMethod(std::string service, std::string method);

  const std::string& service() const { return service_; }
  const std::string& method() const { return method_; }
  Slice serialized_pb() const { return serialized_; }
  // Unique to this object's names in the process: each constructor call
  // takes a new one, and copies keep it. Lets a per-call cache recognise
  // the method without comparing strings.
  uint64_t id() const { return id_; }

 private:
  uint64_t id_;
  std::string service_;
  std::string method_;
  std::string serialized_;
};

}  // namespace osprey
