// rpc-bench's overload mode (-rate_schedule): an open loop whose rate
// changes by phase, from -client_threads client Messengers, each with a
// thread that starts its share of the calls on schedule. Every call has a
// deadline, -call_timeout_ms after its scheduled start, and one outcome:
//
//   goodput   answered OK within its deadline
//   late      answered OK after its deadline
//   refused   the server would not run it (ERROR_SERVER_TOO_BUSY, or
//             ERROR_UNAVAILABLE): a fast "no" the caller can act on
//   timeout   no answer by the deadline (TimedOut at the client)
//   error     anything else (counted, named, and the run exits 1)
//
// counted in total and per window of -window_ms: the calls offered
// (scheduled to start in that window), sent, and the outcomes that arrived
// in it. A window is "behind" when the generator started one of its calls
// more than -max_start_lag_us (1 ms) after its scheduled time, or could not
// start it (too many in flight): then the run measured the client, so it is invalid, not slow.
// Main thread; it starts the threads it needs.
#pragma once

#include <vector>

#include "arrivals.h"
#include "load.h"

namespace osprey::bench {

// Runs `schedule` against cfg.server and prints the report (-output);
// returns the exit status: 1 if any call failed with an error other than a
// refusal or a timeout (or was refused, with -fail_on_refusal), else 0.
int RunOverloadMode(const Settings& cfg, const std::vector<Phase>& schedule);

}  // namespace osprey::bench
