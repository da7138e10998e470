// ClientThrottle: Google SRE's client-side adaptive throttling for one
// server. Over a sliding window (two minutes in the SRE book) it counts the
// requests this client made and those the server accepted (answered with
// anything but a refusal, ERROR_SERVER_TOO_BUSY); a new request is refused
// locally, never sent, with probability
//   max(0, (requests - K x accepts) / (requests + 1)).
// While the server accepts more than 1/K of the requests nothing is
// refused; past that, the refusals a saturated server would have spent CPU
// on stay on the client. Requests refused locally count as requests, so
// the probability falls again as soon as the server accepts. The random
// draw is passed in: tests bring their own. Any thread (a mutex).
#pragma once

#include <algorithm>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/sliding_window.h"

namespace osprey {

class ClientThrottle {
 public:
  ClientThrottle(double k, MonoDelta window) : k_(k), counts_(window) {}

  // The probability that a request made at `now` is refused locally.
  double RejectProbability(MonoTime now) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return ProbabilityLocked(now);
  }
  // A request at `now`: counts it, and says whether to refuse it locally;
  // `uniform` is a draw from [0, 1).
  bool ShouldRefuse(MonoTime now, double uniform) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    const double p = ProbabilityLocked(now);
    counts_.Add(now, kRequests);
    return uniform < p;
  }
  // The server accepted a request (answered it, successfully or not, other
  // than refusing it).
  void RecordAccepted(MonoTime now) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    counts_.Add(now, kAccepts);
  }

 private:
  double ProbabilityLocked(MonoTime now) OSPREY_REQUIRES(mu_) {
    const double requests = static_cast<double>(counts_.Sum(now, kRequests));
    const double accepts = static_cast<double>(counts_.Sum(now, kAccepts));
    return std::max(0.0, (requests - k_ * accepts) / (requests + 1));
  }
  enum { kRequests, kAccepts };
  const double k_;
  Mutex mu_;
  SlidingWindowCounts<2> counts_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
