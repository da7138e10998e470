// QueueDelayControl: decides whether a service queue is overloaded from how
// long the calls taken from it had waited, as CoDel detects a standing
// queue: overloaded once every call taken over one whole `interval` had
// waited longer than `target`, and no longer once the queue is empty.
//
// Why it leaves only when the queue empties: while overloaded the queue
// serves the newest call first (ServiceQueue), so the waits of the calls
// taken are short by design and say nothing about the backlog; an empty
// queue says the workers kept up. A pure state machine: no clock and no
// lock of its own; the ServiceQueue that owns it calls it under its lock.
#pragma once

#include "osprey/base/monotime.h"

namespace osprey {

class QueueDelayControl {
 public:
  enum class State {
    kNormal,    // calls wait less than the target, or the queue was empty
    kWatching,  // every call taken since watch_until_ - interval waited too long
    kOverloaded,
  };

  QueueDelayControl(MonoDelta target, MonoDelta interval) : target_(target), interval_(interval) {}

  // A call was taken at `now`, having waited `waited`.
  void OnTake(MonoTime now, MonoDelta waited) {
    switch (state_) {
      case State::kNormal:
        if (waited > target()) Enter(State::kWatching, now + interval_);
        break;
      case State::kWatching:
        if (waited <= target()) {
          Enter(State::kNormal, MonoTime());
        } else if (now >= watch_until_) {
          Enter(State::kOverloaded, MonoTime());
        }
        break;
      case State::kOverloaded:
        break;  // newest-first takes are short by design: only OnEmpty leaves
    }
  }
  // The queue has no call left.
  void OnEmpty() {
    if (state_ != State::kNormal) Enter(State::kNormal, MonoTime());
  }

  bool overloaded() const { return state_ == State::kOverloaded; }
  State state() const { return state_; }
  // The target in force: the one set, or the floor if that is higher.
  MonoDelta target() const { return floor_ > target_ ? floor_ : target_; }
  // A wait no queue can go below when it is busy: a call queued behind a
  // running handler waits for it (ServiceQueue sets two handler times).
  void set_floor(MonoDelta floor) { floor_ = floor; }
  // Times the queue became overloaded.
  uint64_t episodes() const { return episodes_; }

 private:
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
  }
  static void CheckLegal(bool legal);

  const MonoDelta target_;
  const MonoDelta interval_;
  MonoDelta floor_;
  State state_ = State::kNormal;
  MonoTime watch_until_;
  uint64_t episodes_ = 0;
};

}  // namespace osprey
