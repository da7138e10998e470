// Hedged calls (issue 50, item 3; the policy is hedging.h's): the pieces.
//
//  - HedgeDelay: whether, and when, a call is hedged. A pure function of
//    the policy, the call and the method's recent p95, tested cell by cell.
//  - HedgeBudget: the cap, a token bucket filled by the calls that could be
//    hedged and emptied by hedges. Any thread (one atomic).
//  - LatencyWindow: a method's last kSize answer latencies and their 95th
//    percentile, bounded in memory and in work per answer. Any thread (a
//    mutex; the p95 is an atomic read).
//  - Hedger: one proxy's hedging: its policy, budget, counters and a
//    window per method (at most kMethods). Shared by the proxy and its
//    calls, so a call outlives a set_hedging that replaced it. Any thread.
//  - HedgeGroup: the two attempts of one hedged call, which may complete
//    on two reactors at once: which one decides the call (Claim), and the
//    user's callback, which the winner alone takes. Any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/rpc/hedging.h"

namespace osprey {

class OutboundCall;
class RemoteMethod;

// How long after its start a call is hedged, or nullopt for never: off,
// not idempotent, tracked (exactly once: never), or fewer than two servers
// to send it to. `p95`: the method's recent p95, zero while unknown (the
// policy's delay then stands in).
std::optional<MonoDelta> HedgeDelay(const HedgingPolicy& policy, bool idempotent, bool tracked,
                                    size_t servers, MonoDelta p95);

class HedgeBudget {
 public:
  HedgeBudget(double share, double burst)
      : per_call_(static_cast<int64_t>(share * kUnit)), cap_(static_cast<int64_t>(burst * kUnit)) {}

  // A call that could be hedged started: `share` of a hedge more, up to
  // `burst` hedges saved.
  void RecordCall();
  // Whether a hedge may go now; if so, it is taken from the bucket.
  bool TryTake();
  // A hedge taken that could not go (no other server): back in the bucket.
  void GiveBack();
  double tokens() const {
    return static_cast<double>(micro_tokens_.load(std::memory_order_relaxed)) / kUnit;
  }

 private:
  static constexpr int64_t kUnit = 1000000;  // a millionth of a hedge
  const int64_t per_call_;
  const int64_t cap_;
  std::atomic<int64_t> micro_tokens_{0};  // starts empty: no hedge before calls
};

class LatencyWindow {
 public:
  // Answers remembered: the last few hundred, enough for a p95 that moves
  // with the servers within a second at a few hundred calls a second.
  static constexpr int kSize = 256;
  // The p95 is recomputed (nth_element over kSize) once per this many
  // answers: under 0.1 us an answer.
  static constexpr int kRecomputeEvery = 16;
  // Fewer answers than this: no p95 yet (zero).
  static constexpr int kMinSamples = 32;

  void Record(MonoDelta took) OSPREY_EXCLUDES(mu_);
  MonoDelta p95() const {
    return MonoDelta::FromNanoseconds(p95_ns_.load(std::memory_order_relaxed));
  }

 private:
  Mutex mu_;
  std::array<int64_t, kSize> ring_ OSPREY_GUARDED_BY(mu_){};
  int count_ OSPREY_GUARDED_BY(mu_) = 0;  // samples held, up to kSize
  int next_ OSPREY_GUARDED_BY(mu_) = 0;   // where the next goes
  int since_ OSPREY_GUARDED_BY(mu_) = 0;  // samples since the last recompute
  std::atomic<int64_t> p95_ns_{0};
};

// Counters of a proxy's hedging (HedgeStats); they survive set_hedging.
struct HedgeCounters {
  std::atomic<int64_t> eligible{0};
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> won{0};
  std::atomic<int64_t> refused_by_cap{0};
  std::atomic<int64_t> no_other_server{0};
  HedgeStats Snapshot() const;
};

class Hedger {
 public:
  // How a hedge attempt is sent (the proxy's messenger, if it still
  // exists; else the attempt fails, which its group shrugs off).
  using Queue = std::function<void(std::shared_ptr<OutboundCall> hedge)>;
  Hedger(HedgingPolicy policy, std::shared_ptr<HedgeCounters> counters, Queue queue)
      : policy_(policy),
        budget_(policy.max_share, policy.burst),
        counters_(std::move(counters)),
        queue_(std::move(queue)) {}

  // Proxy::StartCall: when to hedge this call, nullopt for never. A call
  // that could be hedged is counted and fills the budget; `*window` is its
  // method's latency window, for its answers.
  std::optional<MonoDelta> Plan(const RemoteMethod& method, bool idempotent, bool tracked,
                                size_t servers, LatencyWindow** window);

  const HedgingPolicy& policy() const { return policy_; }
  HedgeBudget& budget() { return budget_; }
  HedgeCounters& counters() { return *counters_; }
  void Send(std::shared_ptr<OutboundCall> hedge) const { queue_(std::move(hedge)); }

  // Methods with a window of their own; the rest share the last one.
  static constexpr int kMethods = 16;

 private:
  LatencyWindow* WindowFor(const RemoteMethod& method);

  const HedgingPolicy policy_;
  HedgeBudget budget_;
  const std::shared_ptr<HedgeCounters> counters_;
  const Queue queue_;
  struct Slot {
    std::atomic<uint64_t> key{0};  // 0: free
    LatencyWindow window;
  };
  std::array<Slot, kMethods> slots_;
};

class HedgeGroup {
 public:
  explicit HedgeGroup(std::function<void()> callback) : callback_(std::move(callback)) {}

  // The attempt that answered first decides the call: true for exactly one
  // caller of Claim and EndedWithoutAnswer.
  bool Claim() { return !decided_.exchange(true, std::memory_order_acq_rel); }
  bool decided() const { return decided_.load(std::memory_order_acquire); }
  // An attempt ended without an answer (failed, refused, cancelled): it
  // decides the call only if it was the last attempt in flight, so a
  // failure waits for the other attempt's answer.
  bool EndedWithoutAnswer() {
    if (alive_.fetch_sub(1, std::memory_order_acq_rel) > 1) return false;
    return Claim();
  }
  // The claimer only: the user's callback.
  std::function<void()> TakeCallback() { return std::move(callback_); }

  // The attempts in flight: the first (or its retry) and the hedge, for
  // the winner to cancel the other.
  void SetAttempt(bool hedge, const std::shared_ptr<OutboundCall>& call) OSPREY_EXCLUDES(mu_);
  std::shared_ptr<OutboundCall> Other(bool hedge) const OSPREY_EXCLUDES(mu_);

  // Set once the hedge was handed to a connection (may reach its server):
  // the call's attempts_sent() counts it.
  std::atomic<bool> hedge_sent{false};

 private:
  std::atomic<bool> decided_{false};
  std::atomic<int> alive_{2};
  std::function<void()> callback_;  // taken by the claimer alone
  mutable Mutex mu_;
  std::weak_ptr<OutboundCall> first_ OSPREY_GUARDED_BY(mu_);
  std::weak_ptr<OutboundCall> hedge_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
