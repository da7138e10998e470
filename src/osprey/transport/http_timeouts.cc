#include "osprey/transport/http_timeouts.h"

namespace osprey::transport {

HttpTimeout CheckHttpTimeout(const HttpTimerState& state, MonoTime now, MonoDelta request_timeout,
                             MonoDelta idle_timeout, MonoTime* next) {
  *next = MonoTime::Max();
  if (state.awaiting_answer) return HttpTimeout::kNone;
  MonoTime deadline;
  HttpTimeout kind;
  if (state.output_pending) {
    deadline = state.output_progress_at + idle_timeout;
    kind = HttpTimeout::kNotReading;
  } else if (state.request_pending) {
    deadline = state.request_started_at + request_timeout;
    kind = HttpTimeout::kRequestIncomplete;
  } else {
    deadline = state.idle_since + idle_timeout;
    kind = HttpTimeout::kIdle;
    if (state.retire_at < deadline) {
      deadline = state.retire_at;
      kind = HttpTimeout::kRetired;
    }
  }
  if (now >= deadline) return kind;
  *next = deadline;
  return HttpTimeout::kNone;
}

}  // namespace osprey::transport
