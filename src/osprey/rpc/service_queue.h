// ServiceQueue: the bounded queue between the threads that read one
// service's calls and the workers that run them: it stores the calls,
// decides which runs next, and sheds the stale ones. Which calls it
// refuses is AdmissionRule's decision (admission.h), and when a queued
// call wakes a worker (one asleep in Take(), or one waiting on a
// connection's socket, BeginPoll, by writing the eventfd it registered) is
// WorkerWakeups' (worker_wakeups.h); both are fed the queue's state here,
// under its lock.
//
// Order: earliest deadline first, first come first served among equal
// deadlines (Options::deadline_order; else first in, first out). A full
// queue makes room by pushing out the queued call with the latest deadline
// when the newcomer's is earlier (Kudu's LifoServiceQueue does the same).
//
// Overload (Options::overload_control): QueueDelayControl watches how long
// taken calls waited. Each call has a patience: the delay target, or an
// eighth of the time its caller gave it when that is longer
// (AdmissionRule::Patience). A newcomer is refused when the calls it would
// wait behind hold more than its patience's worth of work: from the start
// if it has a deadline (Options::admit_by_patience), else once calls wait
// past the target (watching or overloaded). While overloaded, the newest
// call (the latest deadline) is taken first, and newcomers push out the
// calls that waited past their patience. Always with overload_control, a
// newcomer that the calls ahead of it would keep past its deadline is
// refused at once rather than left to expire (AdmissionRule has the rule
// cell by cell). Refusing is the caller's work: the queue hands back every
// call it will not run, with the reason.
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
#include "osprey/rpc/admission.h"
#include "osprey/rpc/queue_delay_control.h"
#include "osprey/rpc/worker_wakeups.h"

namespace osprey {

template <class Call>
class ServiceQueue {
 public:
  // Why a call is not queued (kQueued: it is). kEvicted, kWaitedTooLong
  // and kExpired are reasons only for calls pushed out after they were
  // queued.
  using PutResult = QueuePutResult;
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
    // With overload_control, until overloaded (or outpaced): a call with a
    // deadline is admitted whenever it can still be answered by it
    // (AdmissionRule).
    bool admit_to_deadline = true;
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
        rule_(RuleSettings(options_)),
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
  PutResult Put(std::unique_ptr<Call>* call, RefusedList* pushed_out = nullptr)
      OSPREY_EXCLUDES(mu_) {
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
              RefusedList* pushed_out = nullptr) OSPREY_EXCLUDES(mu_) {
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
  size_t RemoveIf(Pred pred, std::vector<std::unique_ptr<Call>>* out) OSPREY_EXCLUDES(mu_) {
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
    if (n > 0 && queue_.empty()) control_.OnEmpty(options_.clock());
    return n;
  }

  // A worker about to wait on a socket instead of in Take() (the
  // connection it just answered; Reactor::WaitForRequest): registers
  // `wake_fd`, an eventfd that Put() writes when a call needs this worker.
  // False, registering nothing, if a call is already queued or the queue
  // is shutting down: the worker goes to Take() instead.
  // `last_run_ns` as for Take(), which then gets -1: a polling worker is
  // not running a call.
  bool BeginPoll(EventFdRef wake_fd, int64_t last_run_ns) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    if (shutting_down_ || !wakeups_.MayPoll(queue_.size())) return false;
    ReportRun(last_run_ns);
    wakeups_.AddPoller(wake_fd);
    return true;
  }
  // The polling worker woke (its socket, or `wake_fd` written): it no
  // longer polls, and comes to Take() with `from_poll` set. A call queued
  // meanwhile, the one it is about to read included, is left to it.
  void EndPoll(EventFdRef wake_fd) OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    wakeups_.EndPoll(wake_fd);
  }

