// CountDownLatch: waiters block until CountDown() has been called `count`
// times. Any thread.
#pragma once

#include <cstdint>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"

namespace osprey {

class CountDownLatch {
 public:
  explicit CountDownLatch(int64_t count) : count_(count) {}

  void CountDown(int64_t n = 1);
  void Wait();
  // Returns false if the deadline passed first.
  bool WaitUntil(MonoTime deadline);
  bool WaitFor(MonoDelta delta) { return WaitUntil(MonoTime::Now() + delta); }
  int64_t count() const;
  // Sets a new count; waiters already released stay released.
  void Reset(int64_t count);

 private:
  mutable Mutex mu_;
  int64_t count_ OSPREY_GUARDED_BY(mu_);
  CondVar cond_;
};

}  // namespace osprey
