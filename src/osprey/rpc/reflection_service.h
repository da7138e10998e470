// Server reflection (MessengerBuilder::set_reflection): the directory of a
// messenger's services, and the built-in service that answers from it.
#pragma once

#include <google/protobuf/descriptor.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/status.h"
#include "osprey/rpc/reflection.pb.h"
#include "osprey/rpc/service_if.h"

namespace osprey {

// What one messenger serves: each registered service with its methods, and
// the .proto files that describe them (the files of the services'
// descriptors and of their messages, and everything those import). Only
// symbols of those files are described, not everything linked into the
// process. Thread-safe: Messenger::RegisterService adds while reflection
// calls read.
class ServiceDirectory {
 public:
  void Add(const ServiceIf& service) OSPREY_EXCLUDES(mu_);
  reflection::ListServicesResponsePB List() const OSPREY_EXCLUDES(mu_);
  // NotFound if no described file defines `symbol`.
  Status FilesContaining(const std::string& symbol,
                         reflection::FileContainingSymbolResponsePB* out) const
      OSPREY_EXCLUDES(mu_);

 private:
  void AddFile(const google::protobuf::FileDescriptor* file) OSPREY_REQUIRES(mu_);

  mutable Mutex mu_;
  reflection::ListServicesResponsePB services_ OSPREY_GUARDED_BY(mu_);
  std::unordered_set<const google::protobuf::FileDescriptor*> files_ OSPREY_GUARDED_BY(mu_);
  // The pools those files are in (the generated pool, nearly always).
  std::vector<const google::protobuf::DescriptorPool*> pools_ OSPREY_GUARDED_BY(mu_);
};

// The built-in osprey.reflection.ServerReflection service. Its handlers
// only read the directory, so they may run on any thread.
class ReflectionService : public ServiceIf {
 public:
  explicit ReflectionService(std::shared_ptr<const ServiceDirectory> directory);
  const std::string& service_name() const override;
  static const std::string& static_service_name();

 private:
  const std::shared_ptr<const ServiceDirectory> directory_;
};

}  // namespace osprey