  // A worker's loop: reports how long its last call ran (`last_run_ns`, or
  // -1 before its first), then blocks for the next call. False once the
  // queue shuts down; the worker then exits. `from_poll`: the worker comes
  // from EndPoll(). While overloaded, queued calls whose deadline passed
  // are appended to *shed (if given), for the worker to answer; true with
  // *out null when they were all there was (the worker then reports no
  // run, -1, at its next Take).
  bool Take(std::unique_ptr<Call>* out, int64_t last_run_ns, bool from_poll = false,
            RefusedList* shed = nullptr) OSPREY_EXCLUDES(mu_) {
    bool wake;
    // Read before the lock, not under it: workers and readers contend for
    // it at hundreds of thousands of calls a second.
    const MonoTime now = options_.overload_control ? options_.clock() : MonoTime();
    {
      MutexLock l(mu_);
      if (from_poll) wakeups_.ArrivedFromPoll();
      if (!TakeLocked(out, last_run_ns, now, shed, &wake)) return false;
    }
    // Signalled after the lock is dropped, so the woken worker need not
    // wait for it.
    if (wake) not_empty_.Signal();
    return true;
  }

  // Refuses new calls, wakes every worker so it exits, and returns the
  // calls still queued for the caller to answer. Idempotent.
  std::deque<std::unique_ptr<Call>> Shutdown() OSPREY_EXCLUDES(mu_) {
    std::deque<std::unique_ptr<Call>> left;
    {
      MutexLock l(mu_);
      shutting_down_ = true;
      left.swap(queue_);
      wakeups_.WakeAllPollers();
    }
    not_empty_.Broadcast();
    return left;
  }

