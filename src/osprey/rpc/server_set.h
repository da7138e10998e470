// ServerSet: the servers behind one proxy target ("HOST:PORT,HOST:PORT,..."
// or "dns:NAME:PORT", every address of the name a server), with what the
// client has learnt of each: calls outstanding, ejection after failures,
// draining. Calls pick a server through it (PickServer, load_balancer.h)
// and report how each attempt ended; a server that refused connections,
// or whose calls failed in a row, is ejected for a backoff that doubles
// while it keeps failing (1 s to 30 s by default), then probed again by the
// next call that picks it; never more than `max_ejected_share` of the
// servers at once (outlier detection). A server that answered "draining"
// (ERROR_UNAVAILABLE, FATAL_SERVER_SHUTTING_DOWN) is not picked for
// `base_ejection` whatever the share: it said it will not serve.
//
// Each server's state is an Entry that calls hold by shared_ptr: when a
// re-resolution changes the set, a call's Entry stays valid, and what it
// reports of a server gone from the set changes nothing (a stale holder is
// harmless). Any thread: one mutex; time and randomness are injectable.
//
// An "etcd://HOST:PORT[,HOST:PORT]/PREFIX" target (issue 50) is the servers
// registered under PREFIX (EtcdRegistration), read when the set is made and
// then watched (SharedEtcdWatch: one watch for every set of a messenger on
// the target, or the set's own), which replaces the servers as keys come
// and go (ReplaceServers); the set unsubscribes when it is destroyed, and
// the last set to go stops the watch and joins its thread. Such a set may be empty: no server
// registered yet; Pick then returns null. While etcd is unreachable the set keeps its last servers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/rpc/etcd_registry.h"
#include "osprey/rpc/load_balancer.h"
#include "osprey/rpc/shared_etcd_watch.h"

namespace osprey {

class ServerSet {
 public:
  struct Options {
    LoadBalancing lb = LoadBalancing::kPowerOfTwoChoices;
    bool ejection = true;  // false: never eject (outlier detection off)
    // Calls in a row that timed out, or connections in a row lost with
    // calls on them, past which the server is ejected (a refused
    // connection ejects at once).
    int failures_to_eject = 5;
    MonoDelta base_ejection = MonoDelta::FromSeconds(1);
    MonoDelta max_ejection = MonoDelta::FromSeconds(30);
    double max_ejected_share = 0.5;
    // "dns:" targets: resolved again after this long, and after a refused
    // connection.
    MonoDelta resolve_period = MonoDelta::FromSeconds(30);
    std::function<MonoTime()> clock;   // null: MonoTime::Now
    std::function<uint64_t()> random;  // null: a generator per thread
    // "dns:" targets' resolver; null: Sockaddr::ResolveAll (getaddrinfo).
    std::function<Status(const std::string& host_port, std::vector<Sockaddr>* out)> resolve;
    EtcdTlsFiles etcd_tls;  // "etcds://" targets: MessengerBuilder::set_etcd_tls
    // etcd targets: MessengerBuilder::set_etcd_credentials (only etcds://).
    EtcdCredentials etcd_credentials;
    // etcd targets: a watch silent this long asks its member whether it is
    // alive (EtcdWatchLiveness); zero: never. MessengerBuilder::set_etcd_watch_probe.
    MonoDelta etcd_watch_probe_after = EtcdWatchTimeouts().probe_after;
    // etcd targets: where sets share their target's watch (a messenger's,
    // MessengerBuilder::set_share_etcd_watches); null: the set watches on
    // its own.
    std::shared_ptr<EtcdWatches> etcd_watches;
  };

  // How an attempt sent to a server ended, for what the set learns of it.
  enum class Outcome {
    kAnswered,       // any answer but the refusals below: the server works
    kRefusedBusy,    // ERROR_SERVER_TOO_BUSY: it works, but is full
    kDraining,       // ERROR_UNAVAILABLE or FATAL_SERVER_SHUTTING_DOWN
    kConnectFailed,  // no connection: refused, unreachable (not sent)
    kLost,           // the connection broke, after it connected, with the call on it
    kTimedOut,
    kAbandoned,  // cancelled, or ended on the client: says nothing
    // Cancelled because a hedge to another server answered first: it took
    // at least `took`, and is as slow as last measured (its decay undone).
    kOutrun,
  };

