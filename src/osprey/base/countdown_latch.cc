#include "osprey/base/countdown_latch.h"

namespace osprey {

void CountDownLatch::CountDown(int64_t n) {
  MutexLock l(mu_);
  if (count_ == 0) return;
  count_ = n >= count_ ? 0 : count_ - n;
  if (count_ == 0) cond_.Broadcast();
}

void CountDownLatch::Wait() {
  MutexLock l(mu_);
  while (count_ > 0) cond_.Wait(&mu_);
}

bool CountDownLatch::WaitUntil(MonoTime deadline) {
  MutexLock l(mu_);
  while (count_ > 0) {
    if (!cond_.WaitUntil(&mu_, deadline) && count_ > 0 && MonoTime::Now() >= deadline) return false;
  }
  return true;
}

int64_t CountDownLatch::count() const {
  MutexLock l(mu_);
  return count_;
}

void CountDownLatch::Reset(int64_t count) {
  MutexLock l(mu_);
  count_ = count;
  if (count_ == 0) cond_.Broadcast();
}

}  // namespace osprey
