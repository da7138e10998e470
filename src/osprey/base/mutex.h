// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// clang thread-safety annotations, so GUARDED_BY fields are checked.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "osprey/base/monotime.h"
#include "osprey/base/thread_annotations.h"

namespace osprey {

class OSPREY_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() OSPREY_ACQUIRE() { mu_.lock(); }
  void Unlock() OSPREY_RELEASE() { mu_.unlock(); }
  bool TryLock() OSPREY_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For the analysis only: tells it the caller holds the lock.
  void AssertHeld() const OSPREY_TSA(assert_capability(this)) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class OSPREY_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) OSPREY_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() OSPREY_RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable. Each wait names the Mutex the caller holds, so
// the analysis checks it (REQUIRES) at every call site; one CondVar must
// always be used with the same Mutex.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) OSPREY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns false if the deadline passed before a signal.
  bool WaitUntil(Mutex* mu, MonoTime deadline) OSPREY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool signalled = cv_.wait_until(lock, deadline.time_point()) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void Signal() { cv_.notify_one(); }
  void Broadcast() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace osprey
