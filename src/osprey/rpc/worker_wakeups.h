// WorkerWakeups: when a call just queued wakes a worker, and which one. The
// workers of one ServiceQueue are asleep in its Take() (sleeping), running
// a call (running), or waiting on a connection's socket with an eventfd
// registered for the queue to write (polling; Reactor::WaitForRequest).
// This class keeps their counts and decides: wake a sleeper, write a
// poller's eventfd, or leave the call to a running worker or to one coming
// back from polling; and which sleeper becomes the watchdog that takes a
// call a blocked handler would starve.
//
// No lock of its own and no clock: it is a member of its ServiceQueue,
// GUARDED_BY the queue's mutex, and every method runs under that lock, on
// whichever thread holds it (a reader in Put(), a worker in Take(),
// BeginPoll() or EndPoll(), the owner in Shutdown()). The queue does the
// sleeping (its condition variable); the one I/O here is the eventfd
// write, made under the lock so that the eventfd is still the poller's
// (a worker gives it back only after EndPoll).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "osprey/base/event_fd.h"
#include "osprey/base/monotime.h"

namespace osprey {

class WorkerWakeups {
 public:
  // Waking a sleeping worker costs two context switches, tens of
  // microseconds here: handlers faster than this are left to a running
  // worker, which reaches the queue sooner.
  static constexpr int64_t kFastHandlerNanos = 20000;
  // Queued calls per running worker past which a sleeper is woken even for
  // fast handlers.
  static constexpr int kCallsPerRunner = 4;
  // How long a watchdog sleeps between looks at the queue: a call queued
  // behind a handler that blocks waits at most about this long.
  static constexpr MonoDelta kWatchdogPeriod = MonoDelta::FromMilliseconds(2);

  // A worker's call ended (Take() or BeginPoll() with a run to report).
  void RunEnded() { running_--; }
  // A worker took a call and runs it.
  void RunStarted() { running_++; }

  // A worker is about to sleep in Take().
  void Sleeping() { sleeping_++; }
  // A worker woke in Take(); `*watchdog`: it watches (it may become or stop
  // being the watchdog here). `call_queued`: a call is queued now. True:
  // take a call now, whatever the queue's emptiness would say (a watchdog
  // that found one); false: look at the queue again.
  bool Woke(bool* watchdog, bool call_queued) {
    sleeping_--;
    if (pending_wakes_ > 0) pending_wakes_--;
    if (appoint_watchdog_ && !*watchdog) {
      // Woken to watch, not to work: stay awake-ish until the calls left
      // to running workers have been taken.
      appoint_watchdog_ = false;
      *watchdog = true;
      return false;
    }
    if (*watchdog) {
      // Signalled to work, or a call is still queued after a period: take it.
      if (call_queued) return true;
      if (running_ == 0) {
        *watchdog = false;  // nothing left to watch
        watchdog_ = false;
      }
    }
    return false;
  }
  // The watchdog leaves Take() with a call (or the queue shut down): the
  // next fast call left to a running worker appoints another.
  void WatchdogLeft() { watchdog_ = false; }

  // Whether a just-queued call, making `queued` calls, should wake a
  // sleeping worker, given the calls' average run time; counts the wake-up
  // as pending if so (the queue then signals its condition variable).
  bool ShouldWakeWorker(size_t queued, int64_t avg_run_ns) {
    // A worker back from polling its socket takes it.
    if (queued <= static_cast<size_t>(coming_)) return false;
    if (sleeping_ <= pending_wakes_) return false;  // everyone is or will be awake
    // For handlers known to be faster than a wake-up, leave the call to a
    // running worker unless the queue is getting long. For slow or
    // blocking handlers, wake.
    bool fast = avg_run_ns < kFastHandlerNanos;
    if (fast && running_ > 0 && queued <= static_cast<size_t>(running_) * kCallsPerRunner) {
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

  // When no sleeping worker will take a just-queued call (making `queued`),
  // an idle worker polling a socket must: it would otherwise not look until
  // its connection speaks. Writes its eventfd.
  void WakePollerIfNeeded(size_t queued) {
    if (pollers_.empty() || queued <= static_cast<size_t>(coming_)) return;
    if (sleeping_ > pending_wakes_) return;  // a sleeper was or will be woken
    pollers_.back().Signal();
    pollers_.pop_back();
    coming_++;
  }

  // Whether a worker may poll its socket with `queued` calls queued: only
  // if every one of them is left to a worker already coming back.
  bool MayPoll(size_t queued) const { return queued <= static_cast<size_t>(coming_); }
  // A worker polls, to be woken by a write to `wake_fd`.
  void AddPoller(EventFdRef wake_fd) { pollers_.push_back(wake_fd); }
  // The polling worker woke: it no longer polls, and is coming to Take().
  // (If a Put() or Shutdown() already took it off the list, it was counted
  // coming then.)
  void EndPoll(EventFdRef wake_fd) {
    for (size_t i = 0; i < pollers_.size(); ++i) {
      if (pollers_[i] == wake_fd) {
        pollers_.erase(pollers_.begin() + static_cast<long>(i));
        coming_++;
        return;
      }
    }
  }
  // A worker back from polling reached Take().
  void ArrivedFromPoll() {
    if (coming_ > 0) coming_--;
  }
  // Shutting down: every poller is woken, and counted coming.
  void WakeAllPollers() {
    for (EventFdRef fd : pollers_) fd.Signal();
    coming_ += static_cast<int>(pollers_.size());
    pollers_.clear();
  }

  int sleeping() const { return sleeping_; }
  int running() const { return running_; }

 private:
  // Workers asleep in the queue's condition variable, signals sent but not
  // yet taken, and workers running a call.
  int sleeping_ = 0;
  int pending_wakes_ = 0;
  int running_ = 0;
  // A watchdog exists (or was just appointed: the next woken worker takes
  // the role).
  bool watchdog_ = false;
  bool appoint_watchdog_ = false;
  // Workers polling a socket, by eventfd; at most one entry per worker.
  // And workers woken from polling that have not reached Take() yet: the
  // calls queued meanwhile are theirs.
  std::vector<EventFdRef> pollers_;
  int coming_ = 0;
};

}  // namespace osprey
