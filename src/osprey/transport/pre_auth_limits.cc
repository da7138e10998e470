#include "osprey/transport/pre_auth_limits.h"

#include <glog/logging.h>
#include <sys/resource.h>

#include <algorithm>

#include "osprey/transport/connection_options.h"

namespace osprey::transport {

void ResolveConnectionLimits(ConnectionOptions* o) {
  if (o->max_server_connections == 0) {
    rlimit rl{};
    size_t descriptors = 100000;
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      descriptors = static_cast<size_t>(rl.rlim_cur);
    }
    o->max_server_connections = std::clamp<size_t>(descriptors / 2, 1, 50000);
  }
  if (o->max_unauthenticated_connections == 0) {
    o->max_unauthenticated_connections = std::max<size_t>(o->max_server_connections / 2, 1);
  }
  if (o->max_unauthenticated_connections_per_address == 0) {
    o->max_unauthenticated_connections_per_address =
        std::clamp<size_t>(o->max_unauthenticated_connections / 2, 1, 256);
  }
  o->pre_auth = std::make_shared<PreAuthLimits>(PreAuthLimits::Options{
      o->max_unauthenticated_connections, o->max_unauthenticated_connections_per_address,
      std::max<size_t>(o->max_unauthenticated_bytes, 1)});
}

PreAuthLimits::Ticket& PreAuthLimits::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    limits_ = std::move(other.limits_);
    address_ = std::move(other.address_);
    charged_ = other.charged_;
    other.limits_ = nullptr;
    other.charged_ = 0;
  }
  return *this;
}

bool PreAuthLimits::Ticket::Charge(size_t bytes) {
  if (limits_ == nullptr) return true;
  PreAuthLimits& l = *limits_;
  MutexLock lock(l.mu_);
  DCHECK_GE(l.bytes_, charged_);
  const size_t others = l.bytes_ - charged_;
  if (bytes > charged_ && others + bytes > l.options_.max_bytes) return false;
  l.bytes_ = others + bytes;
  charged_ = bytes;
  return true;
}

void PreAuthLimits::Ticket::Release() {
  if (limits_ == nullptr) return;
  {
    PreAuthLimits& l = *limits_;
    MutexLock lock(l.mu_);
    DCHECK_GE(l.bytes_, charged_);
    DCHECK_GT(l.connections_, 0u);
    l.bytes_ -= charged_;
    --l.connections_;
    if (!address_.empty()) {
      auto it = l.per_address_.find(address_);
      DCHECK(it != l.per_address_.end());
      if (--it->second == 0) l.per_address_.erase(it);
    }
  }
  charged_ = 0;
  limits_ = nullptr;
}

PreAuthLimits::Ticket PreAuthLimits::Admit(const Sockaddr& peer, std::string* why) {
  Ticket t;
  std::string address = peer.is_unix() ? std::string() : peer.host();
  MutexLock l(mu_);
  if (connections_ >= options_.max_connections) {
    *why = std::to_string(connections_) +
           " connections are negotiating (the maximum before authentication)";
    return t;
  }
  if (!address.empty()) {
    auto it = per_address_.find(address);
    if (it != per_address_.end() && it->second >= options_.max_connections_per_address) {
      *why = std::to_string(it->second) + " connections from " + address +
             " are negotiating (the maximum from one address before authentication)";
      return t;
    }
    ++per_address_[address];
  }
  ++connections_;
  t.limits_ = shared_from_this();
  t.address_ = std::move(address);
  return t;
}

size_t PreAuthLimits::connections() const {
  MutexLock l(mu_);
  return connections_;
}

size_t PreAuthLimits::connections_from(const std::string& address) const {
  MutexLock l(mu_);
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

size_t PreAuthLimits::bytes() const {
  MutexLock l(mu_);
  return bytes_;
}

}  // namespace osprey::transport
