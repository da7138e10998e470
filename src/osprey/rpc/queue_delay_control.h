// QueueDelayControl: decides whether a service queue is overloaded from how
// long the calls taken from it had waited, as CoDel detects a standing
// queue: overloaded once every call taken over one whole `interval` had
// waited longer than `target` while calls arrived faster than they were
// taken (below), and no longer once the queue is empty.
//
// A queue that only fluctuates is not overloaded: with Poisson arrivals at
// the workers' capacity, waits past the target come and go for whole
// intervals though calls arrive no faster than they are taken (issue 48,
// item 4). So the interval must also have brought at least
// kOverloadArrivals calls for each kOverloadTakes taken (newcomers counted
// whether admitted or refused); if it did not, a new interval is watched.
// And calls that arrive at least kOutpacedRatio times as fast as they are
// taken, since the queue was last empty or over an interval of takes
// (outpaced()), are an overload all the same, whatever the waits:
// ServiceQueue's admission then applies the patience.
//
// Why it leaves only when the queue empties: while overloaded the queue
// serves the newest call first (ServiceQueue), so the waits of the calls
// taken are short by design and say nothing about the backlog; an empty
// queue says the workers kept up. A pure state machine: no clock and no
// lock of its own; the ServiceQueue that owns it calls it under its lock.
#pragma once

#include <cstdint>

#include "osprey/base/monotime.h"

namespace osprey {

class QueueDelayControl {
 public:
  enum class State {
    kNormal,    // calls wait less than the target, or the queue was empty
    kWatching,  // every call taken since watch_until_ - interval waited too long
    kOverloaded,
  };

  // Overloaded needs, over the interval, at least 5 arrivals per 4 takes:
  // Poisson arrivals at capacity bring about 100 calls per 100 taken in an
  // interval of 1 ms calls (a standard deviation of 10), 1.5 times capacity
  // 150.
  static constexpr int64_t kOverloadArrivals = 5;
  static constexpr int64_t kOverloadTakes = 4;
  // The hold after an overload ends with an interval of takes that brought
  // fewer than 9 arrivals per 8 takes: lower than the 5 for 4 that enters
  // overload, so that a sustained 1.5 times capacity (150 arrivals per 100
  // takes, a standard deviation of 12) does not drop it by chance (3
  // deviations), where a queue at capacity (100, 10) drops it within an
  // interval or two.
  static constexpr int64_t kHoldArrivals = 9;
  static constexpr int64_t kHoldTakes = 8;
  // outpaced(): twice as many arrivals as takes, of at least this many.
  // At capacity, 16 arrivals while 8 or fewer calls are taken is a Poisson
  // tail of under 1%; at 4 times capacity it takes the time of 4 calls.
  static constexpr int64_t kOutpacedRatio = 2;
  static constexpr int64_t kOutpacedMinArrivals = 16;

  QueueDelayControl(MonoDelta target, MonoDelta interval) : target_(target), interval_(interval) {}

  // A newcomer was offered to the queue, admitted or not.
  void OnArrival() {
    busy_arrivals_++;
    rate_arrivals_++;
    if (state_ == State::kWatching) arrivals_++;
  }
  // A call was taken at `now`, having waited `waited`.
  void OnTake(MonoTime now, MonoDelta waited) {
    busy_takes_++;
    rate_takes_++;
    if (now >= rate_until_) EndRateInterval(now);
    switch (state_) {
      case State::kNormal:
        if (waited > target()) Enter(State::kWatching, now + interval_);
        break;
      case State::kWatching:
        takes_++;
        if (waited <= target()) {
          Enter(State::kNormal, MonoTime());
        } else if (now >= watch_until_) {
          if (arrivals_ * kOverloadTakes >= takes_ * kOverloadArrivals) {
            Enter(State::kOverloaded, MonoTime());
          } else {
            // A standing queue the arrivals do not outrun: it fluctuates.
            // Watch a new interval (no state change).
            watch_until_ = now + interval_;
            arrivals_ = 0;
            takes_ = 0;
          }
        }
        break;
      case State::kOverloaded:
        break;  // newest-first takes are short by design: only OnEmpty leaves
    }
  }
  // The queue has no call left, at `now`. Leaving overload so, it stays
  // recently_overloaded() for an interval, and on until an interval of
  // takes brings fewer than kHoldArrivals per kHoldTakes
  // (EndRateInterval): under a sustained overload the newest-first queue
  // still empties now and then (a gap between Poisson arrivals, the
  // patience keeping it short), and what follows is more of the same
  // overload; at 1.5 times capacity, calls arriving faster than they are
  // taken but never twice as fast (outpaced()), admission to the deadline
  // would otherwise fill the queue to the deadline after every such gap
  // until a whole interval of long waits confirmed the overload again.
  void OnEmpty(MonoTime now) {
    busy_arrivals_ = 0;
    busy_takes_ = 0;
    if (state_ == State::kOverloaded) {
      hold_at_least_until_ = now + interval_;
      holding_ = true;
    }
    if (state_ != State::kNormal) Enter(State::kNormal, MonoTime());
  }
  // Overloaded, or holding on after it left overload (OnEmpty).
  bool recently_overloaded() const { return state_ == State::kOverloaded || holding_; }

