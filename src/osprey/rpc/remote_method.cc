#include "osprey/rpc/remote_method.h"

#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

RemoteMethod::RemoteMethod(std::string service, std::string method)
    : service_(std::move(service)), method_(std::move(method)) {
  wire::RemoteMethodPB pb;
  pb.set_service_name(service_);
  pb.set_method_name(method_);
  serialized_ = pb.SerializeAsString();
}

}  // namespace osprey
