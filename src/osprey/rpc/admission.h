// AdmissionRule: whether a service queue takes a newcomer, and if not, why.
// The central overload decision, as a pure function: the queue's state
// (ServiceQueue reads it under its lock and passes it in) and the
// newcomer's arrival time and deadline in, which stand for the clock (no
// clock is read on Put); admit, admit by pushing out the latest deadline,
// or refuse with the reason out. No clock, no lock and no state but the
// settings, fixed at construction: any thread may call it.
//
// The rule, in the order it is applied (admission-test.cc has it cell by
// cell):
//  1. Only with overload control, and once a call has run (the run time is
//     what turns queued calls into a wait):
//     a. To the deadline (admit_to_deadline, the default). A newcomer with
//        a deadline, while the queue is neither overloaded nor outpaced
//        (QueueDelayControl::outpaced(): calls arrive at least twice as
//        fast as they are taken) and not recently overloaded (within an
//        interval, or since, while calls kept arriving faster than they
//        were taken: recently_overloaded), is admitted
//        whenever it can still be answered by its deadline, and refused
//        kWouldMissDeadline otherwise (TimeToAnswer()). At capacity, where
//        Poisson arrivals only make the queue fluctuate, a call that can
//        meet its deadline is what the caller asked for: a patience of 5
//        places refuses a tenth of the calls there, the ~19 places of a
//        20 ms deadline a few percent (issue 48, item 4). Rules b and c
//        then do not apply to it.
//     b. Patience. Each call may wait its patience: the delay target, or
//        1/kPatienceShare of the time its caller gave it when that is
//        longer (Patience()). A newcomer is refused kOverloaded when the
//        calls it would wait behind are at least as many as the workers
//        run within its patience (AdmitLimit()). Applied to every newcomer
//        rule a did not decide once calls wait past the target (the
//        detector watching or overloaded: a standing queue); before that,
//        to those with a deadline while outpaced or recently overloaded,
//        or, without admit_to_deadline, from the start
//        (admit_by_patience), so that a sudden overload builds no queue
//        longer than the patience before the first late take. A call
//        without a deadline cannot be late, and a burst of them that the
//        bound allows is queued whole. Overloaded, the queue runs the
//        newest first, so every queued call counts; else only those ahead
//        of it in the queue's order.
//     c. Deadline, without admit_to_deadline. Before calls wait past the
//        target, a newcomer with a deadline that the calls ahead of it
//        would keep past the deadline (WaitBehind()) is refused
//        kWouldMissDeadline at once rather than left to expire.
//  2. Bound. A full queue refuses the newcomer kFull, unless it orders by
//     deadline, the caller takes pushed-out calls, and some queued call is
//     due later than the newcomer: that one is pushed out (kEvicted).
//
// What the wait estimates count. TimeToAnswer (rule a): the rest of the
// running calls (a whole call each, the most they can have left), the
// calls ahead, and the newcomer's own call, each at the worker's time per
// call as the queue sees it: the time between takes while calls wait
// (State::drain_ns), which has the handler and all else the worker's CPU
// does between two calls (answering, reading in a reactor's place, a
// reactor's share of a CPU it shares), and at least the handler's average
// run time; counting only the handler's would answer calls late whenever
// the worker's time per call is longer. WaitBehind (rules b, c): the
// queued calls ahead at the handler's average run time, over the workers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "osprey/base/monotime.h"
#include "osprey/rpc/queue_delay_control.h"

