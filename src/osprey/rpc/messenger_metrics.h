// MessengerMetrics: everything a messenger's calls count in: the registry,
// the transport's counters, the per-method metrics of both sides and the
// slow-call log. Shared, by a shared_ptr, between the messenger and its
// reactors (through ConnectionOptions::keepalive), which every connection
// keeps alive: a server call answered after its messenger is gone still
// counts in memory that exists. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>

#include "osprey/base/metrics.h"
#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/rpc/rpc_metrics.h"
#include "osprey/rpc/slow_call_log.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey {

class MessengerMetrics {
 public:
  // `counting`: false, and nothing is counted (the registry stays empty
  // for the user's own); `track_slow_calls`: keep the slow-call log.
  MessengerMetrics(bool counting, bool track_slow_calls, MonoDelta slow_call_threshold,
                   int num_reactors, std::shared_ptr<std::atomic<int64_t>> open_inbound);

  MetricRegistry* registry() { return &registry_; }
  bool counting() const { return transport_ != nullptr; }
  // Null when not counting.
  const std::shared_ptr<transport::TransportMetrics>& transport() const { return transport_; }
  SlowCallLog* slow_calls() const { return slow_calls_.get(); }

  // The metrics of a method ("<service>.<method>"), made on first use and
  // kept as long as this is; null when not counting.
  ServerMethodMetrics* ServerMethod(const std::string& method) OSPREY_EXCLUDES(mu_);
  ClientMethodMetrics* ClientMethod(const std::string& method) OSPREY_EXCLUDES(mu_);

 private:
  MetricRegistry registry_;
  std::shared_ptr<transport::TransportMetrics> transport_;
  std::unique_ptr<SlowCallLog> slow_calls_;
  Mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<ServerMethodMetrics>> server_
      OSPREY_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::unique_ptr<ClientMethodMetrics>> client_
      OSPREY_GUARDED_BY(mu_);
};

class ResultTracker;

// The gauges and counters of the exactly-once memory (`t`) and of the
// pooled large messages, in `r`: the server's part of /metrics that its
// per-method metrics do not cover.
void AddRememberedAnswerMetrics(MetricRegistry* r, std::shared_ptr<ResultTracker> t);

}  // namespace osprey
