// rpc-bench's flags: Kudu's rpc-bench flags and Kudu's server encryption
// flags, checked before any work starts. Main thread only, before the run.
#pragma once

#include <gflags/gflags.h>

#include <optional>
#include <string>
#include <vector>

#include "arrivals.h"
#include "osprey/rpc/hedging.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/retry_policy.h"

DECLARE_int32(client_threads);
DECLARE_bool(metrics);
DECLARE_int32(async_call_concurrency);
DECLARE_int32(worker_threads);
DECLARE_int32(server_reactors);
DECLARE_double(run_seconds);
DECLARE_string(mode);
DECLARE_int32(payload_bytes);
DECLARE_string(server_address);
DECLARE_string(lb);
DECLARE_string(hedge);
DECLARE_double(hedge_max_share);
DECLARE_int32(handler_factor);
DECLARE_string(rpc_encryption);
DECLARE_string(rpc_authentication);
DECLARE_bool(rpc_encrypt_loopback_connections);
DECLARE_bool(enable_encryption);
DECLARE_bool(server_only);
DECLARE_int32(drain_grace_ms);
DECLARE_string(register_at);
DECLARE_int32(rpc_service_queue_length);
DECLARE_bool(fail_on_refusal);
DECLARE_string(listen);
DECLARE_string(http_listen);
DECLARE_string(output);
DECLARE_double(warmup_seconds);
DECLARE_double(target_rate);
DECLARE_string(arrivals);
DECLARE_uint64(seed);
DECLARE_int32(call_timeout_ms);
DECLARE_int32(handler_us);
DECLARE_string(handler);
DECLARE_bool(queue_deadline_order);
DECLARE_bool(overload_control);
DECLARE_bool(admit_by_patience);
DECLARE_bool(admit_to_deadline);
DECLARE_int32(queue_delay_target_us);
DECLARE_string(rate_schedule);
DECLARE_int32(window_ms);
DECLARE_int32(max_start_lag_us);
DECLARE_int32(retry_attempts);
DECLARE_bool(retry_budget);
DECLARE_bool(client_throttling);

namespace osprey::bench {

constexpr int kExitBadFlags = 2;

// Prints "rpc-bench: <msg>" on stderr and exits with kExitBadFlags.
[[noreturn]] void BadFlag(const std::string& msg);
// gflags exits with status 1 on an unknown flag or a value it cannot
// parse; this checks both first, so every bad flag exits 2.
void PrecheckFlags(int argc, char** argv);
// After gflags::ParseCommandLineNonHelpFlags: -help prints rpc-bench's own
// flags, grouped, a line each (Kudu's first); -helpfull every flag, the
// logging library's too. True if it printed a page (then exit 0).
bool HandleHelpFlags(const char* argv0);
// Refuses values out of range, and resolves -enable_encryption.
void ValidateFlags();

// -rate_schedule's phases, parsed by ValidateFlags; empty without it.
const std::vector<Phase>& RateSchedule();

// The client calls' RetryPolicy: -retry_attempts attempts (1: none), the
// other fields RetryPolicy's defaults.
RetryPolicy BenchRetryPolicy();
// -hedge (off, p95 or a delay in milliseconds) and -hedge_max_share as a
// policy; nullopt if either does not parse.
std::optional<HedgingPolicy> ParseHedging(const std::string& hedge, double max_share);

// A MessengerBuilder with the encryption flags applied.
MessengerBuilder BenchMessengerBuilder(const std::string& name);
// What was asked, for the report: "rpc_encryption=required, loopback encrypted".
std::string AskedEncryption();

}  // namespace osprey::bench
