#include "osprey/rpc/shared_etcd_watch.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace osprey {

SharedEtcdWatch::SharedEtcdWatch(EtcdTarget target, EtcdWatchTimeouts timeouts)
    : watcher_(
          std::move(target),
          [this](const std::vector<std::string>& addresses) { Publish(addresses); }, timeouts) {}

SharedEtcdWatch::~SharedEtcdWatch() { watcher_.Stop(); }

uint64_t SharedEtcdWatch::Subscribe(OnChange on_change, MonoDelta first_read_timeout) {
  {
    MutexLock s(start_mu_);
    if (!started_) {
      // The first read now, so the first calls have servers; if etcd does
      // not answer, the set starts empty and the watch keeps trying.
      Status loaded = watcher_.Load(first_read_timeout);
      if (!loaded.ok()) {
        LOG(WARNING) << "target " << watcher_.target().ToString() << ": cannot read etcd ("
                     << loaded.ToString() << "); no servers until it answers";
      }
      watcher_.Start();
      started_ = true;
    }
  }
  MutexLock l(mu_);
  on_change(servers_);
  const uint64_t id = next_id_++;
  subscribers_.emplace(id, std::move(on_change));
  return id;
}

namespace {
std::atomic<uint64_t> unsubscriptions{0};
}  // namespace

ParsedServers ParseServers(const std::vector<std::string>& host_ports) {
  ParsedServers parsed;
  parsed.reserve(host_ports.size());
  for (const std::string& hp : host_ports) {
    Sockaddr a;
    Status s = Sockaddr::Parse(hp, &a);
    if (!s.ok()) {
      LOG(WARNING) << "server '" << hp << "' skipped: " << s.ToString();
      continue;
    }
    parsed.emplace_back(a, Sockaddr::HostOf(hp));
  }
  return parsed;
}

void SharedEtcdWatch::Unsubscribe(uint64_t id) {
  MutexLock l(mu_);
  CHECK_EQ(1u, subscribers_.erase(id)) << "a subscription ends once";
  idle_since_ = unsubscriptions.fetch_add(1, std::memory_order_relaxed) + 1;
}

size_t SharedEtcdWatch::subscribers() const {
  MutexLock l(mu_);
  return subscribers_.size();
}

uint64_t SharedEtcdWatch::idle_since() const {
  MutexLock l(mu_);
  return idle_since_;
}

void SharedEtcdWatch::Publish(const std::vector<std::string>& addresses) {
  ParsedServers parsed = ParseServers(addresses);  // a name may take a while
  MutexLock l(mu_);
  servers_ = std::move(parsed);
  for (auto& [id, on_change] : subscribers_) on_change(servers_);
}

EtcdWatches::~EtcdWatches() {
  // Outside the lock: stopping a watch joins its thread.
  std::map<std::string, std::shared_ptr<SharedEtcdWatch>> all;
  {
    MutexLock l(mu_);
    all.swap(watches_);
  }
}

std::shared_ptr<SharedEtcdWatch> EtcdWatches::Get(const std::string& key, const EtcdTarget& target,
                                                  const EtcdWatchTimeouts& timeouts) {
  MutexLock l(mu_);
  std::shared_ptr<SharedEtcdWatch>& slot = watches_[key];
  if (slot == nullptr) slot = std::make_shared<SharedEtcdWatch>(target, timeouts);
  return slot;
}

void EtcdWatches::Trim(size_t max_idle) {
  std::vector<std::shared_ptr<SharedEtcdWatch>> stopped;  // stopped outside the lock
  {
    MutexLock l(mu_);
    std::vector<std::pair<uint64_t, std::string>> idle;  // (idle since, key)
    for (const auto& [key, watch] : watches_) {
      if (watch->subscribers() == 0) idle.emplace_back(watch->idle_since(), key);
    }
    if (idle.size() <= max_idle) return;
    std::sort(idle.begin(), idle.end());
    for (size_t i = 0; i < idle.size() - max_idle; ++i) {
      auto it = watches_.find(idle[i].second);
      stopped.push_back(std::move(it->second));
      watches_.erase(it);
    }
  }
}

size_t EtcdWatches::size() const {
  MutexLock l(mu_);
  return watches_.size();
}

}  // namespace osprey
