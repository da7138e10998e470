// SharedEtcdWatch: one watch of an etcd target (EtcdWatcher: one read, one
// thread, one stream to etcd) for every server set of a messenger on that
// target, rather than one per proxy. A proxy made per call, or a thousand
// alive at once, then costs etcd one watch and the client one thread, and
// a new proxy finds the servers the watch knows without reading etcd.
//
// Each set subscribes with a callback, which is called at once with the
// servers known, then after each change, on the watch's thread (or on the
// thread of the subscriber that made the first read). The addresses are
// parsed (a name resolved) once per change, before the lock, not once per
// set. Unsubscribe waits
// for a call in progress: once it returns, the callback is not running and
// is never called again. The watch stops, and its thread is joined, when
// the last holder lets it go. Any thread but the watch's own.
//
// EtcdWatches is the messenger's table of them, by target. It keeps a
// watch that no set holds any more (idle), so that a proxy made per call
// finds it still running, but at most `max_idle` of them: past that, the
// one idle longest is stopped (Trim, after each set lets one go). So it
// holds one watch per target with a live proxy, plus at most max_idle.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/rpc/etcd_registry.h"

namespace osprey {

// Servers as a set takes them: each address, and the host dialled (which
// TLS and Kerberos check).
using ParsedServers = std::vector<std::pair<Sockaddr, std::string>>;
// Parses each "HOST:PORT" (a name resolved now, its first address);
// those that do not parse are skipped, with a warning.
ParsedServers ParseServers(const std::vector<std::string>& host_ports);

class SharedEtcdWatch {
 public:
  using OnChange = std::function<void(const ParsedServers& servers)>;

  // A watch of `target`, not yet started: the first Subscribe reads etcd
  // and starts it.
  SharedEtcdWatch(EtcdTarget target, EtcdWatchTimeouts timeouts);
  ~SharedEtcdWatch();  // stops the watch and joins its thread
  SharedEtcdWatch(const SharedEtcdWatch&) = delete;
  SharedEtcdWatch& operator=(const SharedEtcdWatch&) = delete;

  // Calls `on_change` with the servers known now and after every change,
  // until Unsubscribe(the id returned). The first subscriber reads etcd
  // (each request at most `first_read_timeout`; a failure is logged and
  // the watch keeps trying) and starts the watch; the others wait for that
  // read and take its servers.
  uint64_t Subscribe(OnChange on_change, MonoDelta first_read_timeout)
      OSPREY_EXCLUDES(start_mu_, mu_);
  void Unsubscribe(uint64_t id) OSPREY_EXCLUDES(mu_);

  // The watch's own (EtcdWatcher's): any thread.
  bool connected() const { return watcher_.connected(); }
  int64_t reconnects() const { return watcher_.reconnects(); }
  Status last_error() const { return watcher_.last_error(); }
  // Sets subscribed now, and when the last one left (the value of a
  // counter of unsubscriptions, larger later): for EtcdWatches::Trim.
  size_t subscribers() const OSPREY_EXCLUDES(mu_);
  uint64_t idle_since() const OSPREY_EXCLUDES(mu_);

 private:
  // The watcher's callback: parses `addresses`, keeps them and hands them
  // to every subscriber.
  void Publish(const std::vector<std::string>& addresses) OSPREY_EXCLUDES(mu_);

  // Held by the first Subscribe through its read and the watch's start, so
  // that the others wait for them; before mu_.
  Mutex start_mu_;
  bool started_ OSPREY_GUARDED_BY(start_mu_) = false;
  // Held while a callback runs: Unsubscribe waits for it.
  mutable Mutex mu_;
  std::map<uint64_t, OnChange> subscribers_ OSPREY_GUARDED_BY(mu_);
  uint64_t next_id_ OSPREY_GUARDED_BY(mu_) = 1;
  uint64_t idle_since_ OSPREY_GUARDED_BY(mu_) = 0;
  ParsedServers servers_ OSPREY_GUARDED_BY(mu_);
  // Last: its callback uses the fields above, so it is destroyed (stopped)
  // first.
  EtcdWatcher watcher_;
};

// Watches a messenger keeps with no set holding them (EtcdWatches).
inline constexpr size_t kMaxIdleEtcdWatches = 16;

class EtcdWatches {
 public:
  explicit EtcdWatches(size_t max_idle = kMaxIdleEtcdWatches) : max_idle_(max_idle) {}
  ~EtcdWatches();  // stops every watch no set holds

  // The watch of `target` (`key`: the target as the proxy was given it):
  // the table's, else a new one.
  std::shared_ptr<SharedEtcdWatch> Get(const std::string& key, const EtcdTarget& target,
                                       const EtcdWatchTimeouts& timeouts) OSPREY_EXCLUDES(mu_);
  // Stops the watches idle longest until at most `max_idle` (the table's
  // bound by default) are idle; a watch a set still holds stays with it.
  void Trim() OSPREY_EXCLUDES(mu_) { Trim(max_idle_); }
  void Trim(size_t max_idle) OSPREY_EXCLUDES(mu_);
  // Targets in the table now (for tests of its bound).
  size_t size() const OSPREY_EXCLUDES(mu_);

 private:
  const size_t max_idle_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<SharedEtcdWatch>> watches_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
