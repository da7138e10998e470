#include "osprey/rpc/name_resolution.h"

#include <glog/logging.h>

namespace osprey {

Status NameResolution::Addresses(std::shared_ptr<const std::vector<Sockaddr>>* out) {
  MutexLock l(mu_);
  // One caller resolves; the others wait for its answer instead of asking
  // the resolver again.
  if (addresses_ != nullptr && !stale_.load(std::memory_order_relaxed)) {
    *out = addresses_;
    return Status::OK();
  }
  auto fresh = std::make_shared<std::vector<Sockaddr>>();
  Status s = Sockaddr::ResolveAll(host_port_, fresh.get());
  if (!s.ok()) return s.CloneAndPrepend("cannot reach " + host_port_);
  if (addresses_ == nullptr || *addresses_ != *fresh) {
    std::string list;
    for (const Sockaddr& a : *fresh) list += (list.empty() ? "" : ", ") + a.ToString();
    VLOG(1) << host_port_ << " resolves to " << list;
  }
  addresses_ = std::move(fresh);
  stale_.store(false, std::memory_order_relaxed);
  *out = addresses_;
  return Status::OK();
}

Sockaddr NameResolution::first() const {
  MutexLock l(mu_);
  return addresses_ == nullptr || addresses_->empty() ? Sockaddr() : addresses_->front();
}

}  // namespace osprey
