// SlowCallLog: the most recent calls, per method and direction, that took
// at least a threshold (from arrival to answer on a server, from start to
// completion on a client), for /rpcz. Recording takes a lock, but only a
// call over the threshold records: the fast path is one comparison.
// Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"

namespace osprey {

struct SlowCall {
  bool inbound = false;
  std::string method;
  Sockaddr remote;
  std::string user;
  MonoDelta took;
  std::string outcome;
  MonoTime finished;
};

class SlowCallLog {
 public:
  static constexpr size_t kPerMethod = 20;

  explicit SlowCallLog(MonoDelta threshold) : threshold_(threshold) {}

  MonoDelta threshold() const { return threshold_; }
  void MaybeRecord(bool inbound, const std::string& method, const Sockaddr& remote,
                   const std::string& user, MonoDelta took, const std::string& outcome)
      OSPREY_EXCLUDES(mu_) {
    if (took < threshold_) return;
    Record(inbound, method, remote, user, took, outcome);
  }
  // Newest first, by direction then method.
  std::vector<SlowCall> Snapshot() const OSPREY_EXCLUDES(mu_);

 private:
  void Record(bool inbound, const std::string& method, const Sockaddr& remote,
              const std::string& user, MonoDelta took, const std::string& outcome)
      OSPREY_EXCLUDES(mu_);

  const MonoDelta threshold_;
  mutable Mutex mu_;
  std::map<std::pair<bool, std::string>, std::deque<SlowCall>> calls_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
