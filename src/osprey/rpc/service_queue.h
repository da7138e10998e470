// ServiceQueue: the bounded queue between the threads that read one
// service's calls and the workers that run them: which call runs next,
// which calls are refused, and when a queued call wakes a worker: one
// asleep in Take(), or one waiting on a connection's socket (BeginPoll), by
// writing the eventfd it registered.
//
// Order: earliest deadline first, first come first served among equal
// deadlines (Options::deadline_order; else first in, first out). A full
// queue makes room by pushing out the queued call with the latest deadline
// when the newcomer's is earlier (Kudu's LifoServiceQueue does the same).
//
// Overload (Options::overload_control): QueueDelayControl watches how long
// taken calls waited. Each call has a patience: the delay target, or an
// eighth of the time its caller gave it when that is longer (Patience()).
// A newcomer is refused when the calls it would wait behind hold more than
// its patience's worth of work: from the start if it has a deadline
// (Options::admit_by_patience), else once calls wait past the target
// (watching or overloaded). While overloaded, the newest call (the latest deadline) is
// taken first, and newcomers push out the calls that waited past their
// patience. Always with overload_control, a newcomer that the calls ahead
// of it would keep past its deadline is refused at once rather than left to
// expire. Refusing is the caller's work: the queue hands back every call it
// will not run, with the reason.
//
// Put() is called by whichever thread read the request under a reactor's
// loop lock (the reactor, or a worker reading in its place), Take(),
// BeginPoll() and EndPoll() by the workers, RemoveIf() by a reactor whose
// connection closed, Shutdown() by the pool's owner; every method is
// thread-safe. A template over the call type (deadline() and received_at()
// as InboundCall's) so that it can be tested with calls of its own
// (service_queue-test.cc); the pool uses InboundCall.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "osprey/base/event_fd.h"
#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/rpc/queue_delay_control.h"

namespace osprey {

template <class Call>
class ServiceQueue {
 public:
  // Why a call is not queued (kQueued: it is). kEvicted and kWaitedTooLong
  // are reasons only for calls pushed out after they were queued.
  enum class PutResult {
    kQueued,
    kFull,               // queue_length calls queued, none with a later deadline
    kOverloaded,         // calls wait past the target, and those ahead exceed its patience
    kWouldMissDeadline,  // the calls ahead would keep it past its deadline
    kShuttingDown,
    kEvicted,        // pushed out of a full queue by a call with an earlier deadline
    kWaitedTooLong,  // waited past its patience while overloaded
    kExpired,        // its deadline passed while it waited
  };
  // A call the queue will not run, for the caller to answer.
  struct Refused {
    std::unique_ptr<Call> call;
    PutResult why;
  };
  using RefusedList = std::vector<Refused>;

  struct Options {
    size_t capacity = 50;
    // Workers that take from this queue: how many calls run at once.
    int workers = 1;
    bool deadline_order = true;
    bool overload_control = true;
    // With overload_control: a call with a deadline is refused when the
    // calls ahead of it hold more than its patience's worth of work even
    // before calls wait past the target (else only its deadline bounds
    // that wait until then).
    bool admit_by_patience = true;
    MonoDelta delay_target = MonoDelta::FromMilliseconds(5);
    MonoDelta delay_interval = MonoDelta::FromMilliseconds(100);
    // The time a worker takes a call at; tests inject their own.
    std::function<MonoTime()> clock;
  };

  // First in, first out, bounded, and nothing else: the wake-up policy's
  // tests.
  explicit ServiceQueue(size_t capacity) : ServiceQueue(FifoOptions(capacity)) {}
  explicit ServiceQueue(Options options)
      : options_(std::move(options)),
        capacity_(options_.capacity),
        control_(options_.delay_target, options_.delay_interval) {
    if (!options_.clock) options_.clock = [] { return MonoTime::Now(); };
    if (options_.workers < 1) options_.workers = 1;
  }
  ServiceQueue(const ServiceQueue&) = delete;
  ServiceQueue& operator=(const ServiceQueue&) = delete;

  // Queues *call (taking it), or leaves it in *call and says why the
  // caller must refuse it. Calls already queued that this one pushes out
  // are appended to *pushed_out, for the caller to answer; with no list
  // (null) none is pushed out and a full queue refuses the newcomer.
  PutResult Put(std::unique_ptr<Call>* call, RefusedList* pushed_out = nullptr) EXCLUDES(mu_) {
    bool wake = false;
    PutResult result;
    {
      MutexLock l(mu_);
      result = PutLocked(call, pushed_out, &wake);
    }
    if (wake) not_empty_.Signal();
    return result;
  }

  // Put() of each of *calls in order, under one lock: the calls a reactor
  // read together. Each one queued is taken from *calls; those left are
  // the caller's to refuse, for the reason in the same place of *results
  // (kQueued where taken).
  void PutAll(std::vector<std::unique_ptr<Call>>* calls, std::vector<PutResult>* results,
              RefusedList* pushed_out = nullptr) EXCLUDES(mu_) {
    results->assign(calls->size(), PutResult::kQueued);
    int wakes = 0;
    {
      MutexLock l(mu_);
      for (size_t i = 0; i < calls->size(); ++i) {
        bool wake = false;
        (*results)[i] = PutLocked(&(*calls)[i], pushed_out, &wake);
        if (wake) wakes++;
      }
    }
    for (int i = 0; i < wakes; ++i) not_empty_.Signal();
  }

