// Why a call was refused, for the reports: a server refuses for several
// reasons, and each calls for different advice (a longer service queue
// helps only when the queue was full). Any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "osprey/rpc/rpc_controller.h"

namespace osprey::bench {

// In the order of the reports. The server's reasons are named as its
// metrics name them (osprey_server_calls_refused_total's reason label,
// ..._rejected_queue_full_total, ..._deadline_expired_in_queue_total).
enum class Refusal {
  kQueueFull,          // the service queue held --rpc_service_queue_length calls
  kEvicted,            // pushed out of a full queue by a call with an earlier deadline
  kOverloaded,         // refused at admission: the work ahead exceeded its patience
  kWouldMissDeadline,  // the calls ahead would have kept it past its deadline
  kWaitedTooLong,      // queued, then shed while overloaded: waited past its patience
  kExpiredInQueue,     // its deadline passed while it waited in the queue
  kThrottled,          // refused by the client's adaptive throttling, never sent
  kOther,              // a refusal whose message names no reason this tool knows
};
constexpr size_t kNumRefusals = static_cast<size_t>(Refusal::kOther) + 1;

// Why the server (or the client's throttling) refused the call of `ctl`, a
// refusal (IsQueueRefusal, IsRefusal or IsThrottled in call_slot.h): from
// the stable tag Osprey's service pool ends the message with
// ("[reason=overloaded]"), else from the texts of Kudu's server.
Refusal ClassifyRefusal(const RpcController& ctl);

// A failed call's cause, for the reports' failures by cause: the error
// code the server answered ("ERROR_UNAVAILABLE", "FATAL_SERVER_SHUTTING_DOWN"),
// else the status's code name ("Timed out", "Network error").
std::string FailureCause(const RpcController& ctl);

// Counts by reason, shared by the threads that end calls; the first
// message of kOther kept, so that the report can show what it was.
class RefusalCounts {
 public:
  void Add(Refusal r, const RpcController& ctl);
  uint64_t Get(Refusal r) const {
    return counts_[static_cast<size_t>(r)].load(std::memory_order_relaxed);
  }
  std::string first_other() const;

 private:
  std::array<std::atomic<uint64_t>, kNumRefusals> counts_{};
  mutable std::mutex mu_;    // taken only for kOther, off the common path
  std::string first_other_;  // guarded by mu_
};

// A snapshot, summed over runs or issuers.
struct RefusalTotals {
  std::array<uint64_t, kNumRefusals> by{};
  std::string first_other;

  uint64_t total() const;
  void Merge(const RefusalCounts& c);
  void Merge(const RefusalTotals& t);
  // {"queue_full":N,...}, every reason, in order.
  std::string Json() const;
  // One line per reason with a count, "<indent>overloaded: N (advice)",
  // and the first message of kOther.
  std::string TextLines(const std::string& indent) const;
  // "647 overloaded (advice); 3 queue full (advice)", for one stderr line.
  std::string Summary() const;
};

}  // namespace osprey::bench
