// RetryBudget: caps the retries a messenger sends one server after it
// refused calls as overloaded at a share of the calls started to it over a
// sliding window (Google SRE's retry budget, about 10%), so that a server
// refusing calls is not sent more by the clients' retries: with every call
// retried, calls sent stay within (1 + ratio) x calls offered, plus a floor
// of `min_per_second` retries for each second of the window (Finagle's
// reserve) so that a client making few calls can still retry a few. Only
// refusals spend it (OutboundCall::ScheduleRetry): a broken connection is
// not a server refusing work. Any thread: calls on every reactor of a
// messenger share one per server (a mutex).
#pragma once

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/sliding_window.h"

namespace osprey {

class RetryBudget {
 public:
  RetryBudget(double ratio, double min_per_second, MonoDelta window)
      : ratio_(ratio), floor_(min_per_second * window.ToSeconds()), counts_(window) {}

  // A call's first attempt started at `now`.
  void RecordCall(MonoTime now) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    counts_.Add(now, kCalls);
  }
  // Whether a retry may be sent at `now`; if so, it is counted.
  bool TryRetry(MonoTime now) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    const double allowed = floor_ + ratio_ * static_cast<double>(counts_.Sum(now, kCalls));
    if (static_cast<double>(counts_.Sum(now, kRetries)) + 1 > allowed) return false;
    counts_.Add(now, kRetries);
    return true;
  }
  uint64_t retries_in_window(MonoTime now) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return counts_.Sum(now, kRetries);
  }

 private:
  enum { kCalls, kRetries };
  const double ratio_;
  const double floor_;  // retries any window allows, calls or not
  Mutex mu_;
  SlidingWindowCounts<2> counts_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
