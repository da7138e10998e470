// When an HTTP connection has waited too long, decided from its state and
// the time alone, so that tests give the time (the connection gives the
// monotonic clock's):
//
//  - while a handler works on an answer, never (the server is slow, not
//    the peer);
//  - while an answer is unsent, when the peer took no byte of it for the
//    idle timeout (a slow reader that keeps reading is never cut);
//  - while a request is incomplete, the request timeout after its first
//    byte (then 408), whether or not an answer went before it on the same
//    connection;
//  - otherwise, the idle timeout after the connection went quiet, or
//    `retire_at` if sooner: a keep-alive connection past its age cap (or a
//    /healthz-only one past its time) closes as soon as it is quiet,
//    however often its peer asks.
#pragma once

#include "osprey/base/monotime.h"

namespace osprey::transport {

struct HttpTimerState {
  bool awaiting_answer = false;
  bool output_pending = false;
  bool request_pending = false;          // bytes of a request not yet complete
  MonoTime output_progress_at;           // output began, or the peer last took some
  MonoTime request_started_at;           // the pending request's first byte
  MonoTime idle_since;                   // nothing to do since
  MonoTime retire_at = MonoTime::Max();  // close when quiet from then on
};

enum class HttpTimeout { kNone, kIdle, kRetired, kRequestIncomplete, kNotReading };

// What has timed out at `now` (a deadline is reached at its instant); if
// nothing, *next is when to look again (MonoTime::Max(): no timer).
HttpTimeout CheckHttpTimeout(const HttpTimerState& state, MonoTime now, MonoDelta request_timeout,
                             MonoDelta idle_timeout, MonoTime* next);

}  // namespace osprey::transport
