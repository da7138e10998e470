// NameResolution: the addresses a named proxy's "host:port" resolved to,
// shared by the proxy and its calls. Thread-safe.
//
// Resolved on first use and again after a call failed with a network
// error, so a server that moved to another address is found without
// remaking the proxy (Kudu's KUDU-75). Resolving blocks the calling thread
// in getaddrinfo; /etc/hosts and a local cache answer at once, a slow DNS
// server does not, which is why a reactor thread (a callback) is better
// served by proxies made with an address.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"

namespace osprey {

class NameResolution {
 public:
  explicit NameResolution(std::string host_port) : host_port_(std::move(host_port)) {}

  // The addresses to try, in order: the last resolution's, or a new one if
  // there is none yet or a failure made it stale. A name that does not
  // resolve is NetworkError (and is tried again next time).
  Status Addresses(std::shared_ptr<const std::vector<Sockaddr>>* out) OSPREY_EXCLUDES(mu_);
  // A call failed with a network error: resolve again before the next.
  void MarkStale() { stale_.store(true, std::memory_order_relaxed); }
  // The last resolution's first address; 0.0.0.0:0 before any.
  Sockaddr first() const OSPREY_EXCLUDES(mu_);

 private:
  const std::string host_port_;
  std::atomic<bool> stale_{true};
  mutable Mutex mu_;
  std::shared_ptr<const std::vector<Sockaddr>> addresses_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