namespace osprey {

// What became of a call handed to a ServiceQueue: queued, or why the
// queue will not run it. kEvicted, kWaitedTooLong and kExpired are reasons
// only for calls pushed out after they were queued; AdmissionRule answers
// kQueued, kFull, kOverloaded and kWouldMissDeadline, and ServiceQueue adds
// kShuttingDown. (ServiceQueue<Call>::PutResult is this type.)
enum class QueuePutResult {
  kQueued,
  kFull,               // queue_length calls queued, none with a later deadline
  kOverloaded,         // calls wait past the target, and those ahead exceed its patience
  kWouldMissDeadline,  // the calls ahead would keep it past its deadline
  kShuttingDown,
  kEvicted,        // pushed out of a full queue by a call with an earlier deadline
  kWaitedTooLong,  // waited past its patience while overloaded
  kExpired,        // its deadline passed while it waited
};

// The calls' average run time, as the queue learns it from its workers:
// an exponentially weighted average, 1/kWeight per call, which follows a
// change of handler cost within tens of calls. 0 until a call has run.
// No lock of its own: its owner's (ServiceQueue's) guards it.
class RunTimeAverage {
 public:
  static constexpr int64_t kWeight = 8;
  void Add(int64_t run_ns) { avg_ns_ += (run_ns - avg_ns_) / kWeight; }
  int64_t ns() const { return avg_ns_; }

 private:
  int64_t avg_ns_ = 0;
};

class AdmissionRule {
 public:
  // Fixed for a queue's life: its ServiceQueue::Options.
  struct Settings {
    size_t capacity = 50;
    int workers = 1;  // calls run at once; at least 1
    bool deadline_order = true;
    bool overload_control = true;
    bool admit_by_patience = true;
    // Until overloaded or outpaced, a call with a deadline is admitted
    // whenever it can still be answered by it
    // (ServicePoolOptions::admit_to_deadline).
    bool admit_to_deadline = true;
  };
  // The queue when a newcomer arrives: after the stale calls it pushes out
  // (ServiceQueue::ShedStale) are gone.
  struct State {
    QueueDelayControl::State control = QueueDelayControl::State::kNormal;
    // QueueDelayControl::target(): the delay target, or two run times if longer.
    MonoDelta target = MonoDelta::FromMilliseconds(5);
    // QueueDelayControl::outpaced(): calls arrive at least twice as fast as
    // they are taken.
    bool outpaced = false;
    // QueueDelayControl::recently_overloaded(): overloaded, or it left
    // overload (emptied) less than an interval ago.
    bool recently_overloaded = false;
    int64_t avg_run_ns = 0;  // RunTimeAverage; 0 before the first run
    // The time between two takes while calls waited (a RunTimeAverage of
    // it): the workers' time per call over the workers; 0 before known.
    int64_t drain_ns = 0;
    int running = 0;  // workers running a call (WorkerWakeups::running)
    size_t queued = 0;
    // Queued calls the newcomer would wait behind in the queue's order:
    // its place (deadline order: those due no later than it).
    size_t ahead = 0;
    // The caller takes calls pushed out (Put() was given a list).
    bool may_push_out = false;
  };
  struct Newcomer {
    MonoTime received_at;  // stands for "now"
    MonoTime deadline;     // MonoTime::Max(): none
  };
  struct Decision {
    QueuePutResult result = QueuePutResult::kQueued;
    // Queued, once the queued call with the latest deadline (the last) is
    // pushed out for it (kEvicted).
    bool push_out_latest = false;
  };

  // Half of the quarter of its time that the overload goals allow a
  // served call (docs/performance.md): the wait ahead is an average
  // estimate, and the call still has to run.
  static constexpr int64_t kPatienceShare = 8;

  explicit AdmissionRule(Settings settings) : s_(settings) {
    if (s_.workers < 1) s_.workers = 1;
  }

