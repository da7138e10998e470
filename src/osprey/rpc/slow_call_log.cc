#include "osprey/rpc/slow_call_log.h"

namespace osprey {

void SlowCallLog::Record(bool inbound, const std::string& method, const Sockaddr& remote,
                         const std::string& user, MonoDelta took, const std::string& outcome) {
  SlowCall c;
  c.inbound = inbound;
  c.method = method;
  c.remote = remote;
  c.user = user;
  c.took = took;
  c.outcome = outcome;
  c.finished = MonoTime::Now();
  MutexLock l(mu_);
  auto& q = calls_[{inbound, method}];
  q.push_front(std::move(c));
  if (q.size() > kPerMethod) q.pop_back();
}

std::vector<SlowCall> SlowCallLog::Snapshot() const {
  std::vector<SlowCall> out;
  MutexLock l(mu_);
  for (const auto& [key, q] : calls_) out.insert(out.end(), q.begin(), q.end());
  return out;
}

}  // namespace osprey
