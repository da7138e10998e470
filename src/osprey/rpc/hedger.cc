#include "osprey/rpc/hedger.h"

#include <algorithm>
#include <functional>
#include <string>

#include "osprey/rpc/remote_method.h"

namespace osprey {

std::optional<MonoDelta> HedgeDelay(const HedgingPolicy& policy, bool idempotent, bool tracked,
                                    size_t servers, MonoDelta p95) {
  if (!policy.enabled || !idempotent || tracked || servers < 2) return std::nullopt;
  if (policy.when == HedgingPolicy::When::kP95 && p95 > MonoDelta()) return p95;
  return policy.delay;
}

void HedgeBudget::RecordCall() {
  if (per_call_ <= 0) return;
  int64_t t = micro_tokens_.load(std::memory_order_relaxed);
  // Bounded: each failed exchange means another thread moved the bucket.
  for (int i = 0; i < 64 && t < cap_; ++i) {
    if (micro_tokens_.compare_exchange_weak(t, std::min(cap_, t + per_call_),
                                            std::memory_order_relaxed)) {
      return;
    }
  }
}

bool HedgeBudget::TryTake() {
  int64_t t = micro_tokens_.load(std::memory_order_relaxed);
  for (int i = 0; i < 64 && t >= kUnit; ++i) {
    if (micro_tokens_.compare_exchange_weak(t, t - kUnit, std::memory_order_relaxed)) return true;
  }
  return false;
}

void HedgeBudget::GiveBack() { micro_tokens_.fetch_add(kUnit, std::memory_order_relaxed); }

void LatencyWindow::Record(MonoDelta took) {
  MutexLock l(mu_);
  ring_[next_] = took.ToNanoseconds();
  next_ = (next_ + 1) % kSize;
  if (count_ < kSize) ++count_;
  if (count_ < kMinSamples) return;
  if (count_ > kMinSamples && ++since_ < kRecomputeEvery) return;
  since_ = 0;
  std::array<int64_t, kSize> sorted;
  std::copy(ring_.begin(), ring_.begin() + count_, sorted.begin());
  // The smallest latency at or above 95% of the samples.
  const int at = (count_ * 95 + 99) / 100 - 1;
  std::nth_element(sorted.begin(), sorted.begin() + at, sorted.begin() + count_);
  p95_ns_.store(sorted[at], std::memory_order_relaxed);
}

HedgeStats HedgeCounters::Snapshot() const {
  HedgeStats s;
  s.eligible = eligible.load(std::memory_order_relaxed);
  s.sent = sent.load(std::memory_order_relaxed);
  s.won = won.load(std::memory_order_relaxed);
  s.refused_by_cap = refused_by_cap.load(std::memory_order_relaxed);
  s.no_other_server = no_other_server.load(std::memory_order_relaxed);
  return s;
}

LatencyWindow* Hedger::WindowFor(const RemoteMethod& method) {
  // By name, not RemoteMethod::id(): a proxy's string-named calls make a
  // RemoteMethod per call. Never 0, which marks a free slot.
  const uint64_t key = (std::hash<std::string>()(method.service()) * 31 +
                        std::hash<std::string>()(method.method())) |
                       1;
  for (Slot& s : slots_) {
    uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == 0 && s.key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
      return &s.window;
    }
    if (k == key) return &s.window;
  }
  return &slots_[kMethods - 1].window;  // more methods than slots: they share it
}

std::optional<MonoDelta> Hedger::Plan(const RemoteMethod& method, bool idempotent, bool tracked,
                                      size_t servers, LatencyWindow** window) {
  if (!idempotent || tracked || servers < 2) return std::nullopt;
  LatencyWindow* w = WindowFor(method);
  std::optional<MonoDelta> delay = HedgeDelay(policy_, idempotent, tracked, servers, w->p95());
  if (!delay) return std::nullopt;
  counters_->eligible.fetch_add(1, std::memory_order_relaxed);
  budget_.RecordCall();
  *window = w;
  return delay;
}

void HedgeGroup::SetAttempt(bool hedge, const std::shared_ptr<OutboundCall>& call) {
  MutexLock l(mu_);
  (hedge ? hedge_ : first_) = call;
}

std::shared_ptr<OutboundCall> HedgeGroup::Other(bool hedge) const {
  MutexLock l(mu_);
  return (hedge ? first_ : hedge_).lock();
}

}  // namespace osprey
