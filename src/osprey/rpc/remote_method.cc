#include "osprey/rpc/remote_method.h"

#include <atomic>

#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

namespace {
std::atomic<uint64_t> next_remote_method_id{1};
}  // namespace

RemoteMethod::RemoteMethod(std::string service, std::string method, bool track_result,
                           bool idempotent)
    : id_(next_remote_method_id.fetch_add(1, std::memory_order_relaxed)),
      track_result_(track_result),
      idempotent_(idempotent),
      service_(std::move(service)),
      method_(std::move(method)) {
  wire::RemoteMethodPB pb;
  pb.set_service_name(service_);
  pb.set_method_name(method_);
  serialized_ = pb.SerializeAsString();
}

}  // namespace osprey