  struct Entry {
    Sockaddr address;
    std::string host;  // the host dialled: TLS and Kerberos check it
    uint64_t id = 0;   // ServerIdOf(address)
    // Guarded by the set's mutex.
    int64_t outstanding = 0;
    int64_t calls = 0;  // attempts picked for it, in all
    int64_t answers = 0;
    double latency_ns = 0;  // answered attempts' latency, an average
    MonoTime latency_at;    // when it was last updated
    // Whether latency_ns rests on more than one answer (or on a hedge
    // that outran the server): only then does the balancer see it.
    bool latency_confirmed = false;
    int failures_in_a_row = 0;
    uint64_t last_lost_connection = 0;  // the last kLost's, counted once
    MonoTime ejected_until;             // MonoTime() (the epoch): not ejected
    MonoDelta next_ejection;
    MonoTime draining_until;
    bool in_set = true;  // false once a re-resolution dropped it
    // Its index in the set's list when last placed there (a hint: checked
    // before use, since the list changes).
    size_t index = 0;
  };
  using EntryPtr = std::shared_ptr<Entry>;

  // Parses a target: "HOST:PORT[,HOST:PORT...]" (each HOST an address or a
  // name resolved once, its first address) or "dns:NAME:PORT" (every
  // address of NAME, resolved now and again as Options says).
  // InvalidArgument for anything else, NetworkError if a name does not
  // resolve.
  static Status Make(const std::string& target, Options options, std::shared_ptr<ServerSet>* out);
  // Or "etcd://HOST:PORT[,HOST:PORT...]/PREFIX": the servers registered
  // there; made even when etcd does not answer (empty, the watcher keeps
  // trying), so that a client may start before its registry.
  // Whether `target` names a set rather than one server: a list, "dns:" or
  // "etcd://".
  static bool IsSetTarget(const std::string& target);

  // The server for a new attempt, counted outstanding until Ended. `key`:
  // the call's hash key. `exclude`: a server not to pick if any other can
  // be (the one that just refused the call); may be null. `may_resolve`:
  // false on a reactor thread, which must not block in getaddrinfo. Null
  // when the set is empty (an etcd prefix with no server registered).
  EntryPtr Pick(uint64_t key, const Entry* exclude, bool may_resolve) OSPREY_EXCLUDES(mu_);
  // For a hedge: a server other than `other`, counted as Pick counts it;
  // null if none but `other` is eligible (nothing to hedge to).
  EntryPtr PickOther(uint64_t key, const EntryPtr& other) OSPREY_EXCLUDES(mu_);
  // The same server again, counted as Pick counts it: for a retry that
  // must stay where the call may have run.
  EntryPtr Keep(const EntryPtr& server) OSPREY_EXCLUDES(mu_);
  // The attempt sent to `server` by Pick or Keep ended so, after `took`.
  // For kLost, `connection` names the connection that was lost (a serial,
  // transport::Connection::serial(); 0: unknown): the calls lost with one
  // connection are one failure of the server, not one each.
  void Ended(const EntryPtr& server, Outcome outcome, MonoDelta took = MonoDelta(),
             uint64_t connection = 0) OSPREY_EXCLUDES(mu_);

  // Switches, for measuring and bisecting (Proxy::set_load_balancing,
  // set_outlier_detection); any thread, for the calls that start after.
  void set_lb(LoadBalancing lb) { lb_.store(lb, std::memory_order_relaxed); }
  LoadBalancing lb() const { return lb_.load(std::memory_order_relaxed); }
  void set_ejection(bool on) { ejection_.store(on, std::memory_order_relaxed); }
  // Replaces the servers with those at `host_ports` ("HOST:PORT", numeric
  // or a name resolved now, its first address): a server that stays keeps
  // its Entry (its calls, latency and ejection), one that goes is marked
  // out of the set. Entries that do not parse are skipped, with a warning.
  // For a registry's watcher; any thread but a reactor's (a name may
  // block in getaddrinfo).
  void ReplaceServers(const std::vector<std::string>& host_ports) OSPREY_EXCLUDES(mu_);
  // The same, parsed (a shared etcd watch parses once for all its sets).
  void ReplaceParsedServers(ParsedServers servers) OSPREY_EXCLUDES(mu_);
  // An etcd target's: whether its watch is established now (false while
  // etcd is unreachable, the set then being the last known), and how often
  // it had to be made again. Other sets: true and 0.
  bool registry_connected() const;
  int64_t registry_reconnects() const;
  // An etcd target's last failure to read or watch it, until one works
  // (EtcdWatcher::last_error). Other sets: OK.
  Status registry_error() const;

