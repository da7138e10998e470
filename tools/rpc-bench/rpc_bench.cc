// rpc-bench: measures calls per second and their CPU cost, in Apache Kudu's
// rpc-bench modes and report format, so a Kudu command line runs unchanged.
//
// Sync:  -client_threads threads, each with its own client Messenger and one
//        blocking call at a time.
// Async: -client_threads client Messengers (one reactor each) and
//        -async_call_concurrency call loops spread over them; each loop
//        issues its next call from the previous call's callback.
// With -target_rate the run is open-loop: calls start on a fixed schedule
// (-arrivals=uniform) or as a Poisson process (-arrivals=poisson, -seed),
// and latency counts from the scheduled start.
// Overload (-rate_schedule=SECONDS:RATE,...): instead of the modes above,
// -client_threads client Messengers (2 by default), each with a thread that
// starts its share of an open loop whose rate changes by phase; calls in
// flight are bounded. Each call has a deadline (-call_timeout_ms) from its
// scheduled start, and its outcome is goodput (answered in time), late
// (answered after), refused (ERROR_SERVER_TOO_BUSY; counted by the reason
// the server gave, refusal.h), timed out, throttled
// (refused by the client's adaptive throttling, -client_throttling), or
// another error; with the attempts sent to the server (retries too,
// -retry_attempts and -retry_budget); reported in total and per -window_ms
// window, with a window marked
// behind when the generator started a call over 1 ms late
// (-max_start_lag_us) or could not start it (then the run measured the client, not the server:
// invalid). -handler_us N makes every call Kudu's Sleep(N): rpc-bench's server burns N microseconds
// of CPU (or sleeps, -handler=sleep), Kudu's server sleeps. The server's queue:
// --rpc_service_queue_length, -queue_deadline_order, -overload_control and -queue_delay_target_us
// (ServicePoolOptions).
//
// flags.h: the flags; load.h: the closed- and open-loop generators;
// overload.h: the overload mode; report.h: the reports.
#include <glog/logging.h>
#include <signal.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>

#include "bench_service.h"
#include "flags.h"
#include "load.h"
#include "osprey/rpc/server_set.h"
#include "overload.h"
#include "report.h"

