// ServiceQueue: the bounded FIFO between the threads that read one
// service's calls and the workers that run them, with the policy for when a
// queued call wakes a worker: one asleep in Take(), or one waiting on a
// connection's socket (BeginPoll), by writing the eventfd it registered.
// Put() is called by whichever thread read the request under a reactor's
// loop lock (the reactor, or a worker reading in its place), Take(),
// BeginPoll() and EndPoll() by the workers, Shutdown() by the pool's owner;
// every method is thread-safe. A template over the call type so that it can be tested with
// calls of its own (service_queue-test.cc); the pool uses InboundCall.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"

namespace osprey {

template <class Call>
class ServiceQueue {
 public:
  enum class PutResult { kQueued, kFull, kShuttingDown };

  explicit ServiceQueue(size_t capacity) : capacity_(capacity) {}
  ServiceQueue(const ServiceQueue&) = delete;
  ServiceQueue& operator=(const ServiceQueue&) = delete;

  // Queues *call (taking it) unless the queue is full or shutting down, in
  // which case *call is left with the caller to refuse.
  PutResult Put(std::unique_ptr<Call>* call) EXCLUDES(mu_) {
    bool wake;
    {
      MutexLock l(mu_);
      if (shutting_down_) return PutResult::kShuttingDown;
      if (queue_.size() >= capacity_) return PutResult::kFull;
      queue_.push_back(std::move(*call));
      wake = ShouldWakeWorker();
      if (!wake) WakePollerIfNeeded();
    }
    if (wake) not_empty_.Signal();
    return PutResult::kQueued;
  }

  // Put() of each of *calls in order, under one lock: the calls a reactor
  // read together. Each one queued is taken from *calls; those left are
  // the caller's to refuse, for the reason in the same place of *results
  // (kQueued where taken).
  void PutAll(std::vector<std::unique_ptr<Call>>* calls, std::vector<PutResult>* results)
      EXCLUDES(mu_) {
    results->assign(calls->size(), PutResult::kQueued);
    int wakes = 0;
    {
      MutexLock l(mu_);
      for (size_t i = 0; i < calls->size(); ++i) {
        if (shutting_down_) {
          (*results)[i] = PutResult::kShuttingDown;
          continue;
        }
        if (queue_.size() >= capacity_) {
          (*results)[i] = PutResult::kFull;
          continue;
        }
        queue_.push_back(std::move((*calls)[i]));
        if (ShouldWakeWorker()) {
          wakes++;
        } else {
          WakePollerIfNeeded();
        }
      }
    }
    for (int i = 0; i < wakes; ++i) not_empty_.Signal();
  }

  // A worker about to wait on a socket instead of in Take() (the
  // connection it just answered; Reactor::WaitForRequest): registers
  // `wake_fd`, an eventfd that Put() writes when a call needs this worker.
  // False, registering nothing, if a call is already queued or the queue
  // is shutting down: the worker goes to Take() instead.
  // `last_run_ns` as for Take(), which then gets -1: a polling worker is
  // not running a call.
  bool BeginPoll(int wake_fd, int64_t last_run_ns) EXCLUDES(mu_) {
    MutexLock l(mu_);
    if (shutting_down_ || queue_.size() > static_cast<size_t>(coming_)) return false;
    ReportRun(last_run_ns);
    pollers_.push_back(wake_fd);
    return true;
  }
  // The polling worker woke (its socket, or `wake_fd` written): it no
  // longer polls, and comes to Take() with `from_poll` set. A call queued
  // meanwhile, the one it is about to read included, is left to it.
  void EndPoll(int wake_fd) EXCLUDES(mu_) {
    MutexLock l(mu_);
    for (size_t i = 0; i < pollers_.size(); ++i) {
      if (pollers_[i] == wake_fd) {
        pollers_.erase(pollers_.begin() + static_cast<long>(i));
        coming_++;
        return;
      }
    }
    // Put() or Shutdown() took it off the list, and counted it coming.
  }

  // A worker's loop: reports how long its last call ran (`last_run_ns`, or
  // -1 before its first), then blocks for the next call. False once the
  // queue shuts down; the worker then exits. `from_poll`: the worker comes
  // from EndPoll().
  bool Take(std::unique_ptr<Call>* out, int64_t last_run_ns, bool from_poll = false) EXCLUDES(mu_) {
    bool wake;
    {
      MutexLock l(mu_);
      if (from_poll && coming_ > 0) coming_--;
      if (!TakeLocked(out, last_run_ns, &wake)) return false;
    }
    // Signalled after the lock is dropped, so the woken worker need not
    // wait for it.
    if (wake) not_empty_.Signal();
    return true;
  }

  // Refuses new calls, wakes every worker so it exits, and returns the
  // calls still queued for the caller to answer. Idempotent.
  std::deque<std::unique_ptr<Call>> Shutdown() EXCLUDES(mu_) {
    std::deque<std::unique_ptr<Call>> left;
    {
      MutexLock l(mu_);
      shutting_down_ = true;
      left.swap(queue_);
      for (int fd : pollers_) WriteWakeFd(fd);
      coming_ += static_cast<int>(pollers_.size());
      pollers_.clear();
    }
    not_empty_.Broadcast();
    return left;
  }

  size_t size() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return queue_.size();
  }
  size_t capacity() const { return capacity_; }