  // Takes out every queued call for which `pred` holds (the calls of a
  // connection that closed), appending them to *out. Returns how many.
  template <class Pred>
  size_t RemoveIf(Pred pred, std::vector<std::unique_ptr<Call>>* out) EXCLUDES(mu_) {
    MutexLock l(mu_);
    size_t n = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (pred(**it)) {
        out->push_back(std::move(*it));
        it = queue_.erase(it);
        n++;
      } else {
        ++it;
      }
    }
    if (n > 0 && queue_.empty()) control_.OnEmpty();
    return n;
  }

  // A worker about to wait on a socket instead of in Take() (the
  // connection it just answered; Reactor::WaitForRequest): registers
  // `wake_fd`, an eventfd that Put() writes when a call needs this worker.
  // False, registering nothing, if a call is already queued or the queue
  // is shutting down: the worker goes to Take() instead.
  // `last_run_ns` as for Take(), which then gets -1: a polling worker is
  // not running a call.
  bool BeginPoll(EventFdRef wake_fd, int64_t last_run_ns) EXCLUDES(mu_) {
    MutexLock l(mu_);
    if (shutting_down_ || queue_.size() > static_cast<size_t>(coming_)) return false;
    ReportRun(last_run_ns);
    pollers_.push_back(wake_fd);
    return true;
  }
  // The polling worker woke (its socket, or `wake_fd` written): it no
  // longer polls, and comes to Take() with `from_poll` set. A call queued
  // meanwhile, the one it is about to read included, is left to it.
  void EndPoll(EventFdRef wake_fd) EXCLUDES(mu_) {
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
  // from EndPoll(). While overloaded, queued calls whose deadline passed
  // are appended to *shed (if given), for the worker to answer; true with
  // *out null when they were all there was (the worker then reports no
  // run, -1, at its next Take).
  bool Take(std::unique_ptr<Call>* out, int64_t last_run_ns, bool from_poll = false,
            RefusedList* shed = nullptr) EXCLUDES(mu_) {
    bool wake;
    // Read before the lock, not under it: workers and readers contend for
    // it at hundreds of thousands of calls a second.
    const MonoTime now = options_.overload_control ? options_.clock() : MonoTime();
    {
      MutexLock l(mu_);
      if (from_poll && coming_ > 0) coming_--;
      if (!TakeLocked(out, last_run_ns, now, shed, &wake)) return false;
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
      for (EventFdRef fd : pollers_) fd.Signal();
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
  // Whether QueueDelayControl says overloaded, and how many times it has.
  bool overloaded() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return control_.overloaded();
  }
  uint64_t overload_episodes() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return control_.episodes();
  }

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
  static Options FifoOptions(size_t capacity) {
    Options o;
    o.capacity = capacity;
    o.deadline_order = false;
    o.overload_control = false;
    return o;
  }

  PutResult PutLocked(std::unique_ptr<Call>* call, RefusedList* pushed_out, bool* wake)
      REQUIRES(mu_) {
    if (shutting_down_) return PutResult::kShuttingDown;
    const Call& c = **call;
    const bool overloaded = options_.overload_control && control_.overloaded();
    // A newcomer pushes out the calls that waited past their patience: while
    // calls keep coming, the old ones would only be served after them.
    if (overloaded && pushed_out != nullptr) ShedStale(c.received_at(), true, pushed_out);
    // Where it goes: after every call with a deadline no later than its own
    // (scanned from the back: with one timeout for all, no step at all).
    size_t pos = queue_.size();
    if (options_.deadline_order) {
      while (pos > 0 && queue_[pos - 1]->deadline() > c.deadline()) --pos;
    }
    if (options_.overload_control && avg_run_ns_ > 0) {
      const bool standing = control_.state() != QueueDelayControl::State::kNormal;
      const bool has_deadline = c.deadline() != MonoTime::Max();
      // No newcomer joins more than its patience's worth of work: once
      // calls wait past the target, every newcomer; before that, those with
      // a deadline too, so that the queue a sudden overload builds before
      // the first late take is no longer than the patience either. (A call
      // without a deadline has only the target for patience: it queues
      // freely until calls wait past it.) Overloaded, every queued call
      // counts (newest first, the older ones are shed at their patience);
      // else those ahead of it.
      if (standing || (has_deadline && options_.admit_by_patience)) {
        const size_t behind = overloaded ? queue_.size() : pos;
        if (behind >= AdmitLimit(Patience(c))) return PutResult::kOverloaded;
      }
      if (!standing && has_deadline && c.received_at() + WaitBehind(pos) > c.deadline()) {
        return PutResult::kWouldMissDeadline;
      }
    }
    if (queue_.size() >= capacity_) {
      // The latest deadline is at the back.
      if (!options_.deadline_order || pushed_out == nullptr || pos == queue_.size()) {
        return PutResult::kFull;
      }
      pushed_out->push_back(Refused{std::move(queue_.back()), PutResult::kEvicted});
      queue_.pop_back();
      pos = std::min(pos, queue_.size());
    }
    if (pos == queue_.size()) {
      queue_.push_back(std::move(*call));
    } else {
      queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(pos), std::move(*call));
    }
    *wake = ShouldWakeWorker();
    if (!*wake) WakePollerIfNeeded();
    return PutResult::kQueued;
  }

