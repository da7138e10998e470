#include "osprey/rpc/server_set.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "osprey/rpc/etcd_registry.h"

namespace osprey {

namespace {

ServerSet::EntryPtr MakeEntry(const Sockaddr& address, std::string host) {
  auto e = std::make_shared<ServerSet::Entry>();
  e->address = address;
  e->host = std::move(host);
  e->id = ServerIdOf(address.ToString());
  return e;
}

Status Resolve(const ServerSet::Options& options, const std::string& host_port,
               std::vector<Sockaddr>* out) {
  return options.resolve != nullptr ? options.resolve(host_port, out)
                                    : Sockaddr::ResolveAll(host_port, out);
}

}  // namespace

bool ServerSet::IsSetTarget(const std::string& target) {
  return target.rfind("dns:", 0) == 0 || EtcdTarget::IsEtcd(target) ||
         target.find(',') != std::string::npos;
}

Status ServerSet::Make(const std::string& target, Options options,
                       std::shared_ptr<ServerSet>* out) {
  std::vector<EntryPtr> servers;
  std::string dns;
  EtcdTarget etcd;
  const bool is_etcd = EtcdTarget::IsEtcd(target);
  if (is_etcd) {
    OSPREY_RETURN_NOT_OK(EtcdTarget::Parse(target, &etcd));
    etcd.tls_files = options.etcd_tls;
    etcd.credentials = options.etcd_credentials;
    OSPREY_RETURN_NOT_OK(etcd.CheckCredentials());
  } else if (target.rfind("dns:", 0) == 0) {
    dns = target.substr(4);
    std::vector<Sockaddr> all;
    Status s = Resolve(options, dns, &all);
    if (!s.ok()) return s.CloneAndPrepend("target " + target);
    for (const Sockaddr& a : all) servers.push_back(MakeEntry(a, Sockaddr::HostOf(dns)));
  } else {
    size_t start = 0;
    while (start <= target.size()) {
      size_t comma = target.find(',', start);
      std::string one =
          target.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (one.empty()) {
        return Status::InvalidArgument("target '" + target +
                                       "' has an empty entry: expected HOST:PORT,HOST:PORT,...");
      }
      Sockaddr a;
      Status s = Sockaddr::Parse(one, &a);
      if (!s.ok()) return s.CloneAndPrepend("target " + target);
      servers.push_back(MakeEntry(a, Sockaddr::HostOf(one)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (servers.empty() && !is_etcd)
    return Status::NetworkError("target " + target + " names no server");
  if (!(options.max_ejected_share >= 0 && options.max_ejected_share <= 1) ||
      options.failures_to_eject < 1 || options.base_ejection <= MonoDelta() ||
      options.max_ejection < options.base_ejection) {
    return Status::InvalidArgument(
        "server set options: the ejected share must be from 0 to 1, failures to eject at least "
        "1, and the ejection backoffs positive with the maximum at least the base");
  }
  auto set = std::make_shared<ServerSet>(std::move(servers), std::move(dns), std::move(options));
  if (is_etcd) {
    ServerSet* raw = set.get();
    EtcdWatchTimeouts timeouts;
    timeouts.probe_after = set->options_.etcd_watch_probe_after;
    set->watch_ = set->options_.etcd_watches != nullptr
                      ? set->options_.etcd_watches->Get(target, etcd, timeouts)
                      : std::make_shared<SharedEtcdWatch>(etcd, timeouts);
    set->subscription_ = set->watch_->Subscribe(
        [raw](const ParsedServers& servers) { raw->ReplaceParsedServers(servers); },
        MonoDelta::FromSeconds(2));
  }
  *out = std::move(set);
  return Status::OK();
}

ServerSet::ServerSet(std::vector<EntryPtr> servers, std::string dns_host_port, Options options)
    : options_(std::move(options)),
      lb_(options_.lb),
      ejection_(options_.ejection),
      dns_host_port_(std::move(dns_host_port)) {
  MutexLock l(mu_);
  PlaceLocked(std::move(servers));
  resolved_at_ = Now();
}

ServerSet::~ServerSet() {
  if (watch_ == nullptr) return;
  watch_->Unsubscribe(subscription_);
  if (options_.etcd_watches != nullptr) options_.etcd_watches->Trim();
}

bool ServerSet::registry_connected() const { return watch_ == nullptr || watch_->connected(); }

Status ServerSet::registry_error() const {
  return watch_ == nullptr ? Status::OK() : watch_->last_error();
}

int64_t ServerSet::registry_reconnects() const {
  return watch_ == nullptr ? 0 : watch_->reconnects();
}

void ServerSet::ReplaceServers(const std::vector<std::string>& host_ports) {
  // Parsed outside the lock: a name may take a while to resolve.
  ReplaceParsedServers(ParseServers(host_ports));
}

void ServerSet::ReplaceParsedServers(ParsedServers servers) {
  MutexLock l(mu_);
  std::string added, removed;
  const size_t now = MergeLocked(std::move(servers), &added, &removed);
  if (!added.empty() || !removed.empty()) {
    LOG(INFO) << "servers changed:" << added << removed << " (" << now << " now)";
  }
}

size_t ServerSet::MergeLocked(ParsedServers servers, std::string* added, std::string* removed) {
  // By address, in one pass each: a set of thousands changes in a few
  // milliseconds under the lock, not in seconds.
  std::unordered_map<Sockaddr, EntryPtr> current;
  current.reserve(servers_.size());
  for (const EntryPtr& e : servers_) current.emplace(e->address, e);
  std::unordered_set<Sockaddr> seen;
  seen.reserve(servers.size());
  std::vector<EntryPtr> next;
  next.reserve(servers.size());
  // The log names the first few of each (a first read may bring thousands).
  constexpr size_t kNamed = 16;
  size_t added_n = 0, removed_n = 0;
  for (auto& [address, host] : servers) {
    if (!seen.insert(address).second) continue;  // listed twice
    auto same = current.find(address);
    if (same != current.end()) {
      next.push_back(std::move(same->second));
      current.erase(same);
    } else {
      next.push_back(MakeEntry(address, std::move(host)));
      if (added != nullptr && added_n++ < kNamed) *added += " +" + address.ToString();
    }
  }
  for (auto& [address, gone] : current) {
    gone->in_set = false;
    if (removed != nullptr && removed_n++ < kNamed) *removed += " -" + address.ToString();
  }
  if (added != nullptr && added_n > kNamed) {
    *added += " (+" + std::to_string(added_n - kNamed) + " more)";
  }
  if (removed != nullptr && removed_n > kNamed) {
    *removed += " (-" + std::to_string(removed_n - kNamed) + " more)";
  }
  PlaceLocked(std::move(next));
  return servers_.size();
}

MonoTime ServerSet::Now() const { return options_.clock ? options_.clock() : MonoTime::Now(); }

uint64_t ServerSet::Draw() const {
  if (options_.random) return options_.random();
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

double ServerSet::DecayedLatency(const Entry& e, MonoTime now) {
  // Halved every second without an answer: a server that was slow once (a
  // new connection, a pause) and is picked no more is tried again within
  // seconds, and found slow again or recovered.
  if (e.latency_ns == 0) return 0;
  const double idle_s = (now - e.latency_at).ToSeconds();
  return idle_s <= 0 ? e.latency_ns : e.latency_ns * std::exp2(-idle_s);
}

double ServerSet::BalancerLatency(const Entry& e, MonoTime now) {
  return e.latency_confirmed ? DecayedLatency(e, now) : 0;
}

void ServerSet::ForgetLatencyLocked(Entry* e) {
  // Draining or not listening: the process is going, or gone. What it
  // answers next is a new process on a new connection, whose speed its
  // old latency (its last calls were its slowest, finishing up) says
  // nothing of: unknown again, costed as the fastest, and its next first
  // answer, which pays for the connection, not counted.
  e->latency_ns = 0;
  e->latency_confirmed = false;
  e->answers = 0;
}

bool ServerSet::EligibleLocked(const Entry& e, MonoTime now) const {
  return now >= e.ejected_until && now >= e.draining_until;
}

ServerView ServerSet::ViewLocked(const Entry& e, MonoTime now, LoadBalancing lb) const {
  // Only two choices weighs latency (an exponential each).
  const double latency = lb == LoadBalancing::kPowerOfTwoChoices ? BalancerLatency(e, now) : 0;
  return {EligibleLocked(e, now), e.outstanding, latency, e.id};
}

void ServerSet::PlaceLocked(std::vector<EntryPtr> servers) {
  servers_ = std::move(servers);
  ids_.resize(servers_.size());
  for (size_t i = 0; i < servers_.size(); ++i) {
    servers_[i]->index = i;
    ids_[i] = servers_[i]->id;
  }
}

int ServerSet::IndexOfLocked(const Entry* e) const {
  // Where the set last put it: found at once unless the set changed since.
  if (e->index < servers_.size() && servers_[e->index].get() == e) {
    return static_cast<int>(e->index);
  }
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].get() == e) return static_cast<int>(i);
  }
  return -1;  // no longer in the set
}

void ServerSet::EjectLocked(Entry* e, MonoTime now) {
  if (!ejection_.load(std::memory_order_relaxed) || !e->in_set) return;
  if (now < e->ejected_until) return;  // already out
  size_t ejected = 0;
  for (const EntryPtr& s : servers_) {
    if (now < s->ejected_until) ++ejected;
  }
  if (static_cast<double>(ejected + 1) >
      options_.max_ejected_share * static_cast<double>(servers_.size())) {
    VLOG(1) << "not ejecting " << e->address.ToString() << ": " << ejected << " of "
            << servers_.size() << " already are";
    return;
  }
  MonoDelta d = e->next_ejection <= MonoDelta() ? options_.base_ejection : e->next_ejection;
  e->ejected_until = now + d;
  e->next_ejection =
      std::min(MonoDelta::FromNanoseconds(d.ToNanoseconds() * 2), options_.max_ejection);
  e->failures_in_a_row = 0;
  LOG(WARNING) << "ejecting server " << e->address.ToString() << " for " << d.ToString()
               << " after failed calls";
}

void ServerSet::MaybeResolve() {
  if (dns_host_port_.empty()) return;
  {
    MutexLock l(mu_);
    const MonoTime now = Now();
    if (resolving_ || (!resolve_now_ && now - resolved_at_ < options_.resolve_period)) return;
    resolving_ = true;
    resolved_at_ = now;
    resolve_now_ = false;
  }
  // Outside the lock: getaddrinfo may block for seconds (a DNS server that
  // does not answer), and meanwhile the other threads, reactors among them,
  // pick and end calls with the servers resolved last.
  std::vector<Sockaddr> all;
  Status s = Resolve(options_, dns_host_port_, &all);
  MutexLock l(mu_);
  resolving_ = false;
  if (!s.ok() || all.empty()) {
    LOG(WARNING) << "dns:" << dns_host_port_ << " did not resolve (" << s.ToString()
                 << "); keeping its last " << servers_.size() << " servers";
    return;
  }
  ParsedServers servers;
  const std::string host = Sockaddr::HostOf(dns_host_port_);
  for (const Sockaddr& a : all) servers.emplace_back(a, host);
  MergeLocked(std::move(servers), nullptr, nullptr);
}

size_t ServerSet::PickIndexLocked(uint64_t key, uint64_t d1, uint64_t d2, int excluded,
                                  MonoTime now) {
  // Views made when the balancer asks for them: a pick among thousands of
  // servers looks at a few. The closure holds two pointers, within
  // std::function's own storage: no allocation per call.
  struct Asked {
    MonoTime now;
    LoadBalancing lb;
  } const asked{now, lb()};
  const ServerViewOf view_of = [this, &asked](size_t i) {
    mu_.AssertHeld();  // runs within PickServer, under the caller's lock
    return ViewLocked(*servers_[i], asked.now, asked.lb);
  };
  return PickServer(asked.lb, servers_.size(), view_of, key, d1, d2, &round_robin_next_, excluded,
                    ids_);
}

ServerSet::EntryPtr ServerSet::Pick(uint64_t key, const Entry* exclude, bool may_resolve) {
  const uint64_t d1 = Draw(), d2 = Draw();
  if (may_resolve) MaybeResolve();
  MutexLock l(mu_);
  const MonoTime now = Now();
  if (servers_.empty()) return nullptr;
  const int excluded = exclude != nullptr ? IndexOfLocked(exclude) : -1;
  EntryPtr& e = servers_[PickIndexLocked(key, d1, d2, excluded, now)];
  ++e->outstanding;
  ++e->calls;
  return e;
}

ServerSet::EntryPtr ServerSet::PickOther(uint64_t key, const EntryPtr& other) {
  const uint64_t d1 = Draw(), d2 = Draw();
  MutexLock l(mu_);
  const MonoTime now = Now();
  if (servers_.empty()) return nullptr;
  EntryPtr& e = servers_[PickIndexLocked(key, d1, d2, IndexOfLocked(other.get()), now)];
  // With no other server eligible PickServer falls back on `other` or on
  // an ejected one: a hedge there would wait on the same slow server, or
  // on a failing one.
  if (e == other || !EligibleLocked(*e, now)) return nullptr;
  ++e->outstanding;
  ++e->calls;
  return e;
}

ServerSet::EntryPtr ServerSet::Keep(const EntryPtr& server) {
  MutexLock l(mu_);
  ++server->outstanding;
  ++server->calls;
  return server;
}

Sockaddr ServerSet::first() const {
  MutexLock l(mu_);
  return servers_.empty() ? Sockaddr() : servers_.front()->address;
}

void ServerSet::Ended(const EntryPtr& server, Outcome outcome, MonoDelta took,
                      uint64_t connection) {
  MutexLock l(mu_);
  Entry* e = server.get();
  --e->outstanding;
  const MonoTime now = Now();
  switch (outcome) {
    case Outcome::kAnswered:
      // A moving average of a fifth per answer: a server that slows down
      // is seen within a few calls. The first answer is not counted: it
      // paid for the connection's setup, not for the server's speed.
      // One answer is not a server's speed either: a pause (a loaded
      // host's scheduler, a page fault) is not a slow server. Taken raw,
      // one 5 ms answer beside 0.3 ms ones made power of two choices pick
      // that server no more (with one call at a time, never the costlier
      // of two idle servers), with no answer to correct it until the
      // decay had halved it down seconds later. So the first latency is
      // the smaller of two answers, unknown to the balancer until then,
      // and each later answer counts for at most kMaxSampleStep times the
      // average: a server slower for good still grows it 1.6 times an
      // answer (0.8 + 0.2 x 4), and one ten times slower is "not alike"
      // after about four.
      if (const int64_t counted = e->answers++; counted > 0) {
        constexpr double kMaxSampleStep = 4;
        const double sample = static_cast<double>(took.ToNanoseconds());
        const double known = DecayedLatency(*e, now);
        if (counted == 1) {
          e->latency_ns = sample;
        } else if (!e->latency_confirmed) {
          e->latency_ns = std::min(known, sample);
          e->latency_confirmed = true;
        } else {
          e->latency_ns = 0.8 * known + 0.2 * std::min(sample, kMaxSampleStep * known);
        }
        e->latency_at = now;
      }
      [[fallthrough]];
    case Outcome::kRefusedBusy:
      e->failures_in_a_row = 0;
      if (now >= e->ejected_until) e->next_ejection = MonoDelta();  // it serves again
      break;
    case Outcome::kDraining:
      e->draining_until = now + options_.base_ejection;
      ForgetLatencyLocked(e);
      break;
    case Outcome::kConnectFailed:
      resolve_now_ = true;
      EjectLocked(e, now);
      ForgetLatencyLocked(e);
      break;
    case Outcome::kLost:
      // A cut connection fails every call it carried at once: one failure.
      if (connection != 0 && connection == e->last_lost_connection) break;
      e->last_lost_connection = connection;
      [[fallthrough]];
    case Outcome::kTimedOut:
      if (++e->failures_in_a_row >= options_.failures_to_eject) EjectLocked(e, now);
      break;
    case Outcome::kOutrun:
      // No answer within `took`: it is at least that slow, and still as
      // slow as last measured. The decay (a guess that it recovered, so
      // that it is tried again) is undone: a probe the hedge outran says it
      // did not. Else a server ten times slower, outrun by hedges at twice
      // the others' latency, would look twice as slow (as good as equal to
      // p2c) and be sent ever more first attempts.
      e->latency_ns = std::max(e->latency_ns, static_cast<double>(took.ToNanoseconds()));
      e->latency_at = now;
      e->latency_confirmed = true;  // a floor measured, not a pause's sample
      break;
    case Outcome::kAbandoned:
      break;
  }
}

size_t ServerSet::size() const {
  MutexLock l(mu_);
  return servers_.size();
}

std::vector<ServerReport> ServerSet::Report() const {
  MutexLock l(mu_);
  const MonoTime now = Now();
  std::vector<ServerReport> out;
  for (const EntryPtr& e : servers_) {
    out.push_back({e->address.ToString(), e->calls, e->outstanding, now < e->ejected_until,
                   now < e->draining_until});
  }
  return out;
}

}  // namespace osprey
