// AdaptiveSpin: before a thread sleeps on a socket or an epoll set, it may
// poll without blocking for a short window instead. Where a sleep and a
// wake-up cost tens of microseconds of CPU and latency (a virtual machine:
// the hypervisor's part of every wake-up), a thread whose event comes
// within the window spends less CPU spinning than sleeping, and answers
// sooner. Where events come later, spinning only burns a CPU that other
// threads need (many threads on few cores): each window that ends with
// nothing doubles the number of waits that skip spinning (up to a bound),
// and each that finds its event halves it. One per waiting thread; not
// thread-safe.
#pragma once

#include <algorithm>
#include <functional>

#include "osprey/base/monotime.h"

namespace osprey {

class AdaptiveSpin {
 public:
  // Never skips more than kMaxSkip waits in a row: a thread whose waits
  // turned short again starts spinning within that many.
  static constexpr int kMaxSkip = 4096;

  // `clock`: the time source, replaced by tests.
  explicit AdaptiveSpin(std::function<MonoTime()> clock = &MonoTime::Now)
      : clock_(std::move(clock)) {}

  enum class Result {
    kSkipped,  // recent spins came to nothing, or `window` is not positive
    kFound,    // poll() returned true: the caller need not sleep
    kMissed,   // the window passed
  };
  // Unless recent spins came to nothing, calls `poll()`, which must not
  // block, until it returns true or `window` passes. Unless kFound, the
  // caller sleeps as it would have.
  template <class Poll>
  Result Spin(MonoDelta window, Poll&& poll) {
    if (window <= MonoDelta()) return Result::kSkipped;
    if (skip_ > 0) {
      --skip_;
      return Result::kSkipped;
    }
    const MonoTime until = clock_() + window;
    bool found;
    do {
      found = poll();
    } while (!found && clock_() < until);
    backoff_ = found ? std::max(1, backoff_ / 2) : std::min(kMaxSkip, backoff_ * 2);
    skip_ = found ? 0 : backoff_;
    return found ? Result::kFound : Result::kMissed;
  }

  // Waits that will skip spinning before the next spin.
  int skipping() const { return skip_; }

 private:
  const std::function<MonoTime()> clock_;
  int backoff_ = 1;
  int skip_ = 0;
};

}  // namespace osprey