  // How long `c` may wait once calls wait past the target. A caller that
  // gave a call 60 s loses nothing to a burst the workers clear in a second,
  // and refusing it would turn that burst into errors; one that gave 50 ms
  // counts every millisecond. An eighth of its time: half of the quarter
  // that the overload goals allow a served call (docs/performance.md), as the
  // wait ahead is an average estimate and the call still has to run. No
  // deadline: the target alone.
  MonoDelta Patience(const Call& c) const REQUIRES(mu_) {
    const MonoDelta target = control_.target();
    if (c.deadline() == MonoTime::Max()) return target;
    return std::max(target, MonoDelta::FromNanoseconds(
                                (c.deadline() - c.received_at()).ToNanoseconds() / kPatienceShare));
  }
  // How many queued calls the workers run within `patience` (at least one
  // each, so that no worker is left idle).
  size_t AdmitLimit(MonoDelta patience) const REQUIRES(mu_) {
    if (avg_run_ns_ <= 0) return capacity_;
    int64_t n = patience.ToNanoseconds() * options_.workers / avg_run_ns_;
    return static_cast<size_t>(std::max<int64_t>(n, options_.workers));
  }
  // How long a call waits behind `ahead` queued calls.
  MonoDelta WaitBehind(size_t ahead) const REQUIRES(mu_) {
    return MonoDelta::FromNanoseconds(static_cast<int64_t>(ahead) * avg_run_ns_ / options_.workers);
  }

  // Pushes out, from the front, the calls whose deadline passed by `now`,
  // and with `waited_too_long` those that waited past their patience.
  void ShedStale(MonoTime now, bool waited_too_long, RefusedList* out) REQUIRES(mu_) {
    // In arrival order the front is the oldest; in deadline order a call
    // with a later deadline may be older, and waits for a later pass.
    while (!queue_.empty()) {
      const Call& front = *queue_.front();
      PutResult why;
      if (front.deadline() <= now) {
        why = PutResult::kExpired;
      } else if (waited_too_long && now - front.received_at() > Patience(front)) {
        why = PutResult::kWaitedTooLong;
      } else {
        break;
      }
      out->push_back(Refused{std::move(queue_.front()), why});
      queue_.pop_front();
    }
    // Emptied by shedding, not by workers keeping up: still overloaded.
  }

  // `now`: the clock read just before the lock; if this worker then waits
  // for a call, the call that wakes it has waited no longer than the wake-up.
  bool TakeLocked(std::unique_ptr<Call>* out, int64_t last_run_ns, MonoTime now, RefusedList* shed,
                  bool* wake) REQUIRES(mu_) {
    *wake = false;
    ReportRun(last_run_ns);
    bool watchdog = false;  // this worker is the queue's watchdog (see below)
    bool waited = false;
    while (queue_.empty() || (watchdog && !shutting_down_)) {
      if (shutting_down_) break;
      waited = true;
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
    if (options_.overload_control) {
      if (waited) now = std::max(now, queue_.back()->received_at());
      if (control_.overloaded() && shed != nullptr) {
        // Newest first leaves the oldest behind: those whose deadline
        // passed go now. (With no newcomer, the rest are still served.)
        ShedStale(now, false, shed);
        if (queue_.empty()) {
          out->reset();  // nothing to run; the worker answers *shed, then comes back
          return true;
        }
      }
      if (control_.overloaded()) {
        *out = std::move(queue_.back());
        queue_.pop_back();
      } else {
        *out = std::move(queue_.front());
        queue_.pop_front();
      }
      control_.OnTake(now, now - (*out)->received_at());
      if (queue_.empty()) control_.OnEmpty();
    } else {
      *out = std::move(queue_.front());
      queue_.pop_front();
    }
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
    // A call behind one running handler waits up to a handler's time
    // without any backlog: the delay target is at least two of them.
    if (options_.overload_control) control_.set_floor(MonoDelta::FromNanoseconds(2 * avg_run_ns_));
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
    pollers_.back().Signal();
    pollers_.pop_back();
    coming_++;
  }

  static constexpr int64_t kPatienceShare = 8;
  static constexpr int64_t kFastHandlerNanos = 20000;
  static constexpr int kCallsPerRunner = 4;
  static constexpr MonoDelta kWatchdogPeriod = MonoDelta::FromMilliseconds(2);

  Options options_;  // set in the constructor, read-only after
  const size_t capacity_;
  mutable Mutex mu_;
  QueueDelayControl control_ GUARDED_BY(mu_);
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
  std::vector<EventFdRef> pollers_ GUARDED_BY(mu_);
  int coming_ GUARDED_BY(mu_) = 0;
};

}  // namespace osprey