  // Workers blocked in Take(), and workers running a call they took.
  int sleeping_workers() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return sleeping_;
  }
  int running_workers() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return running_;
  }

 private:
  bool TakeLocked(std::unique_ptr<Call>* out, int64_t last_run_ns, bool* wake) REQUIRES(mu_) {
    *wake = false;
    ReportRun(last_run_ns);
    bool watchdog = false;  // this worker is the queue's watchdog (see below)
    while (queue_.empty() || (watchdog && !shutting_down_)) {
      if (shutting_down_) break;
      sleeping_++;
      if (watchdog) {
        not_empty_.WaitUntil(&mu_, MonoTime::Now() + kWatchdogPeriod);
      } else {
        not_empty_.Wait(&mu_);
      }
      sleeping_--;
      if (pending_wakes_ > 0) pending_wakes_--;
      if (appoint_watchdog_ && !watchdog) {
        // Woken to watch, not to work: stay awake-ish until the calls left
        // to running workers have been taken.
        appoint_watchdog_ = false;
        watchdog = true;
        continue;
      }
      if (watchdog) {
        // Signalled to work, or a call is still queued after a period: take it.
        if (!queue_.empty()) break;
        if (running_ == 0) {
          watchdog = false;  // nothing left to watch
          watchdog_ = false;
        }
        continue;
      }
    }
    if (watchdog) watchdog_ = false;
    if (queue_.empty()) return false;  // shutting down
    *out = std::move(queue_.front());
    queue_.pop_front();
    // More waiting than this worker will take: maybe another should run.
    // Decided before this worker counts as running, so that a busy queue
    // wakes a second worker rather than appointing a watchdog.
    *wake = !queue_.empty() && ShouldWakeWorker();
    running_++;
    return true;
  }

  // A worker's call ended after `last_run_ns` (-1: it ran none).
  void ReportRun(int64_t last_run_ns) REQUIRES(mu_) {
    if (last_run_ns < 0) return;
    running_--;
    // Exponentially weighted, 1/8 per call: follows a change of handler
    // cost within tens of calls.
    avg_run_ns_ += (last_run_ns - avg_run_ns_) / 8;
  }

  // Whether a just-queued call should wake a sleeping worker; counts the
  // wake-up as pending if so.
  bool ShouldWakeWorker() REQUIRES(mu_) {
    // A worker back from polling its socket takes it.
    if (queue_.size() <= static_cast<size_t>(coming_)) return false;
    if (sleeping_ <= pending_wakes_) return false;  // everyone is or will be awake
    // Waking a sleeping worker costs two context switches, tens of
    // microseconds here. When handlers are known to be faster than that, a
    // running worker will reach the queue sooner: leave the call to it
    // unless the queue is getting long. For slow or blocking handlers, wake.
    bool fast = avg_run_ns_ < kFastHandlerNanos;
    if (fast && running_ > 0 && queue_.size() <= static_cast<size_t>(running_) * kCallsPerRunner) {
      if (watchdog_) return false;
      // A running worker's handler may block (on another call to this very
      // service, say): one sleeping worker becomes the watchdog and takes
      // any call that is still queued a few milliseconds later.
      watchdog_ = true;
      appoint_watchdog_ = true;
    }
    pending_wakes_++;
    return true;
  }

  // When no sleeping worker will take a just-queued call, an idle worker
  // polling a socket must: it would otherwise not look until its
  // connection speaks. Written under the lock, so that the eventfd is
  // still the worker's (it gives it back only after EndPoll).
  void WakePollerIfNeeded() REQUIRES(mu_) {
    if (pollers_.empty() || queue_.size() <= static_cast<size_t>(coming_)) return;
    if (sleeping_ > pending_wakes_) return;  // a sleeper was or will be woken
    WriteWakeFd(pollers_.back());
    pollers_.pop_back();
    coming_++;
  }
  static void WriteWakeFd(int fd) {
    uint64_t one = 1;
    ssize_t n = ::write(fd, &one, sizeof(one));
    (void)n;  // EAGAIN: already written
  }

  static constexpr int64_t kFastHandlerNanos = 20000;
  static constexpr int kCallsPerRunner = 4;
  static constexpr MonoDelta kWatchdogPeriod = MonoDelta::FromMilliseconds(2);

  const size_t capacity_;
  mutable Mutex mu_;
  CondVar not_empty_;
  std::deque<std::unique_ptr<Call>> queue_ GUARDED_BY(mu_);
  bool shutting_down_ GUARDED_BY(mu_) = false;
  // Wake-up bookkeeping: workers asleep in not_empty_, signals sent but not
  // yet taken, workers running a call, and the calls' average run time.
  int sleeping_ GUARDED_BY(mu_) = 0;
  int pending_wakes_ GUARDED_BY(mu_) = 0;
  int running_ GUARDED_BY(mu_) = 0;
  int64_t avg_run_ns_ GUARDED_BY(mu_) = 0;
  // A watchdog exists (or was just appointed: the next woken worker takes
  // the role).
  bool watchdog_ GUARDED_BY(mu_) = false;
  bool appoint_watchdog_ GUARDED_BY(mu_) = false;
  // Workers polling a socket (BeginPoll), by eventfd; at most one entry
  // per worker. And workers woken from polling that have not reached
  // Take() yet: the calls queued meanwhile are theirs.
  std::vector<int> pollers_ GUARDED_BY(mu_);
  int coming_ GUARDED_BY(mu_) = 0;
};

}  // namespace osprey
