// ServicePoolOptions: how a registered service runs its calls. A plain
// value.
#pragma once

#include <cstddef>

#include "osprey/base/monotime.h"

namespace osprey {

struct ServicePoolOptions {
  // 0 runs handlers on the reactor thread: fastest for handlers that never
  // block, and a stalled handler stalls every connection of that reactor.
  int worker_threads = 1;
  // Calls waiting for a worker; beyond it a call is refused
  // ERROR_SERVER_TOO_BUSY (or, with deadline_order, the queued call with the
  // latest deadline is).
  size_t queue_length = 50;
  // Queued calls are run earliest deadline first (first come, first served
  // among equal deadlines), and a full queue makes room for a call by
  // refusing the queued one with the latest deadline, if that is later than
  // the new call's: Kudu's service queue. false: first in, first out, and a
  // full queue refuses the newcomer.
  bool deadline_order = true;
  // Overload control by queue delay (CoDel's detection): when every call
  // taken from the queue over `queue_delay_interval` had waited longer than
  // `queue_delay_target`, and calls arrived at least 1.25 times as fast as
  // they were taken (a queue that only fluctuates is not overloaded), the
  // queue is overloaded until it empties.
  // While overloaded, the newest call is served first, a call that has
  // waited past the target is refused at once, and a call is refused at
  // admission when the queue already holds more than the workers can run
  // within the target. So no queue_length lets the wait grow past the
  // callers' deadlines. false: the queue only orders and bounds.
  bool overload_control = true;
  // With overload_control and without admit_to_deadline, from the start: a
  // call with a deadline is refused at admission when the calls ahead of it
  // hold more work than an eighth of its timeout (or the target, if
  // longer), before any call has waited past the target; a sudden overload
  // then never builds a queue longer than that. false: until then, only a
  // wait past its deadline is refused.
  bool admit_by_patience = true;
  // With overload_control, until the queue is overloaded: a call with a
  // deadline is admitted whenever it can still be answered by it (the rest
  // of the running calls, the calls ahead and its own, at the worker's time
  // per call, end by its deadline); its patience applies only once the
  // queue is overloaded or recently was, or while calls arrive at least
  // twice as fast as they are taken. admit_by_patience then does not
  // apply. At capacity a call that can meet its deadline is served (issue
  // 48: 0.95 of capacity and more at 1.0 C), and its answer may come near
  // its deadline rather than within its patience. false: admission by
  // patience (admit_by_patience), answers sooner, a tenth fewer at capacity.
  bool admit_to_deadline = true;
  MonoDelta queue_delay_target = MonoDelta::FromMilliseconds(5);
  MonoDelta queue_delay_interval = MonoDelta::FromMilliseconds(100);
};

}  // namespace osprey