namespace osprey::bench {
namespace {

// The service queue's length: --rpc_service_queue_length, or deep enough
// that the calls this run offers never overflow it, so that the run
// measures the call path, not ERROR_SERVER_TOO_BUSY.
size_t ServiceQueueLength() {
  if (FLAGS_rpc_service_queue_length > 0) {
    return static_cast<size_t>(FLAGS_rpc_service_queue_length);
  }
  return static_cast<size_t>(std::max({50, FLAGS_client_threads, FLAGS_async_call_concurrency}));
}

// Whether the flags make a server that refuses HTTP on its RPC port
// (MessengerBuilder::set_http_on_rpc_port, unset).
bool HttpOnRpcPortRefused() {
  return FLAGS_rpc_encryption == "required" || FLAGS_rpc_authentication == "required";
}

// `http_bound`: where the HTTP endpoints are, with -metrics.
std::shared_ptr<Messenger> StartServer(Sockaddr* bound, Sockaddr* http_bound = nullptr) {
  Sockaddr addr, http_addr;
  Status s = Sockaddr::Parse(FLAGS_listen, &addr);
  if (!s.ok()) BadFlag("-listen: " + s.message());
  const bool http_apart = !FLAGS_http_listen.empty();
  if (http_apart) {
    s = Sockaddr::Parse(FLAGS_http_listen, &http_addr);
    if (!s.ok()) BadFlag("-http_listen: " + s.message());
  }
  std::shared_ptr<Messenger> server;
  MessengerBuilder b = BenchMessengerBuilder("bench-server");
  b.set_num_reactors(FLAGS_server_reactors)
      .set_http_endpoints(FLAGS_metrics)
      // So `osprey list` and `osprey call` work without the .proto.
      .set_reflection(FLAGS_server_only);
  // Unset otherwise: a server that requires encryption or authentication
  // then serves no pages on its RPC port (they name every client).
  if (http_apart) b.set_http_on_rpc_port(false);
  if (!FLAGS_register_at.empty()) b.set_registry(FLAGS_register_at);
  s = b.Build(&server);
  ServicePoolOptions pool;
  pool.worker_threads = FLAGS_worker_threads;
  pool.queue_length = ServiceQueueLength();
  pool.deadline_order = FLAGS_queue_deadline_order;
  pool.overload_control = FLAGS_overload_control;
  pool.admit_by_patience = FLAGS_admit_by_patience;
  pool.admit_to_deadline = FLAGS_admit_to_deadline;
  pool.queue_delay_target = MonoDelta::FromMicroseconds(FLAGS_queue_delay_target_us);
  const auto sleep_mode =
      FLAGS_handler == "sleep" ? BenchService::SleepMode::kSleep : BenchService::SleepMode::kBurn;
  if (s.ok()) {
    s = server->RegisterService(
        std::make_unique<BenchService>(sleep_mode, static_cast<uint32_t>(FLAGS_handler_factor)),
        pool);
  }
  if (s.ok()) s = server->Listen(addr, bound);
  if (s.ok() && http_bound != nullptr) *http_bound = *bound;
  if (s.ok() && http_apart) s = server->ListenHttp(http_addr, http_bound);
  if (!s.ok()) BadFlag("cannot start the server: " + s.ToString());
  return server;
}

int ServeOnly() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts
  Sockaddr bound, http_bound;
  auto server = StartServer(&bound, &http_bound);
  std::printf("Listening on %s\n", bound.ToString().c_str());
  std::printf(
      "Service queue length: %zu (%s; more calls at once are refused: "
      "--rpc_service_queue_length)\n",
      ServiceQueueLength(),
      FLAGS_rpc_service_queue_length > 0 ? "--rpc_service_queue_length"
                                         : "the larger of 50, -client_threads and "
                                           "-async_call_concurrency");
  std::printf(
      "Service queue: %s, overload control %s (queue delay target %dus, admission by patience "
      "%s, to the deadline %s); Sleep %s\n",
      FLAGS_queue_deadline_order ? "earliest deadline first" : "first in, first out",
      FLAGS_overload_control ? "on" : "off", FLAGS_queue_delay_target_us,
      FLAGS_admit_by_patience ? "on" : "off", FLAGS_admit_to_deadline ? "on" : "off",
      FLAGS_handler == "sleep" ? "sleeps" : "burns CPU");
  if (FLAGS_handler_factor > 1) {
    std::printf("Sleep takes %dx its sleep_micros (-handler_factor)\n", FLAGS_handler_factor);
  }
  if (FLAGS_metrics && http_bound.is_unix()) {
    std::string path = http_bound.unix_path();
    const bool abstract = path.rfind('@', 0) == 0;
    std::printf("Metrics at %s (curl %s %s http://localhost/metrics)\n",
                http_bound.ToString().c_str(),
                abstract ? "--abstract-unix-socket" : "--unix-socket",
                abstract ? path.c_str() + 1 : path.c_str());
  } else if (FLAGS_metrics && FLAGS_http_listen.empty() && HttpOnRpcPortRefused()) {
    std::printf(
        "Metrics: not on the RPC port, as encryption or authentication is required; "
        "-http_listen HOST:PORT serves them on an address of their own\n");
  } else if (FLAGS_metrics) {
    std::printf("Metrics at http://%s/metrics, calls at http://%s/rpcz\n",
                http_bound.ToString().c_str(), http_bound.ToString().c_str());
  }
  std::fflush(stdout);
  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  if (sig == SIGTERM) {
    // What an orchestrator sends before it stops a replica: finish and
    // answer the calls held, refuse new ones as "did not run" so that
    // clients move them to another server, then close.
    const MonoTime start = MonoTime::Now();
    server->Drain(MonoDelta::FromMilliseconds(FLAGS_drain_grace_ms));
    std::fprintf(stderr, "rpc-bench: SIGTERM: drained in %" PRId64 " ms (grace %d ms), exiting\n",
                 (MonoTime::Now() - start).ToMilliseconds(), FLAGS_drain_grace_ms);
    return 0;
  }
  std::fprintf(stderr, "rpc-bench: signal %d, shutting down\n", sig);
  server->Shutdown();
  return 0;
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage("rpc-bench [flags]: Osprey RPC benchmark (Kudu rpc-bench flags)");
  PrecheckFlags(argc, argv);
  // gflags' own -help would list the logging library's 80 lines of flags
  // first: rpc-bench prints its own page, and leaves gflags the other help
  // flags (-helpon, -helpmatch, -version, ...).
  gflags::ParseCommandLineNonHelpFlags(&argc, &argv, true);
  if (HandleHelpFlags(argv[0])) return 0;
  gflags::HandleCommandLineHelpFlags();
  if (argc > 1) BadFlag(std::string("unexpected argument '") + argv[1] + "'");
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = std::max(FLAGS_minloglevel, 1);  // keep the report clean
  google::InitGoogleLogging(argv[0]);
  ValidateFlags();
  if (FLAGS_server_only) return ServeOnly();

