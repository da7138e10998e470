// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// clang thread-safety annotations, so GUARDED_BY fields are checked.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "osprey/base/monotime.h"
#include "osprey/base/thread_annotations.h"

namespace osprey {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For the analysis only: tells it the caller holds the lock.
  void AssertHeld() const OSPREY_TSA(assert_capability(this)) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable tied to one Mutex, which callers must hold.
//
// Wait and WaitUntil carry no REQUIRES annotation: the analysis would see the
// capability as "cond.mu_", which it cannot match with the Mutex the caller
// actually locked (e.g. "mu_" of the owning class), so every call site would
// fail to compile under clang -Werror=thread-safety.
class CondVar {
 public:
  explicit CondVar(Mutex* mu) : mu_(mu) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns false if the deadline passed before a signal.
  bool WaitUntil(MonoTime deadline) {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    bool signalled = cv_.wait_until(lock, deadline.time_point()) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void Signal() { cv_.notify_one(); }
  void Broadcast() { cv_.notify_all(); }

 private:
  Mutex* const mu_;
  std::condition_variable cv_;
};

}  // namespace osprey
