// CallerWait: a blocking caller's wait for its call's end (Proxy's sync
// calls), and the one place that knows how that caller is woken. Its code
// is in park.cc, with the rest of the park.
#pragma once

#include <pthread.h>

#include <atomic>

#include "osprey/base/countdown_latch.h"
#include "osprey/transport/reactor.h"

namespace osprey::transport {

// The caller either sleeps on a latch or, when its call parked the
// connection for it (caller reads: QueueCall filled parked()), polls the
// socket itself (Reactor::WaitAsReader) and is woken through the eventfd
// its ParkedConnection leases. Finish() runs once, on whichever thread ends
// the call; everything else on the caller's thread, which owns the object
// (on its stack) and may destroy it as soon as Wait() returns.
class CallerWait {
 public:
  CallerWait() = default;
  CallerWait(const CallerWait&) = delete;
  CallerWait& operator=(const CallerWait&) = delete;

  // Where a sync call's QueueCall puts the connection it parked for this
  // caller, if it did. Caller's thread, before Wait().
  ParkedConnection* parked() { return &parked_; }

  // The call has ended: any thread, once. Touches nothing of this object
  // after the count down, since the caller may return at once. On a
  // reactor's own thread the count down waits for the end of the loop's
  // turn (Reactor::CountDownAfterTurn).
  void Finish();

  // Caller's thread: returns once Finish() has run, having read the
  // connection itself meanwhile if it was parked for it. The lease goes
  // back with parked_, when this object is destroyed: after `done_`
  // counted down, nothing writes it.
  void Wait();

 private:
  CountDownLatch done_{1};
  std::atomic<bool> finished_{false};
  // Set while the caller reads its own answer: the eventfd that wakes its
  // poll, held (with parked_) until done_ has counted down, so Finish
  // writes it only while it is this caller's.
  std::atomic<const WakeFdLease*> polling_{nullptr};
  const pthread_t caller_ = pthread_self();
  // Declared last, so destroyed first: the lease goes back before the
  // rest, as it did when it lived on Proxy::WaitFor's stack after them.
  ParkedConnection parked_;
};

}  // namespace osprey::transport
