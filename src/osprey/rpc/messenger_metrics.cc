#include "osprey/rpc/messenger_metrics.h"

#include <glog/logging.h>

#include <utility>

#include "osprey/rpc/message_pool.h"
#include "osprey/rpc/result_tracker.h"

namespace osprey {

MessengerMetrics::MessengerMetrics(bool counting, bool track_slow_calls,
                                   MonoDelta slow_call_threshold, int num_reactors,
                                   std::shared_ptr<std::atomic<int64_t>> open_inbound) {
  if (counting) {
    transport_ = std::make_shared<transport::TransportMetrics>(&registry_, num_reactors,
                                                               std::move(open_inbound));
  }
  if (counting || track_slow_calls)
    slow_calls_ = std::make_unique<SlowCallLog>(slow_call_threshold);
}

ServerMethodMetrics* MessengerMetrics::ServerMethod(const std::string& method) {
  if (!counting()) return nullptr;
  MutexLock l(mu_);
  auto& slot = server_[method];
  if (slot == nullptr) slot = std::make_unique<ServerMethodMetrics>(&registry_, method);
  return slot.get();
}

ClientMethodMetrics* MessengerMetrics::ClientMethod(const std::string& method) {
  if (!counting()) return nullptr;
  MutexLock l(mu_);
  auto& slot = client_[method];
  if (slot == nullptr) slot = std::make_unique<ClientMethodMetrics>(&registry_, method);
  return slot.get();
}

void AddRememberedAnswerMetrics(MetricRegistry* r, std::shared_ptr<ResultTracker> t) {
  Status s = r->AddGauge("osprey_server_remembered_answers",
                         "Answers of exactly-once methods kept for the clients' retries.", {},
                         [t] { return static_cast<double>(t->stored_answers()); });
  if (s.ok()) {
    s = r->AddGauge("osprey_server_remembered_bytes",
                    "Bytes the memory of exactly-once requests takes: answers, request "
                    "records, clients and waiting retries (bounded; oldest answers go first).",
                    {}, [t] { return static_cast<double>(t->memory_bytes()); });
  }
  if (s.ok()) {
    s = r->AddGauge("osprey_server_remembered_clients",
                    "Clients whose exactly-once requests this server remembers.", {},
                    [t] { return static_cast<double>(t->clients()); });
  }
  if (s.ok()) {
    s = r->AddGauge("osprey_server_tracked_duplicates_waiting",
                    "Attempts of exactly-once requests waiting for their first attempt to "
                    "finish (a bounded number a request; more are refused).",
                    {}, [t] { return static_cast<double>(t->waiting_duplicates()); });
  }
  if (s.ok()) {
    s = r->AddGauge("osprey_server_pooled_message_bytes",
                    "Bytes of large request and response messages kept, cleared, for their "
                    "methods' next large calls, over every service in the process (bounded).",
                    {}, [] { return static_cast<double>(MessagePool::total_kept_bytes()); });
  }
  using Counts = ResultTracker::DuplicateCounts;
  const std::pair<const char*, uint64_t Counts::*> outcomes[] = {
      {"after_waiting", &Counts::after_waiting},
      {"from_memory", &Counts::from_memory},
      {"stale", &Counts::stale},
      {"refused", &Counts::refused}};
  for (const auto& [label, field] : outcomes) {
    if (!s.ok()) break;
    s = r->AddCounterFunction(
        "osprey_server_tracked_duplicates_total",
        "Attempts of exactly-once requests that were not the first, by what answered them: "
        "the first attempt when it finished, a stored answer, a stale refusal, or a "
        "refusal (memory full, too many waiting).",
        {{"answer", label}},
        [t, field = field] { return static_cast<double>(t->duplicate_counts().*field); });
  }
  CHECK(s.ok()) << s.ToString();  // fixed, valid names
}

}  // namespace osprey
