#include "osprey/transport/timer_queue.h"

namespace osprey::transport {

TimerId TimerQueue::Add(MonoTime when, std::function<void()> fn) {
  TimerId id{when, next_seq_++};
  timers_.emplace(id, std::move(fn));
  return id;
}

void TimerQueue::Cancel(TimerId id) { timers_.erase(id); }

void TimerQueue::RunExpired(MonoTime now) {
  while (!timers_.empty() && timers_.begin()->first.when <= now) {
    // Taken out before it runs, so that it may cancel itself or others.
    auto node = timers_.extract(timers_.begin());
    node.mapped()();
  }
}

MonoTime TimerQueue::NextDeadline() const {
  return timers_.empty() ? MonoTime::Max() : timers_.begin()->first.when;
}

}  // namespace osprey::transport
