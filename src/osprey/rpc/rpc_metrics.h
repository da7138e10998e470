// The RPC layer's own metrics, per method on each side, made once per
// (messenger, method) and then updated without locks or string work:
//
//  - ServerMethodMetrics: made when a service is registered, one per
//    method; calls by outcome ("ok", "application_error", or the RPC error
//    code, lower case), handler latency, time in the queue, calls refused
//    because the queue was full, and refused for the other reasons of
//    ServiceQueue, calls dropped because their deadline passed in the
//    queue, successful answers sent past the deadline, and calls received; calls in flight are
//    received minus answered, computed when read.
//  - ClientMethodMetrics: made on a method's first call through a
//    messenger; call latency, calls by outcome (ok, timed_out, cancelled,
//    network_error, remote_error, service_unavailable, other), calls
//    started; calls in flight are computed when read.
//
// Every field is safe to update from any thread.
#pragma once

#include <array>
#include <atomic>
#include <string>

#include "osprey/base/metrics.h"
#include "osprey/base/status.h"
#include "osprey/rpc/remote_method.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

class ServerMethodMetrics {
 public:
  // `method`: "<service>.<method>", the label value.
  ServerMethodMetrics(MetricRegistry* registry, std::string method);

  const std::string& method() const { return method_; }
  // Counts one answered call: `code` is ignored when `ok`. The ok path
  // inline: it is nearly every call.
  void CountOutcome(bool ok, wire::ErrorStatusPB::RpcErrorCodePB code) {
    if (ok) {
      ok_->Increment();
    } else {
      CountError(code);
    }
  }

  Counter* received;
  Counter* rejected_queue_full;
  Counter* deadline_expired_in_queue;
  // Calls the service queue did not run, answered ERROR_SERVER_TOO_BUSY,
  // by reason (ServiceQueue's refusals; queue_full is rejected_queue_full).
  enum Refusal { kEvicted, kOverloaded, kWouldMissDeadline, kWaitedTooLong, kRefusals };
  std::array<Counter*, kRefusals> refused;
  // Successful answers sent after the client's deadline: work wasted.
  Counter* answered_after_deadline;
  LatencyHistogram* handler_latency;
  LatencyHistogram* queue_time;

 private:
  MetricRegistry* const registry_;
  const std::string method_;
  Counter* ok_;
  void CountError(wire::ErrorStatusPB::RpcErrorCodePB code);
  int64_t Answered() const;
  // By error code, made on the code's first use (most never occur).
  std::array<std::atomic<Counter*>, 256> by_code_{};
};

class ClientMethodMetrics {
 public:
  ClientMethodMetrics(MetricRegistry* registry, const std::string& method);

  void CountOutcome(const Status& status) {
    if (status.ok()) {
      outcomes_[kOk]->Increment();
    } else {
      CountFailure(status);
    }
  }
  const std::string& method() const { return method_; }

  Counter* started;
  LatencyHistogram* latency;
  // Hedged calls (HedgingPolicy): hedges sent, hedges whose answer came
  // first, and hedges due but refused by the cap.
  Counter* hedges_sent;
  Counter* hedges_won;
  Counter* hedges_refused_by_cap;

 private:
  const std::string method_;
  enum Outcome {
    kOk,
    kTimedOut,
    kCancelled,
    kNetworkError,
    kRemoteError,
    kServiceUnavailable,
    kOther,
    kOutcomes
  };
  std::array<Counter*, kOutcomes> outcomes_;
  void CountFailure(const Status& status);
  int64_t Finished() const;
};

}  // namespace osprey
