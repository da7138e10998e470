// rpc-bench's load generators: sync mode (threads, one blocking call each),
// async mode (client reactors multiplexing call loops) and the open-loop
// variants, each measured over one interval. RunSync and RunAsync run on the
// main thread and start the threads they need.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "osprey/base/histogram.h"
#include "osprey/base/stopwatch.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/retry_policy.h"
#include "refusal.h"

namespace osprey::bench {

struct Settings {
  bool async = false;
  int client_threads;
  int concurrency;
  int payload;
  double run_seconds;
  double warmup_seconds;
  double target_rate;
  Sockaddr server;
  // -1: Add or Echo (-payload_bytes); 0 or more: Kudu's Sleep of so many
  // microseconds (-handler_us).
  int handler_us = -1;
  int call_timeout_ms = 10000;  // each call's timeout
  // Open loop: exponential gaps (a Poisson process) from `seed`, or equal.
  bool poisson = false;
  uint64_t seed = 1;
  // Each call's (-retry_attempts); max_attempts 1: none.
  RetryPolicy retry;
};

struct Results {
  uint64_t calls = 0;
  uint64_t errors = 0;
  // Calls the server refused (ERROR_SERVER_TOO_BUSY), or the client's
  // throttling did: the server's capacity or settings, not a failure.
  // `refused` is their total, `refusals` the counts by reason.
  uint64_t refused = 0;
  RefusalTotals refusals;
  CpuTimes cpu;
  Histogram latency;  // nanoseconds
  std::string first_error;
  // What the client connections negotiated ("TLS (encrypted)"; several
  // joined with " and " if they differed), and whether all were encrypted.
  std::string negotiated;
  bool encrypted = false;
};

// Shared by every client thread or loop of one mode's run.
struct RunState {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> progress_calls{0};
  std::mutex error_mu;
  std::string first_error;
  std::atomic<uint64_t> errors{0};
  RefusalCounts refusals;

  std::set<ConnectionSecurity> securities;  // guarded by error_mu

  // Errors during warm-up count too: any error fails the run.
  void RecordError(const std::string& what) {
    errors++;
    std::lock_guard<std::mutex> l(error_mu);
    if (first_error.empty()) first_error = what;
  }

  // What `client`'s connections negotiated; called once per client
  // messenger after its calls end.
  void RecordSecurity(const Messenger& client) {
    std::vector<ConnectionInfo> conns;
    if (!client.DumpConnections(&conns).ok()) return;
    std::lock_guard<std::mutex> l(error_mu);
    for (const auto& c : conns) {
      if (!c.inbound && c.negotiated) securities.insert(c.security);
    }
  }
  void TakeSecurity(Results* r) {
    std::lock_guard<std::mutex> l(error_mu);
    for (ConnectionSecurity s : securities) {
      r->negotiated +=
          (r->negotiated.empty() ? "" : " and ") + std::string(ConnectionSecurityName(s));
    }
    if (r->negotiated.empty()) r->negotiated = "no connection";
    r->encrypted = securities == std::set<ConnectionSecurity>{ConnectionSecurity::kTlsEncrypted};
  }
};

// A client messenger of one reactor, with the encryption flags; exits 2
// if it cannot start.
std::shared_ptr<Messenger> NewClientMessenger(const std::string& name);
// Monotonic nanoseconds (MonoTime's).
int64_t NowNanos();

Results RunSync(const Settings& cfg);
Results RunAsync(const Settings& cfg);

// One call to the server (the call the run makes), so that an unreachable
// or wrong server is a clear error (exit 2) before the run.
void ProbeServer(const Settings& cfg);

}  // namespace osprey::bench
