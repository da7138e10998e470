// HttpConnectionPool: the slots of one set of HTTP connections: a
// messenger's RPC port has one, and each Messenger::ListenHttp address one
// of its own, so that filling one never shuts the others (issue 47,
// finding 4). A connection holds its Slot for as long as it lives.
//
// Three limits, so that one peer cannot lock everyone else out:
//  - at most `max_connections` regular slots;
//  - of them, at most `max_per_peer` held by one address (the port aside:
//    one host is one peer; peers on a Unix socket have no address to tell
//    them apart and only the total applies to them);
//  - past either, up to `healthz_reserve` more slots serve /healthz only
//    (one request, no keep-alive, closed within the request timeout), and
//    one address holds at most half of them (rounded up), so that an
//    orchestrator's probe is answered while the pool is full.
// Whatever finds no slot is refused.
//
// Thread-safe: slots are taken on the reactor that accepts (or sniffs) a
// connection and given back on whichever reactor destroys it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"

namespace osprey::transport {

class HttpConnectionPool : public std::enable_shared_from_this<HttpConnectionPool> {
 public:
  struct Limits {
    size_t max_connections = 64;
    size_t max_per_peer = 8;     // 0: no limit per peer
    size_t healthz_reserve = 4;  // 0: none
  };
  enum class Kind { kRefused, kRegular, kHealthzOnly };

  // A slot, given back when destroyed. Move-only.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept { *this = std::move(other); }
    Slot& operator=(Slot&& other) noexcept;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { Release(); }
    Kind kind() const { return kind_; }

   private:
    friend class HttpConnectionPool;
    void Release();
    std::shared_ptr<HttpConnectionPool> pool_;
    Kind kind_ = Kind::kRefused;
    std::string peer_;
  };

  static std::shared_ptr<HttpConnectionPool> Make(const Limits& limits) {
    return std::shared_ptr<HttpConnectionPool>(new HttpConnectionPool(limits));
  }

  // A slot for a connection from `remote`; kind() kRefused: refuse it.
  Slot Take(const Sockaddr& remote) OSPREY_EXCLUDES(mu_);
  // Slots held, regular and reserved.
  size_t open() const OSPREY_EXCLUDES(mu_);
  const Limits& limits() const { return limits_; }

 private:
  explicit HttpConnectionPool(const Limits& limits) : limits_(limits) {}
  void Give(Kind kind, const std::string& peer) OSPREY_EXCLUDES(mu_);

  struct PeerSlots {
    size_t regular = 0;
    size_t reserve = 0;
  };
  const Limits limits_;
  mutable Mutex mu_;
  size_t regular_ OSPREY_GUARDED_BY(mu_) = 0;
  size_t reserve_ OSPREY_GUARDED_BY(mu_) = 0;
  // Only peers holding a slot: at most max_connections + healthz_reserve.
  std::unordered_map<std::string, PeerSlots> peers_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey::transport