  // The first server's address; 0.0.0.0:0 when the set is empty.
  Sockaddr first() const OSPREY_EXCLUDES(mu_);
  size_t size() const OSPREY_EXCLUDES(mu_);
  // For tests, reports and /metrics: each server's address and its calls.
  std::vector<ServerReport> Report() const OSPREY_EXCLUDES(mu_);

  ServerSet(std::vector<EntryPtr> servers, std::string dns_host_port, Options options);
  ~ServerSet();

 private:
  MonoTime Now() const;
  uint64_t Draw() const;
  bool EligibleLocked(const Entry& e, MonoTime now) const OSPREY_REQUIRES(mu_);
  // What the balancer sees of e (its latency only for two choices).
  ServerView ViewLocked(const Entry& e, MonoTime now, LoadBalancing lb) const OSPREY_REQUIRES(mu_);
  // Makes `servers` (address, host dialled) the set, in their order, each
  // once: those already in it keep their entries (calls, latency,
  // ejection), the others get new ones, and those not listed are marked
  // out of the set. Appends " +ADDR" / " -ADDR" to `added` / `removed`
  // when given; returns the servers now.
  size_t MergeLocked(ParsedServers servers, std::string* added, std::string* removed)
      OSPREY_REQUIRES(mu_);
  // Replaces the servers, each told its index.
  void PlaceLocked(std::vector<EntryPtr> servers) OSPREY_REQUIRES(mu_);
  // The index of the server for an attempt (PickServer over the set's
  // views), `excluded` (-1: none) picked only when no other can be.
  size_t PickIndexLocked(uint64_t key, uint64_t d1, uint64_t d2, int excluded, MonoTime now)
      OSPREY_REQUIRES(mu_);
  // e's index in servers_, or -1 if it left the set.
  int IndexOfLocked(const Entry* e) const OSPREY_REQUIRES(mu_);
  static double DecayedLatency(const Entry& e, MonoTime now);
  // What the balancer costs e by: its decayed latency once confirmed, else
  // 0 (unknown, costed as the fastest).
  static double BalancerLatency(const Entry& e, MonoTime now);
  void EjectLocked(Entry* e, MonoTime now) OSPREY_REQUIRES(mu_);
  void ForgetLatencyLocked(Entry* e) OSPREY_REQUIRES(mu_);
  // A "dns:" set's resolution, when due and none is under way; blocks the
  // calling thread, not the set.
  void MaybeResolve() OSPREY_EXCLUDES(mu_);

  const Options options_;
  std::atomic<LoadBalancing> lb_;
  std::atomic<bool> ejection_;
  const std::string dns_host_port_;  // "NAME:PORT" of a dns: target; else empty
  mutable Mutex mu_;
  std::vector<EntryPtr> servers_ OSPREY_GUARDED_BY(mu_);
  // Their ids, in order, in one array (rendezvous hashing weighs them all).
  std::vector<uint64_t> ids_ OSPREY_GUARDED_BY(mu_);
  uint64_t round_robin_next_ OSPREY_GUARDED_BY(mu_) = 0;
  MonoTime resolved_at_ OSPREY_GUARDED_BY(mu_);
  bool resolve_now_ OSPREY_GUARDED_BY(mu_) = false;
  bool resolving_ OSPREY_GUARDED_BY(mu_) = false;  // a thread is in MaybeResolve's resolver
  // An etcd target's watch and this set's subscription to it; set by Make
  // before the set is shared, then only read (the watch's accessors are
  // thread-safe). The subscription's callback holds `this`: the destructor
  // ends it first.
  std::shared_ptr<SharedEtcdWatch> watch_;
  uint64_t subscription_ = 0;
};

}  // namespace osprey