  Settings cfg;
  cfg.client_threads = FLAGS_client_threads;
  cfg.concurrency = FLAGS_async_call_concurrency;
  cfg.payload = FLAGS_payload_bytes;
  cfg.run_seconds = FLAGS_run_seconds;
  cfg.warmup_seconds = FLAGS_warmup_seconds;
  cfg.target_rate = FLAGS_target_rate;
  cfg.handler_us = FLAGS_handler_us;
  cfg.call_timeout_ms = FLAGS_call_timeout_ms;
  cfg.poisson = FLAGS_arrivals == "poisson";
  cfg.seed = FLAGS_seed;
  cfg.retry = BenchRetryPolicy();

  std::shared_ptr<Messenger> server;
  if (FLAGS_server_address.empty()) {
    server = StartServer(&cfg.server);
  } else if (!Sockaddr::Parse(FLAGS_server_address, &cfg.server).ok()) {
    // Not one address: a set of servers, or a name the Proxy resolves.
    // One address keeps the Sockaddr proxy, the path every published
    // number measured.
    cfg.target = FLAGS_server_address;
    cfg.server_set = ServerSet::IsSetTarget(cfg.target);
    cfg.lb = *ParseLoadBalancing(FLAGS_lb);                           // checked by ValidateFlags
    cfg.hedging = *ParseHedging(FLAGS_hedge, FLAGS_hedge_max_share);  // checked there too
  }
  ProbeServer(cfg);

  if (!RateSchedule().empty()) {
    int rc = RunOverloadMode(cfg, RateSchedule());
    if (server) server->Shutdown();
    return rc;
  }

  uint64_t errors = 0;
  RefusalTotals refused;
  for (bool async : {false, true}) {
    if ((async && FLAGS_mode == "sync") || (!async && FLAGS_mode == "async")) continue;
    cfg.async = async;
    Results r = async ? RunAsync(cfg) : RunSync(cfg);
    errors += r.errors;
    refused.Merge(r.refusals);
    if (FLAGS_output == "json") {
      PrintJson(cfg, r, server != nullptr ? server->metrics() : nullptr);
    } else {
      PrintText(cfg, r);
    }
  }
  if (server) server->Shutdown();
  if (refused.total() > 0) {
    std::fprintf(stderr, "rpc-bench: %" PRIu64 " calls refused: %s%s\n", refused.total(),
                 refused.Summary().c_str(),
                 FLAGS_fail_on_refusal ? "; -fail_on_refusal fails the run" : "");
  }
  if (errors > 0) {
    std::fprintf(stderr, "rpc-bench: %" PRIu64 " calls failed\n", errors);
    return 1;
  }
  return refused.total() > 0 && FLAGS_fail_on_refusal ? 1 : 0;
}

}  // namespace
}  // namespace osprey::bench

int main(int argc, char** argv) { return osprey::bench::Main(argc, argv); }