  Decision Decide(const State& q, const Newcomer& c) const {
    if (s_.overload_control && q.avg_run_ns > 0) {
      const bool standing = q.control != QueueDelayControl::State::kNormal;
      const bool has_deadline = c.deadline != MonoTime::Max();
      if (s_.admit_to_deadline && has_deadline && !q.recently_overloaded &&
          q.control != QueueDelayControl::State::kOverloaded && !q.outpaced) {
        if (c.received_at + TimeToAnswer(q.ahead, q.running, q.avg_run_ns, q.drain_ns) >
            c.deadline) {
          return {QueuePutResult::kWouldMissDeadline, false};
        }
        return Bound(q);
      }
      // No newcomer joins more than its patience's worth of work: once
      // calls wait past the target, every newcomer; before that, those with
      // a deadline too (while outpaced or recently overloaded, or from the
      // start without admission to the deadline), so that the queue a
      // sudden overload builds before the first late take is no longer
      // than the patience either. A call without a deadline cannot be
      // late: it queues freely until calls wait past the target, and a
      // burst of them is not refused for outpacing the workers. Overloaded,
      // every queued call counts (newest first, the older ones are shed at
      // their patience); else those ahead of it.
      const bool by_patience =
          standing || (has_deadline && (s_.admit_to_deadline ? q.outpaced || q.recently_overloaded
                                                             : s_.admit_by_patience));
      if (by_patience) {
        const bool overloaded = q.control == QueueDelayControl::State::kOverloaded;
        const size_t behind = overloaded ? q.queued : q.ahead;
        if (behind >= AdmitLimit(Patience(q.target, c), q.avg_run_ns)) {
          return {QueuePutResult::kOverloaded, false};
        }
      }
      if (!standing && has_deadline && !s_.admit_to_deadline &&
          c.received_at + WaitBehind(q.ahead, q.avg_run_ns) > c.deadline) {
        return {QueuePutResult::kWouldMissDeadline, false};
      }
    }
    return Bound(q);
  }

  // How long a call waits behind `ahead` queued calls.
  MonoDelta WaitBehind(size_t ahead, int64_t avg_run_ns) const {
    return MonoDelta::FromNanoseconds(static_cast<int64_t>(ahead) * avg_run_ns / s_.workers);
  }
  // How long until a call queued behind `ahead` calls, with `running`
  // workers busy, is answered: the rest of the running calls (a whole call
  // each, the most they can have left) and the calls ahead, each at the
  // queue's time per call (`drain_ns`, or the run time over the workers if
  // longer), then its own call (the longer of the run time and `drain_ns`).
  MonoDelta TimeToAnswer(size_t ahead, int running, int64_t avg_run_ns, int64_t drain_ns) const {
    const int64_t busy = std::clamp(running, 0, s_.workers);
    const int64_t per_call = std::max(drain_ns, avg_run_ns / s_.workers);
    return MonoDelta::FromNanoseconds((static_cast<int64_t>(ahead) + busy) * per_call +
                                      std::max(avg_run_ns, drain_ns));
  }

  const Settings& settings() const { return s_; }

  // How long a call may wait once calls wait past the target. A caller
  // that gave a call 60 s loses nothing to a burst the workers clear in a
  // second, and refusing it would turn that burst into errors; one that
  // gave 50 ms counts every millisecond. 1/kPatienceShare of its time, or
  // the target if longer. No deadline: the target alone.
  static MonoDelta Patience(MonoDelta target, const Newcomer& c) {
    if (c.deadline == MonoTime::Max()) return target;
    return std::max(target, MonoDelta::FromNanoseconds(
                                (c.deadline - c.received_at).ToNanoseconds() / kPatienceShare));
  }
  // How many queued calls the workers run within `patience` (at least one
  // each, so that no worker is left idle). Before any run: the capacity.
  size_t AdmitLimit(MonoDelta patience, int64_t avg_run_ns) const {
    if (avg_run_ns <= 0) return s_.capacity;
    int64_t n = patience.ToNanoseconds() * s_.workers / avg_run_ns;
    return static_cast<size_t>(std::max<int64_t>(n, s_.workers));
  }

 private:
  // The bound, when overload control has no objection.
  Decision Bound(const State& q) const {
    if (q.queued >= s_.capacity) {
      // The latest deadline is at the back: a newcomer placed there has
      // nothing later to push out.
      if (!s_.deadline_order || !q.may_push_out || q.ahead == q.queued) {
        return {QueuePutResult::kFull, false};
      }
      return {QueuePutResult::kQueued, true};
    }
    return {QueuePutResult::kQueued, false};
  }

  Settings s_;
};

}  // namespace osprey
