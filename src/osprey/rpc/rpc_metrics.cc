#include "osprey/rpc/rpc_metrics.h"

#include <glog/logging.h>

#include <cctype>

namespace osprey {

namespace {

Counter* MakeCounter(MetricRegistry* r, const std::string& name, const std::string& help,
                     MetricLabels labels) {
  Counter* c = nullptr;
  Status s = r->GetCounter(name, help, std::move(labels), &c);
  CHECK(s.ok()) << s.ToString();  // the names here are constants
  return c;
}

LatencyHistogram* MakeHistogram(MetricRegistry* r, const std::string& name, const std::string& help,
                                MetricLabels labels) {
  LatencyHistogram* h = nullptr;
  Status s = r->GetHistogram(name, help, std::move(labels), &h);
  CHECK(s.ok()) << s.ToString();
  return h;
}

constexpr const char* kServerCallsHelp =
    "Calls this server answered, by method and outcome (ok, application_error, or the RPC error "
    "code).";

}  // namespace

ServerMethodMetrics::ServerMethodMetrics(MetricRegistry* registry, std::string method)
    : registry_(registry), method_(std::move(method)) {
  MetricLabels m = {{"method", method_}};
  received = MakeCounter(registry, "osprey_server_calls_received_total",
                         "Calls this server received, by method.", m);
  Status g = registry->AddGauge(
      "osprey_server_calls_in_flight", "Calls received and not answered yet, by method.", m,
      [this] { return static_cast<double>(received->value() - Answered()); });
  CHECK(g.ok()) << g.ToString();
  rejected_queue_full = MakeCounter(
      registry, "osprey_server_calls_rejected_queue_full_total",
      "Calls refused with ERROR_SERVER_TOO_BUSY because the service queue was full.", m);
  deadline_expired_in_queue =
      MakeCounter(registry, "osprey_server_calls_deadline_expired_in_queue_total",
                  "Calls dropped because their deadline passed while they waited in the queue.", m);
  constexpr const char* kRefusedHelp =
      "Calls the service queue refused ERROR_SERVER_TOO_BUSY other than because it was full, by "
      "method and reason: evicted (pushed out of a full queue by a call with an earlier "
      "deadline), overloaded (refused at admission while the queue's delay is over its target), "
      "would_miss_deadline (the calls ahead would keep it past its deadline), waited_too_long "
      "(waited past the delay target while overloaded).";
  const char* reasons[kRefusals] = {"evicted", "overloaded", "would_miss_deadline",
                                    "waited_too_long"};
  for (int i = 0; i < kRefusals; ++i) {
    refused[i] = MakeCounter(registry, "osprey_server_calls_refused_total", kRefusedHelp,
                             {{"method", method_}, {"reason", reasons[i]}});
  }
  answered_after_deadline = MakeCounter(
      registry, "osprey_server_calls_answered_after_deadline_total",
      "Calls answered successfully after their client's deadline had passed: wasted work.", m);
  handler_latency =
      MakeHistogram(registry, "osprey_server_handler_latency_seconds",
                    "Time each handler ran, from its start until it returned, by method.", m);
  queue_time = MakeHistogram(registry, "osprey_server_queue_time_seconds",
                             "Time from a call's arrival to its handler's start, by method.", m);
  ok_ = MakeCounter(registry, "osprey_server_calls_total", kServerCallsHelp,
                    {{"method", method_}, {"outcome", "ok"}});
}

int64_t ServerMethodMetrics::Answered() const {
  int64_t n = ok_->value();
  for (const auto& c : by_code_) {
    if (Counter* p = c.load(std::memory_order_acquire)) n += p->value();
  }
  return n;
}

void ServerMethodMetrics::CountError(wire::ErrorStatusPB::RpcErrorCodePB code) {
  size_t i = static_cast<size_t>(code) & 0xff;
  Counter* c = by_code_[i].load(std::memory_order_acquire);
  if (c == nullptr) {
    std::string outcome = code == wire::ErrorStatusPB::ERROR_APPLICATION
                              ? "application_error"
                              : wire::ErrorStatusPB::RpcErrorCodePB_Name(code);
    if (outcome.empty()) outcome = "code_" + std::to_string(static_cast<int>(code));
    for (char& ch : outcome) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    // Two threads may both get here: the registry returns the same counter.
    c = MakeCounter(registry_, "osprey_server_calls_total", kServerCallsHelp,
                    {{"method", method_}, {"outcome", outcome}});
    by_code_[i].store(c, std::memory_order_release);
  }
  c->Increment();
}

ClientMethodMetrics::ClientMethodMetrics(MetricRegistry* registry, const std::string& method)
    : method_(method) {
  MetricLabels m = {{"method", method}};
  started = MakeCounter(registry, "osprey_client_calls_started_total",
                        "Calls this client started, by method.", m);

  latency = MakeHistogram(registry, "osprey_client_call_latency_seconds",
                          "Time from a call's start to its completion, by method.", m);
  constexpr const char* kHedgesHelp =
      "Hedged calls (a second attempt to another server after a delay), by method and outcome: "
      "sent, won (its answer came first), refused_by_cap (due, but over the hedging cap).";
  hedges_sent = MakeCounter(registry, "osprey_client_hedges_total", kHedgesHelp,
                            {{"method", method}, {"outcome", "sent"}});
  hedges_won = MakeCounter(registry, "osprey_client_hedges_total", kHedgesHelp,
                           {{"method", method}, {"outcome", "won"}});
  hedges_refused_by_cap = MakeCounter(registry, "osprey_client_hedges_total", kHedgesHelp,
                                      {{"method", method}, {"outcome", "refused_by_cap"}});
  const char* names[kOutcomes] = {
      "ok",           "timed_out",           "cancelled", "network_error",
      "remote_error", "service_unavailable", "other"};
  for (int i = 0; i < kOutcomes; ++i) {
    outcomes_[i] = MakeCounter(registry, "osprey_client_calls_total",
                               "Calls this client finished, by method and outcome.",
                               {{"method", method}, {"outcome", names[i]}});
  }
  Status g = registry->AddGauge(
      "osprey_client_calls_in_flight", "Calls started and not finished yet, by method.", m,
      [this] { return static_cast<double>(started->value() - Finished()); });
  CHECK(g.ok()) << g.ToString();
}

int64_t ClientMethodMetrics::Finished() const {
  int64_t n = 0;
  for (Counter* c : outcomes_) n += c->value();
  return n;
}

void ClientMethodMetrics::CountFailure(const Status& s) {
  Outcome o = s.IsTimedOut()             ? kTimedOut
              : s.IsAborted()            ? kCancelled
              : s.IsNetworkError()       ? kNetworkError
              : s.IsRemoteError()        ? kRemoteError
              : s.IsServiceUnavailable() ? kServiceUnavailable
                                         : kOther;
  outcomes_[o]->Increment();
}

}  // namespace osprey
