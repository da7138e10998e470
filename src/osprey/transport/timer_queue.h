// TimerQueue: a reactor's timers, ordered by deadline. Not thread-safe: its
// reactor owns it and uses it only on its thread (the reactor's loop lock
// guards it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "osprey/base/monotime.h"
#include "osprey/transport/timer_id.h"

namespace osprey::transport {

class TimerQueue {
 public:
  // `fn` runs from RunExpired once `when` has passed, unless cancelled.
  TimerId Add(MonoTime when, std::function<void()> fn);
  // Forgets the timer; a no-op for one that ran or was cancelled already.
  void Cancel(TimerId id);
  // Runs, in deadline order, every timer due at `now`. A timer may add or
  // cancel timers as it runs; one it adds that is already due runs too.
  void RunExpired(MonoTime now);
  // The earliest deadline, or MonoTime::Max() when there is none.
  MonoTime NextDeadline() const;
  bool empty() const { return timers_.empty(); }
  size_t size() const { return timers_.size(); }
  // Drops every timer unrun. A timer's function may do work as it is
  // destroyed (a pending retry fails its call): the queue is empty by then,
  // so that work may add timers.
  void Clear() {
    std::map<TimerId, std::function<void()>> dropped;
    dropped.swap(timers_);
  }

 private:
  std::map<TimerId, std::function<void()>> timers_;
  uint64_t next_seq_ = 1;
};

}  // namespace osprey::transport