  size_t size() const OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return queue_.size();
  }
  size_t capacity() const { return capacity_; }
  // Whether QueueDelayControl says overloaded, and how many times it has.
  bool overloaded() const OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return control_.overloaded();
  }
  uint64_t overload_episodes() const OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return control_.episodes();
  }

  // Workers blocked in Take(), and workers running a call they took.
  int sleeping_workers() const OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return wakeups_.sleeping();
  }
  int running_workers() const OSPREY_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return wakeups_.running();
  }

 private:
  static Options FifoOptions(size_t capacity) {
    Options o;
    o.capacity = capacity;
    o.deadline_order = false;
    o.overload_control = false;
    return o;
  }
  static AdmissionRule::Settings RuleSettings(const Options& o) {
    AdmissionRule::Settings s;
    s.capacity = o.capacity;
    s.workers = o.workers;
    s.deadline_order = o.deadline_order;
    s.overload_control = o.overload_control;
    s.admit_by_patience = o.admit_by_patience;
    s.admit_to_deadline = o.admit_to_deadline;
    return s;
  }

  PutResult PutLocked(std::unique_ptr<Call>* call, RefusedList* pushed_out, bool* wake)
      OSPREY_REQUIRES(mu_) {
    if (shutting_down_) return PutResult::kShuttingDown;
    const Call& c = **call;
    const bool overloaded = options_.overload_control && control_.overloaded();
    if (options_.overload_control) control_.OnArrival();
    // A newcomer pushes out the calls that waited past their patience: while
    // calls keep coming, the old ones would only be served after them.
    if (overloaded && pushed_out != nullptr) ShedStale(c.received_at(), true, pushed_out);
    // Where it goes: after every call with a deadline no later than its own
    // (scanned from the back: with one timeout for all, no step at all).
    size_t pos = queue_.size();
    if (options_.deadline_order) {
      while (pos > 0 && queue_[pos - 1]->deadline() > c.deadline()) --pos;
    }
    AdmissionRule::State state;
    state.control = control_.state();
    state.target = control_.target();
    state.outpaced = control_.outpaced();
    state.recently_overloaded = control_.recently_overloaded();
    state.avg_run_ns = run_time_.ns();
    state.drain_ns = drain_.ns();
    state.queued = queue_.size();
    state.ahead = pos;
    state.running = wakeups_.running();
    state.may_push_out = pushed_out != nullptr;
    const AdmissionRule::Decision d = rule_.Decide(state, {c.received_at(), c.deadline()});
    if (d.result != PutResult::kQueued) return d.result;
    if (d.push_out_latest) {
      // The latest deadline is at the back.
      pushed_out->push_back(Refused{std::move(queue_.back()), PutResult::kEvicted});
      queue_.pop_back();
      pos = std::min(pos, queue_.size());
    }
    if (pos == queue_.size()) {
      queue_.push_back(std::move(*call));
    } else {
      queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(pos), std::move(*call));
    }
    *wake = wakeups_.ShouldWakeWorker(queue_.size(), run_time_.ns());
    if (!*wake) wakeups_.WakePollerIfNeeded(queue_.size());
    return PutResult::kQueued;
  }

  // How long `c` may wait once calls wait past the target (AdmissionRule).
  MonoDelta Patience(const Call& c) const OSPREY_REQUIRES(mu_) {
    return AdmissionRule::Patience(control_.target(), {c.received_at(), c.deadline()});
  }

  // Pushes out, from the front, the calls whose deadline passed by `now`,
  // and with `waited_too_long` those that waited past their patience.
  void ShedStale(MonoTime now, bool waited_too_long, RefusedList* out) OSPREY_REQUIRES(mu_) {
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
                  bool* wake) OSPREY_REQUIRES(mu_) {
    *wake = false;
    ReportRun(last_run_ns);
    bool watchdog = false;  // this worker is the queue's watchdog (WorkerWakeups::Woke)
    bool waited = false;
    while (queue_.empty() || (watchdog && !shutting_down_)) {
      if (shutting_down_) break;
      waited = true;
      wakeups_.Sleeping();
      if (watchdog) {
        not_empty_.WaitUntil(&mu_, MonoTime::Now() + WorkerWakeups::kWatchdogPeriod);
      } else {
        not_empty_.Wait(&mu_);
      }
      if (wakeups_.Woke(&watchdog, !queue_.empty())) break;
    }
    if (watchdog) wakeups_.WatchdogLeft();
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
      // The time since the last take, if calls waited all along: how fast
      // the workers drain the queue, all they do between calls included.
      if (backlogged_) drain_.Add((now - last_take_).ToNanoseconds());
      last_take_ = now;
      backlogged_ = !queue_.empty();
      if (queue_.empty()) control_.OnEmpty(now);
    } else {
      *out = std::move(queue_.front());
      queue_.pop_front();
    }
    // More waiting than this worker will take: maybe another should run.
    // Decided before this worker counts as running, so that a busy queue
    // wakes a second worker rather than appointing a watchdog.
    *wake = !queue_.empty() && wakeups_.ShouldWakeWorker(queue_.size(), run_time_.ns());
    wakeups_.RunStarted();
    return true;
  }

  // A worker's call ended after `last_run_ns` (-1: it ran none).
  void ReportRun(int64_t last_run_ns) OSPREY_REQUIRES(mu_) {
    if (last_run_ns < 0) return;
    wakeups_.RunEnded();
    run_time_.Add(last_run_ns);
    // A call behind one running handler waits up to a handler's time
    // without any backlog: the delay target is at least two of them.
    if (options_.overload_control)
      control_.set_floor(MonoDelta::FromNanoseconds(2 * run_time_.ns()));
  }

  Options options_;  // set in the constructor, read-only after
  const size_t capacity_;
  const AdmissionRule rule_;  // pure, fixed: read without the lock
  mutable Mutex mu_;
  QueueDelayControl control_ OSPREY_GUARDED_BY(mu_);
  CondVar not_empty_;
  std::deque<std::unique_ptr<Call>> queue_ OSPREY_GUARDED_BY(mu_);
  bool shutting_down_ OSPREY_GUARDED_BY(mu_) = false;
  RunTimeAverage run_time_ OSPREY_GUARDED_BY(mu_);
  // The time between takes while calls were waiting (AdmissionRule's
  // State::drain_ns), and what it is measured from: the last take's time,
  // and whether calls were left waiting after it.
  RunTimeAverage drain_ OSPREY_GUARDED_BY(mu_);
  MonoTime last_take_ OSPREY_GUARDED_BY(mu_);
  bool backlogged_ OSPREY_GUARDED_BY(mu_) = false;
  WorkerWakeups wakeups_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
