#include "osprey/transport/http_connection_pool.h"

namespace osprey::transport {

HttpConnectionPool::Slot& HttpConnectionPool::Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    kind_ = other.kind_;
    peer_ = std::move(other.peer_);
    other.kind_ = Kind::kRefused;
  }
  return *this;
}

void HttpConnectionPool::Slot::Release() {
  if (pool_ != nullptr && kind_ != Kind::kRefused) pool_->Give(kind_, peer_);
  pool_.reset();
  kind_ = Kind::kRefused;
}

HttpConnectionPool::Slot HttpConnectionPool::Take(const Sockaddr& remote) {
  Slot slot;
  // A Unix socket's peers all have the same (empty) name: no share per peer.
  const std::string peer = remote.is_unix() ? std::string() : remote.host();
  const bool per_peer = !peer.empty();
  MutexLock l(mu_);
  PeerSlots none;
  auto it = per_peer ? peers_.find(peer) : peers_.end();
  const PeerSlots& held = it != peers_.end() ? it->second : none;
  Kind kind = Kind::kRefused;
  if (regular_ < limits_.max_connections &&
      (!per_peer || limits_.max_per_peer == 0 || held.regular < limits_.max_per_peer)) {
    kind = Kind::kRegular;
  } else if (reserve_ < limits_.healthz_reserve &&
             (!per_peer || held.reserve < (limits_.healthz_reserve + 1) / 2)) {
    kind = Kind::kHealthzOnly;
  }
  if (kind == Kind::kRefused) return slot;
  (kind == Kind::kRegular ? regular_ : reserve_)++;
  if (per_peer) {
    PeerSlots& p = peers_[peer];
    (kind == Kind::kRegular ? p.regular : p.reserve)++;
  }
  slot.pool_ = shared_from_this();
  slot.kind_ = kind;
  slot.peer_ = peer;
  return slot;
}

void HttpConnectionPool::Give(Kind kind, const std::string& peer) {
  MutexLock l(mu_);
  (kind == Kind::kRegular ? regular_ : reserve_)--;
  if (peer.empty()) return;
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  PeerSlots& p = it->second;
  (kind == Kind::kRegular ? p.regular : p.reserve)--;
  if (p.regular == 0 && p.reserve == 0) peers_.erase(it);
}

size_t HttpConnectionPool::open() const {
  MutexLock l(mu_);
  return regular_ + reserve_;
}

}  // namespace osprey::transport