  bool overloaded() const { return state_ == State::kOverloaded; }
  // Calls arrived at least kOutpacedRatio times as fast as they were taken
  // (kOutpacedMinArrivals of them at least), since the queue was last
  // empty, or in the interval of takes under way or the last whole one: an
  // overload the detector has not confirmed yet, or one whose newest-first
  // queue let the waits fall back under the target. The intervals' counts
  // are for callers that re-send each refusal at once: the queue then
  // empties at every take of its one admitted call, which restarts the
  // count since it was empty, and after each, admission to the deadline
  // would queue calls with no slack that the flood then makes late.
  bool outpaced() const {
    return interval_outpaced_ || Outpaces(rate_arrivals_, rate_takes_) ||
           Outpaces(busy_arrivals_, busy_takes_);
  }
  State state() const { return state_; }
  // The target in force: the one set, or the floor if that is higher.
  MonoDelta target() const { return floor_ > target_ ? floor_ : target_; }
  // A wait no queue can go below when it is busy: a call queued behind a
  // running handler waits for it (ServiceQueue sets two handler times).
  void set_floor(MonoDelta floor) { floor_ = floor; }
  // Times the queue became overloaded.
  uint64_t episodes() const { return episodes_; }

 private:
  // Every interval of takes, whatever the state: the hold on
  // recently_overloaded() that an overloaded queue's emptying began ends
  // with the first interval ending at least an interval after it that
  // brought fewer than kHoldArrivals calls per kHoldTakes taken.
  void EndRateInterval(MonoTime now) {
    const bool faster = rate_arrivals_ * kHoldTakes >= rate_takes_ * kHoldArrivals;
    if (!faster && now >= hold_at_least_until_) holding_ = false;
    interval_outpaced_ = Outpaces(rate_arrivals_, rate_takes_);
    rate_arrivals_ = 0;
    rate_takes_ = 0;
    rate_until_ = now + interval_;
  }
  // The one place the state changes; checks that the move is one the
  // table above allows.
  void Enter(State next, MonoTime watch_until) {
    const bool legal = (state_ == State::kNormal && next == State::kWatching) ||
                       (state_ == State::kWatching && next != State::kWatching) ||
                       (state_ == State::kOverloaded && next == State::kNormal);
    CheckLegal(legal);
    if (next == State::kOverloaded) episodes_++;
    state_ = next;
    watch_until_ = watch_until;
    arrivals_ = 0;
    takes_ = 0;
  }
  static void CheckLegal(bool legal);
  static bool Outpaces(int64_t arrivals, int64_t takes) {
    return arrivals >= kOutpacedMinArrivals && arrivals >= kOutpacedRatio * takes;
  }

  const MonoDelta target_;
  const MonoDelta interval_;
  MonoDelta floor_;
  State state_ = State::kNormal;
  MonoTime watch_until_;
  MonoTime hold_at_least_until_;  // the hold does not end before then
  // Newcomers offered and calls taken since the interval watched began,
  // and since the queue was last empty (outpaced()).
  int64_t arrivals_ = 0;
  int64_t takes_ = 0;
  int64_t busy_arrivals_ = 0;
  int64_t busy_takes_ = 0;
  // Newcomers and takes in the interval of takes that ends at rate_until_.
  int64_t rate_arrivals_ = 0;
  int64_t rate_takes_ = 0;
  MonoTime rate_until_;
  bool holding_ = false;  // recently_overloaded() though no longer overloaded
  // The last whole interval of takes was outpaced (outpaced()).
  bool interval_outpaced_ = false;
  uint64_t episodes_ = 0;
};

}  // namespace osprey
