// rpc-bench's load generators: sync mode (threads, one blocking call each),
// async mode (client reactors multiplexing call loops) and the open-loop
// variants, each measured over one interval. RunSync and RunAsync run on the
// main thread and start the threads they need.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "osprey/base/histogram.h"
#include "osprey/base/stopwatch.h"
#include "osprey/rpc/load_balancer.h"
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
  // -server_address when it is not one address: a set of servers
  // ("HOST:PORT,HOST:PORT", "dns:NAME:PORT"; `server_set`) or a name,
  // handed to the Proxy as text. Empty: `server`.
  std::string target;
  bool server_set = false;
  LoadBalancing lb = LoadBalancing::kPowerOfTwoChoices;  // -lb, for a set
  HedgingPolicy hedging;                                 // -hedge, for a set (off by default)
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

// One server's line in a report: the attempts sent to it (Proxy::servers(),
// summed over the run's proxies), and its state at the end.
struct ServerLine {
  std::string address;
  int64_t calls = 0;
  bool ejected = false;
  bool draining = false;
};

// What the server named: "127.0.0.1:7050", or the target and its policy.
std::string TargetText(const Settings& cfg);

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
  // The errors by cause: the server's error code (ERROR_UNAVAILABLE) when
  // it answered one, else the status's code name ("Timed out").
  std::map<std::string, uint64_t> errors_by_cause;
  // A set of servers: each one's attempts in the measured interval.
  std::vector<ServerLine> servers;
  // A set of servers with -hedge: what hedging did in the measured
  // interval (summed over the run's proxies).
  HedgeStats hedges;
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
  std::map<std::string, uint64_t> errors_by_cause;  // guarded by error_mu
  std::atomic<uint64_t> errors{0};
  RefusalCounts refusals;

  std::set<ConnectionSecurity> securities;  // guarded by error_mu

  // Errors during warm-up count too: any error fails the run.
  void RecordError(const std::string& what, const std::string& cause) {
    errors++;
    std::lock_guard<std::mutex> l(error_mu);
    if (first_error.empty()) first_error = what;
    errors_by_cause[cause]++;
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
