// Apache brpc server and client for Osprey's overload benchmark (issue 42),
// extended from ../shared/peers/brpc-bench/brpc_rpc_bench.cc (the brpc peer
// of Kudu's rpc-bench; its in-process Add benchmark is kept as it was).
//
// Three ways to run it:
//   in-process  (no -server_only, no -server_address): the peer's Add
//               benchmark, sync and/or async, client and server in one process.
//   -server_only: a brpc server on -listen, prints "LISTENING HOST:PORT" and
//               serves until SIGTERM/SIGINT (or -run_seconds, when given).
//               Sleep(sleep_micros) spends its time as -handler says: burn
//               (busy loop on CLOCK_THREAD_CPUTIME_ID, as Osprey's rpc-bench)
//               or sleep (usleep: the bthread's worker pthread is blocked).
//               -max_concurrency=0|auto|N: brpc's concurrency limiter.
//   -server_address HOST:PORT: a client with the flags and JSON report of
//               Osprey's rpc-bench, as scripts/benchmarks.sh --overload runs it:
//               -rate_schedule (open loop, one pacing thread per
//               -client_threads) or -mode async (closed loop).
//
// brpc has no reactor/worker split: the peer's mapping is kept, bthread
// workers = -server_reactors + -worker_threads (see SetupBthreadWorkers).

#include <brpc/callback.h>
#include <brpc/channel.h>
#include <brpc/controller.h>
#include <brpc/errno.pb.h>
#include <brpc/server.h>
#include <bthread/bthread.h>
#include <bthread/countdown_event.h>
#include <butil/errno.h>
#include <gflags/gflags.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "arrivals.h"  // Osprey's tools/rpc-bench/arrivals.h: the same draws as rpc-bench
#include "bench_report.h"
#include "calculator.pb.h"

// ---- The peer's flags.
DEFINE_int32(client_threads, 16,
             "In-process sync: client threads. Async (in-process or -server_address): "
             "client channels, each its own TCP connection. -rate_schedule: pacing "
             "threads, each with its own channel and its share of the calls (default 2 "
             "there, as rpc-bench)");
DEFINE_int32(async_call_concurrency, 60,
             "Async (closed loop): calls outstanding at a time, spread over the "
             "-client_threads channels.");
DEFINE_int32(worker_threads, 1,
             "Added to -server_reactors to size brpc's single bthread worker pool "
             "(brpc has no separate worker pool).");
DEFINE_int32(server_reactors, 4,
             "Added to -worker_threads to size brpc's single bthread worker pool.");
DEFINE_double(run_seconds, 1,
              "Seconds to run each mode; -server_only: serve this long when given "
              "(default: until SIGTERM or SIGINT)");
DEFINE_string(mode, "both", "Which benchmark(s) to run: sync, async or both");
DEFINE_int32(call_timeout_ms, 10000,
             "Per-call deadline in ms (Kudu's rpc-bench sets a 10 s timeout per call). "
             "With -rate_schedule it counts from the call's scheduled start, and an "
             "answer after it is late, not goodput. 0 = none (not with -rate_schedule).");
DEFINE_bool(brpc_clamp_workers, false,
            "Use at least brpc's minimum of 4 bthread workers (what bthread_setconcurrency "
            "and ServerOptions.num_threads enforce) instead of forcing a smaller "
            "server_reactors + worker_threads");

// ---- Server mode.
DEFINE_bool(server_only, false,
            "Only serve, on -listen; prints 'LISTENING HOST:PORT' and serves until "
            "SIGTERM or SIGINT (or -run_seconds when given)");
DEFINE_string(listen, "127.0.0.1:0", "-server_only: the address to bind");
DEFINE_string(handler, "burn",
              "How Sleep spends its sleep_micros: burn (busy loop on the thread's CPU "
              "clock, CLOCK_THREAD_CPUTIME_ID, as Osprey's rpc-bench) or sleep (usleep, "
              "which blocks the bthread worker pthread)");
DEFINE_string(max_concurrency, "0",
              "brpc's concurrency limiter: 0 = none (brpc's default); auto = the auto "
              "limiter on each method (Server::MaxConcurrencyOf(...) = \"auto\"); N > 0 = "
              "ServerOptions.max_concurrency = N (server-level constant)");

// ---- Client mode: the flags scripts/benchmarks.sh --overload passes rpc-bench.
DEFINE_string(server_address, "",
              "HOST:PORT of a running brpc server (-server_only): run only the client");
DEFINE_string(output, "text", "report format: text or json");
DEFINE_string(lb, "rr",
              "-server_address naming several servers (HOST:PORT,HOST:PORT,...): brpc's load "
              "balancer for the list:// naming service: rr (round robin), la (locality-aware: "
              "by latency and calls outstanding), random");
DEFINE_int32(backup_request_ms, 0,
             "-server_address naming several servers: brpc's backup requests "
             "(ChannelOptions.backup_request_ms): a second attempt to another server once a call "
             "has waited this many ms, the first answer wins; 0: none");
DEFINE_int32(handler_factor, 1,
             "-server_only: each Sleep takes this many times its sleep_micros, 1 to 1000 (a slow "
             "server among fast ones, as rpc-bench's flag of that name)");
DEFINE_int32(handler_us, -1,
             "Each call is Sleep(sleep_micros = N); -1: Add (only in-process and closed "
             "loop)");
DEFINE_string(rate_schedule, "",
              "SECONDS:RATE,SECONDS:RATE,... phases of an open loop (rpc-bench's overload "
              "mode): timeouts and refusals are outcomes, not failures");
DEFINE_string(arrivals, "uniform", "-rate_schedule: uniform (equal gaps) or poisson");
DEFINE_uint64(seed, 1, "-arrivals=poisson: seed of the gaps (pacing thread i: seed + i)");
DEFINE_int32(window_ms, 100, "-rate_schedule: time-series window length in ms");
DEFINE_int32(max_start_lag_us, 1000,
             "-rate_schedule: a call started more than this many microseconds after its "
             "scheduled time marks its window behind (the run invalid)");
DEFINE_double(warmup_seconds, 0, "closed loop: seconds of calls before measuring starts");
DEFINE_int32(client_bthread_workers, 4,
             "-server_address: bthread workers of the client process (run the done "
             "closures and the client's event dispatcher); brpc's API minimum is 4");

// ---- rpc-bench flags accepted so a command line for rpc-bench also runs
// here. They are ignored, or refused when they ask for what this client does
// not do.
DEFINE_int32(payload_bytes, 0, "rpc-bench's; only 0 (no Echo here)");
DEFINE_double(target_rate, 0, "rpc-bench's; only 0 (use -rate_schedule)");
DEFINE_int32(retry_attempts, 1, "rpc-bench's; only 1 (brpc max_retry = 0: never retried)");
DEFINE_bool(retry_budget, true, "rpc-bench's; ignored (no retries)");
DEFINE_bool(client_throttling, false, "rpc-bench's; only false");
DEFINE_bool(fail_on_refusal, false, "exit 1 if any call was refused (as rpc-bench)");
DEFINE_int32(rpc_service_queue_length, 0,
             "rpc-bench's; ignored: brpc has no service queue to bound");
DEFINE_bool(queue_deadline_order, true, "rpc-bench's server flag; ignored");
DEFINE_bool(overload_control, true, "rpc-bench's server flag; ignored");
DEFINE_int32(queue_delay_target_us, 5000, "rpc-bench's server flag; ignored");
DEFINE_bool(metrics, true, "rpc-bench's; ignored (brpc serves its builtin pages)");
DEFINE_string(http_listen, "", "rpc-bench's; ignored");
DEFINE_int32(spin_before_sleep_us, 50, "rpc-bench's; ignored");
DEFINE_bool(caller_reads, true, "rpc-bench's; ignored");
DEFINE_bool(worker_reads, true, "rpc-bench's; ignored");
DEFINE_string(rpc_encryption, "disabled", "rpc-bench's; only disabled");
DEFINE_string(rpc_authentication, "disabled", "rpc-bench's; only disabled");
DEFINE_bool(enable_encryption, false, "rpc-bench's; only false");

namespace bthread {
DECLARE_int32(bthread_concurrency);
}
namespace brpc {
DECLARE_int32(event_dispatcher_num);
}

using rpcbench::AddRequestPB;
using rpcbench::AddResponsePB;
using rpcbench::CalculatorService;
using rpcbench::CalculatorService_Stub;
using rpcbench::SleepRequestPB;
using rpcbench::SleepResponsePB;

namespace {

struct alignas(64) PaddedCounter {
  std::atomic<int64_t> v{0};
};

void Die(const std::string& msg) {
  std::fprintf(stderr, "FATAL: %s\n", msg.c_str());
  std::abort();
}

void BadFlag(const std::string& msg) {
  std::fprintf(stderr, "brpc-overload-bench: %s\n", msg.c_str());
  std::exit(2);
}

bool IsDefault(const char* flag) {
  gflags::CommandLineFlagInfo info;
  return !gflags::GetCommandLineFlagInfo(flag, &info) || info.is_default;
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Number of bthread workers: computed once in main() before any bthread runs.
int g_bthread_workers = 0;
// ServerOptions.num_threads (0 = leave the pool as it is, for sizes below 4).
int g_server_num_threads = 0;
// How the pool size was chosen, for the report.
std::string g_workers_source;
int ActualWorkers();

// ---------------------------------------------------------------------------
// Server. Add and Sleep run in the bthread that parsed the request.
// ---------------------------------------------------------------------------
class CalculatorImpl : public CalculatorService {
 public:
  explicit CalculatorImpl(bool burn) : burn_(burn) {}

  void Add(google::protobuf::RpcController*, const AddRequestPB* req, AddResponsePB* resp,
           google::protobuf::Closure* done) override {
    brpc::ClosureGuard done_guard(done);
    resp->set_result(req->x() + req->y());
  }

  void Sleep(google::protobuf::RpcController*, const SleepRequestPB* req, SleepResponsePB*,
             google::protobuf::Closure* done) override {
    brpc::ClosureGuard done_guard(done);
    const int64_t micros = static_cast<int64_t>(req->sleep_micros()) * FLAGS_handler_factor;
    if (micros <= 0) return;
    if (burn_) {
      // The thread's own CPU time, as Osprey's rpc-bench: time the worker
      // spends preempted does not count, so a call costs `micros` of CPU.
      // The bthread does not yield here, so it stays on one pthread.
      const int64_t until = ThreadCpuNanos() + micros * 1000;
      while (ThreadCpuNanos() < until) {
      }
    } else {
      usleep(static_cast<useconds_t>(micros));  // blocks the worker pthread
    }
  }

 private:
  const bool burn_;
};

class BenchServer {
 public:
  // limiter: "0" (none), "auto", or a positive constant.
  BenchServer(const std::string& listen, bool burn, const std::string& limiter) : service_(burn) {
    if (server_.AddService(&service_, brpc::SERVER_DOESNT_OWN_SERVICE) != 0) {
      Die("failed to add CalculatorService");
    }
    brpc::ServerOptions opts;
    opts.num_threads = g_server_num_threads;
    if (limiter == "auto") {
      // brpc 1.17.0: the auto limiter exists per method only
      // (ServerOptions.max_concurrency is an int, a constant).
      server_.MaxConcurrencyOf(&service_, "Add") = "auto";
      server_.MaxConcurrencyOf(&service_, "Sleep") = "auto";
      limiter_label_ = "auto (method-level, Add and Sleep)";
    } else if (limiter == "0" || limiter.empty() || limiter == "unlimited") {
      limiter_label_ = "none";
    } else {
      char* end = nullptr;
      long n = std::strtol(limiter.c_str(), &end, 10);
      if (*end != '\0' || n <= 0 || n > 1000000) {
        BadFlag("-max_concurrency must be 0, auto or a number from 1 to 1000000, got '" + limiter +
                "'");
      }
      opts.max_concurrency = static_cast<int>(n);
      limiter_label_ = "constant " + std::to_string(n) + " (server-level)";
    }
    if (server_.Start(listen.c_str(), &opts) != 0) Die("failed to start brpc server on " + listen);
    port_ = server_.listen_address().port;
    if (port_ <= 0) Die("brpc server has no port");
  }
  ~BenchServer() {
    server_.Stop(0);
    server_.Join();
  }
  int port() const { return port_; }
  void StopAndJoin() {
    server_.Stop(0);
    server_.Join();
  }
  const std::string& limiter_label() const { return limiter_label_; }
  std::string WorkerThreadsLabel() const {
    return std::to_string(ActualWorkers()) + " (shared bthread pool, " + g_workers_source + ")";
  }
  std::string ServerReactorsLabel() const {
    return std::to_string(brpc::FLAGS_event_dispatcher_num) +
           " (brpc event dispatcher, on that pool)";
  }

 private:
  CalculatorImpl service_;
  brpc::Server server_;
  int port_ = 0;
  std::string limiter_label_;
};

// One channel per client thread / async channel / pacing thread. A distinct
// connection_group keeps brpc from sharing one "single" connection between
// the channels, so each has its own TCP connection.
// 0, but 1 with backup requests to several servers (InitChannel).
int MaxRetry() {
  return FLAGS_backup_request_ms > 0 && FLAGS_server_address.find(',') != std::string::npos ? 1 : 0;
}

void InitChannel(brpc::Channel* ch, const std::string& addr, const std::string& group) {
  brpc::ChannelOptions opts;
  opts.protocol = "baidu_std";
  opts.connection_type = "single";
  opts.connection_group = group;
  opts.timeout_ms = FLAGS_call_timeout_ms > 0 ? FLAGS_call_timeout_ms : -1;
  opts.max_retry = 0;
  if (addr.find(',') == std::string::npos) {
    if (ch->Init(addr.c_str(), &opts) != 0) Die("failed to init channel to " + addr);
    return;
  }
  // Several servers: brpc's list:// naming service and its balancer. A
  // backup request counts as neither a retry nor a failure.
  opts.backup_request_ms = FLAGS_backup_request_ms > 0 ? FLAGS_backup_request_ms : -1;
  // brpc counts the backup as the call's first retry: with max_retry 0 the
  // call fails at the backup's time instead (E1007 "Reached backup
  // timeout", Controller::OnVersionedRPCReturned). One retry also lets a
  // call whose connection fails go to another server, as brpc's users have.
  opts.max_retry = MaxRetry();
  const std::string url = "list://" + addr;
  if (ch->Init(url.c_str(), FLAGS_lb.c_str(), &opts) != 0) {
    Die("failed to init channel to " + url + " with -lb=" + FLAGS_lb);
  }
}

std::string LocalAddress(int port) { return "127.0.0.1:" + std::to_string(port); }

void CheckCall(const brpc::Controller& cntl) {
  if (cntl.Failed()) {
    Die("Add RPC failed: code " + std::to_string(cntl.ErrorCode()) + ": " + cntl.ErrorText());
  }
}

// ---------------------------------------------------------------------------
// In-process Sync benchmark (the peer's; Kudu: RpcBench.BenchmarkCalls).
// ---------------------------------------------------------------------------
void RunSync() {
  BenchServer server("127.0.0.1:0", true, "0");
  const int n = FLAGS_client_threads;
  std::atomic<bool> running{true};
  std::vector<PaddedCounter> counters(n);
  std::vector<std::thread> threads;

  bench::Stopwatch sw;
  sw.start();
  for (int i = 0; i < n; i++) {
    threads.emplace_back([&, i]() {
      brpc::Channel channel;
      InitChannel(&channel, LocalAddress(server.port()), "sync-" + std::to_string(i));
      CalculatorService_Stub stub(&channel);
      AddRequestPB req;
      AddResponsePB resp;
      uint32_t count = 0;
      while (running.load(std::memory_order_relaxed)) {
        req.set_x(count);
        req.set_y(count + 1);
        brpc::Controller cntl;
        stub.Add(&cntl, &req, &resp, nullptr);  // synchronous call
        CheckCall(cntl);
        BENCH_CHECK(resp.result() == req.x() + req.y());
        count++;
        counters[i].v.store(count, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_run_seconds));
  running.store(false);
  int64_t total = 0;
  for (auto& c : counters) total += c.v.load(std::memory_order_relaxed);
  sw.stop();
  for (auto& t : threads) t.join();

  bench::SummarizePerf(sw.elapsed(), total, true, FLAGS_client_threads,
                       FLAGS_async_call_concurrency, server.WorkerThreadsLabel(),
                       server.ServerReactorsLabel());
}

// ---------------------------------------------------------------------------
// In-process Async benchmark (the peer's; Kudu: RpcBench.BenchmarkCallsAsync).
// ---------------------------------------------------------------------------
struct alignas(64) AsyncSlot {
  CalculatorService_Stub* stub = nullptr;
  brpc::Controller* cntl = nullptr;
  AddRequestPB req;
  AddResponsePB resp;
  uint32_t seq = 0;
  std::atomic<int64_t> done{0};
  const std::atomic<bool>* running = nullptr;
  bthread::CountdownEvent* drained = nullptr;
};

void IssueAsync(AsyncSlot* s);

void OnAddDone(AsyncSlot* s) {
  std::unique_ptr<brpc::Controller> cntl(s->cntl);
  s->cntl = nullptr;
  CheckCall(*cntl);
  BENCH_CHECK(s->resp.result() == s->req.x() + s->req.y());
  s->done.store(s->done.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  cntl.reset();
  if (s->running->load(std::memory_order_relaxed)) {
    IssueAsync(s);
  } else {
    s->drained->signal();
  }
}

void IssueAsync(AsyncSlot* s) {
  s->cntl = new brpc::Controller();
  s->req.set_x(s->seq);
  s->req.set_y(s->seq + 1);
  s->seq++;
  s->stub->Add(s->cntl, &s->req, &s->resp, brpc::NewCallback(&OnAddDone, s));
}

void RunAsync() {
  BenchServer server("127.0.0.1:0", true, "0");
  const int n = FLAGS_client_threads;
  const int k = FLAGS_async_call_concurrency;
  std::vector<std::unique_ptr<brpc::Channel>> channels;
  std::vector<std::unique_ptr<CalculatorService_Stub>> stubs;
  for (int i = 0; i < n; i++) {
    channels.emplace_back(new brpc::Channel());
    InitChannel(channels.back().get(), LocalAddress(server.port()), "async-" + std::to_string(i));
    stubs.emplace_back(new CalculatorService_Stub(channels.back().get()));
  }
  std::atomic<bool> running{true};
  bthread::CountdownEvent drained(k);
  std::vector<AsyncSlot> slots(k);
  for (int j = 0; j < k; j++) {
    slots[j].stub = stubs[j % n].get();
    slots[j].running = &running;
    slots[j].drained = &drained;
  }

  bench::Stopwatch sw;
  sw.start();
  for (auto& s : slots) IssueAsync(&s);
  std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_run_seconds));
  running.store(false);
  int64_t total = 0;
  for (auto& s : slots) total += s.done.load(std::memory_order_relaxed);
  sw.stop();
  BENCH_CHECK(drained.wait() == 0);  // every chain has seen the stop flag

  bench::SummarizePerf(sw.elapsed(), total, false, FLAGS_client_threads,
                       FLAGS_async_call_concurrency, server.WorkerThreadsLabel(),
                       server.ServerReactorsLabel());
}

// ---------------------------------------------------------------------------
// -server_only.
// ---------------------------------------------------------------------------
std::atomic<bool> g_quit{false};
void OnQuitSignal(int) { g_quit.store(true); }

int RunServerOnly() {
  const bool burn = FLAGS_handler == "burn";
  if (!burn && FLAGS_handler != "sleep") BadFlag("-handler must be burn or sleep");
  struct sigaction sa {};
  sa.sa_handler = OnQuitSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  BenchServer server(FLAGS_listen, burn, FLAGS_max_concurrency);
  std::string host = FLAGS_listen.substr(0, FLAGS_listen.rfind(':'));
  std::fprintf(stderr,
               "brpc-overload-bench server: brpc 1.17.0, handler %s (x%d), limiter %s, "
               "bthread workers %s, event dispatchers %s\n",
               FLAGS_handler.c_str(), FLAGS_handler_factor, server.limiter_label().c_str(),
               server.WorkerThreadsLabel().c_str(), server.ServerReactorsLabel().c_str());
  std::printf("LISTENING %s:%d\n", host.c_str(), server.port());
  std::fflush(stdout);
  const bool timed = !IsDefault("run_seconds");
  const int64_t until = NowNanos() + static_cast<int64_t>(FLAGS_run_seconds * 1e9);
  while (!g_quit.load() && (!timed || NowNanos() < until)) usleep(50000);
  // brpc's Server::Join waits for every request in progress. After overload
  // the bthread workers can be stuck in TaskGroup::push_rq (a full run
  // queue, "_rq is full"; brpc's source calls it a possible deadlock when
  // all workers spin there), and Join never returns: say so and exit.
  std::atomic<bool> joined{false};
  std::thread stopper([&] {
    server.StopAndJoin();
    joined.store(true);
  });
  for (int i = 0; i < 100 && !joined.load(); ++i) usleep(50000);
  if (!joined.load()) {
    std::fprintf(stderr,
                 "brpc-overload-bench server: brpc's Server::Stop/Join did not return within "
                 "5 s (bthread workers stuck); exiting without it\n");
    std::fflush(stderr);
    std::_Exit(3);
  }
  stopper.join();
  std::fprintf(stderr, "brpc-overload-bench server: stopped\n");
  return 0;
}

// ---------------------------------------------------------------------------
// Client against -server_address: what rpc-bench's client does for
// scripts/benchmarks.sh --overload.
// ---------------------------------------------------------------------------
enum class Outcome { kGoodput, kLate, kRefused, kTimeout, kError };

// A refusal: the server's limiter (ELIMIT), or brpc's "overcrowded" (a
// connection with too much unwritten data, EOVERCROWDED).
bool IsRefusalCode(int code) { return code == brpc::ELIMIT || code == brpc::EOVERCROWDED; }

// Latencies in ns; exact percentiles (nearest rank) over what was recorded.
class Latencies {
 public:
  void Record(int64_t ns) {
    std::lock_guard<std::mutex> l(mu_);
    v_.push_back(ns);
  }
  void Merge(Latencies* o) {
    std::lock_guard<std::mutex> l(o->mu_);
    std::lock_guard<std::mutex> l2(mu_);
    v_.insert(v_.end(), o->v_.begin(), o->v_.end());
  }
  void Sort() { std::sort(v_.begin(), v_.end()); }  // before the percentiles
  size_t count() const { return v_.size(); }
  double PercentileUs(double p) const {
    if (v_.empty()) return 0;
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v_.size()));
    rank = std::min(std::max<size_t>(rank, 1), v_.size());
    return v_[rank - 1] / 1000.0;
  }
  double MaxUs() const { return v_.empty() ? 0 : v_.back() / 1000.0; }

 private:
  std::mutex mu_;
  std::vector<int64_t> v_;
};

struct ErrorCounts {
  std::mutex mu;
  std::map<int, uint64_t> by_code;  // refusals and errors, by brpc error code
  std::string first_error;
  void Note(int code, const std::string& text, bool error) {
    std::lock_guard<std::mutex> l(mu);
    by_code[code]++;
    if (error && first_error.empty()) first_error = text;
  }
};

std::string CodesJson(ErrorCounts* e, bool refusals) {
  std::lock_guard<std::mutex> l(e->mu);
  std::string s = "{";
  bool first = true;
  for (auto& [code, n] : e->by_code) {
    if (IsRefusalCode(code) != refusals) continue;
    s += (first ? "" : ",") + JsonString(std::to_string(code) + " " + berror(code)) + ":" +
         std::to_string(n);
    first = false;
  }
  return s + "}";
}

void* NoopBthread(void*) { return nullptr; }

// Sizes the client process's bthread pool (-client_bthread_workers), the
// same way SetupBthreadWorkers does for the server.
void SetupClientWorkers() {
  int n = FLAGS_client_bthread_workers;
  if (n < BTHREAD_MIN_CONCURRENCY || n > 1024) {
    BadFlag("-client_bthread_workers must be from 4 to 1024");
  }
  if (IsDefault("bthread_concurrency")) {
    if (gflags::SetCommandLineOption("bthread_concurrency", std::to_string(n).c_str()).empty()) {
      Die("cannot set -bthread_concurrency");
    }
  }
  bthread_t tid;
  BENCH_CHECK(bthread_start_background(&tid, nullptr, NoopBthread, nullptr) == 0);
  BENCH_CHECK(bthread_join(tid, nullptr) == 0);
}

void PrepareSleep(SleepRequestPB* req) {
  req->set_sleep_micros(static_cast<uint32_t>(std::max(FLAGS_handler_us, 0)));
}

// One call before measuring, so the connection is up. Its outcome counts
// nothing.
void ConnectCall(brpc::Channel* ch) {
  CalculatorService_Stub stub(ch);
  brpc::Controller cntl;
  if (FLAGS_handler_us >= 0) {
    SleepRequestPB req;
    SleepResponsePB resp;
    PrepareSleep(&req);
    stub.Sleep(&cntl, &req, &resp, nullptr);
  } else {
    AddRequestPB req;
    AddResponsePB resp;
    req.set_x(1);
    req.set_y(2);
    stub.Add(&cntl, &req, &resp, nullptr);
  }
}

// ---- Closed loop (-mode async): the capacity run of benchmarks.sh.
struct ClosedSlot;
struct ClosedLoop {
  std::atomic<bool> running{true};
  std::atomic<bool> measuring{false};
  std::atomic<uint64_t> ok{0}, refused{0}, timeouts{0}, errors{0};
  Latencies ok_latency;
  ErrorCounts codes;
  bthread::CountdownEvent* drained = nullptr;
};

struct ClosedSlot {
  ClosedLoop* loop = nullptr;
  CalculatorService_Stub* stub = nullptr;
  brpc::Controller* cntl = nullptr;
  SleepRequestPB sreq;
  SleepResponsePB sresp;
  AddRequestPB areq;
  AddResponsePB aresp;
  int64_t start_ns = 0;
};

void IssueClosed(ClosedSlot* s);

void OnClosedDone(ClosedSlot* s) {
  std::unique_ptr<brpc::Controller> cntl(s->cntl);
  s->cntl = nullptr;
  ClosedLoop* loop = s->loop;
  if (loop->measuring.load(std::memory_order_relaxed)) {
    const int code = cntl->ErrorCode();
    if (!cntl->Failed()) {
      if (FLAGS_handler_us < 0) BENCH_CHECK(s->aresp.result() == s->areq.x() + s->areq.y());
      loop->ok.fetch_add(1, std::memory_order_relaxed);
      loop->ok_latency.Record(NowNanos() - s->start_ns);
    } else if (IsRefusalCode(code)) {
      loop->refused.fetch_add(1, std::memory_order_relaxed);
      loop->codes.Note(code, cntl->ErrorText(), false);
    } else if (code == brpc::ERPCTIMEDOUT) {
      loop->timeouts.fetch_add(1, std::memory_order_relaxed);
    } else {
      loop->errors.fetch_add(1, std::memory_order_relaxed);
      loop->codes.Note(code, cntl->ErrorText(), true);
    }
  }
  cntl.reset();
  if (loop->running.load(std::memory_order_relaxed)) {
    IssueClosed(s);
  } else {
    loop->drained->signal();
  }
}

void IssueClosed(ClosedSlot* s) {
  s->cntl = new brpc::Controller();
  s->cntl->set_max_retry(0);
  s->start_ns = NowNanos();
  if (FLAGS_handler_us >= 0) {
    PrepareSleep(&s->sreq);
    s->stub->Sleep(s->cntl, &s->sreq, &s->sresp, brpc::NewCallback(&OnClosedDone, s));
  } else {
    s->areq.set_x(7);
    s->areq.set_y(8);
    s->stub->Add(s->cntl, &s->areq, &s->aresp, brpc::NewCallback(&OnClosedDone, s));
  }
}

int RunClosedLoopClient() {
  const int n = FLAGS_client_threads;
  const int k = FLAGS_async_call_concurrency;
  std::vector<std::unique_ptr<brpc::Channel>> channels;
  std::vector<std::unique_ptr<CalculatorService_Stub>> stubs;
  for (int i = 0; i < n; i++) {
    channels.emplace_back(new brpc::Channel());
    InitChannel(channels.back().get(), FLAGS_server_address, "closed-" + std::to_string(i));
    ConnectCall(channels.back().get());
    stubs.emplace_back(new CalculatorService_Stub(channels.back().get()));
  }
  ClosedLoop loop;
  bthread::CountdownEvent drained(k);
  loop.drained = &drained;
  std::vector<ClosedSlot> slots(k);
  for (int j = 0; j < k; j++) {
    slots[j].loop = &loop;
    slots[j].stub = stubs[j % n].get();
  }
  for (auto& s : slots) IssueClosed(&s);
  std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_warmup_seconds));
  bench::Stopwatch sw;
  sw.start();
  loop.measuring.store(true);
  std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_run_seconds));
  loop.measuring.store(false);
  sw.stop();
  loop.running.store(false);
  BENCH_CHECK(drained.wait() == 0);
  const double wall = sw.elapsed().wall_s;
  const uint64_t ok = loop.ok.load();
  loop.ok_latency.Sort();
  const Latencies& lat = loop.ok_latency;
  if (FLAGS_output == "json") {
    std::ostringstream o;
    o << "{\"mode\":\"async\",\"client\":\"brpc-overload-bench\",\"server_address\":"
      << JsonString(FLAGS_server_address) << ",\"client_threads\":" << n
      << ",\"async_call_concurrency\":" << k << ",\"handler_us\":" << FLAGS_handler_us
      << ",\"call_timeout_ms\":" << FLAGS_call_timeout_ms << ",\"wall_seconds\":" << Num(wall)
      << ",\"calls\":" << ok << ",\"reqs_per_sec\":" << Num(ok / wall)
      << ",\"refused\":" << loop.refused.load() << ",\"timeouts\":" << loop.timeouts.load()
      << ",\"errors\":" << loop.errors.load()
      << ",\"refused_by_code\":" << CodesJson(&loop.codes, true)
      << ",\"errors_by_code\":" << CodesJson(&loop.codes, false)
      << ",\"latency_us\":{\"count\":" << lat.count() << ",\"p50\":" << Num(lat.PercentileUs(50))
      << ",\"p99\":" << Num(lat.PercentileUs(99)) << ",\"p99.9\":" << Num(lat.PercentileUs(99.9))
      << ",\"max\":" << Num(lat.MaxUs()) << "}"
      << ",\"client_user_cpu_us\":" << sw.elapsed().user_ns / 1000
      << ",\"client_sys_cpu_us\":" << sw.elapsed().sys_ns / 1000 << "}\n";
    std::cout << o.str() << std::flush;
  } else {
    std::cout << "Mode:             Async closed loop against " << FLAGS_server_address << "\n"
              << "Client channels:  " << n << "\nCall concurrency: " << k << "\n"
              << "Reqs/sec:         " << Num(ok / wall) << " (answered OK)\n"
              << "Refused:          " << loop.refused.load() << "\n"
              << "Timed out:        " << loop.timeouts.load() << "\n"
              << "Errors:           " << loop.errors.load() << "\n"
              << "Latency p50/p99:  " << Num(lat.PercentileUs(50)) << "us / "
              << Num(lat.PercentileUs(99)) << "us\n"
              << std::flush;
  }
  return loop.errors.load() > 0 ? 1 : 0;
}

// ---- Open loop (-rate_schedule): rpc-bench's overload mode.
constexpr int64_t kDrainSlackNs = 2000000000;
constexpr int64_t kMaxInFlight = 100000;  // as rpc-bench (kMaxOpenLoopInFlight)

struct Window {
  std::atomic<uint64_t> offered{0}, sent{0}, goodput{0}, refused{0}, timeouts{0}, late{0},
      errors{0};
  std::atomic<uint64_t> answered_latency_sum_us{0}, answered_latency_max_us{0};
  std::atomic<bool> behind{false};
};

void Inc(std::atomic<uint64_t>* c) { c->fetch_add(1, std::memory_order_relaxed); }

void Max(std::atomic<uint64_t>* c, uint64_t v) {
  uint64_t seen = c->load(std::memory_order_relaxed);
  while (seen < v && !c->compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}

struct Totals {
  uint64_t offered = 0, sent = 0, goodput = 0, refused = 0, timeouts = 0, late = 0, errors = 0;
  uint64_t behind_windows = 0;
  uint64_t answered_latency_sum_us = 0, answered_latency_max_us = 0;
};

// The servers -server_address names, in its order ("HOST:PORT" each); the
// answers are counted by the one that sent them (Controller::remote_side).
std::vector<std::string> ServerList() {
  std::vector<std::string> out;
  std::stringstream ss(FLAGS_server_address);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

class Issuer;
struct OpenCall {
  Issuer* issuer = nullptr;
  brpc::Controller cntl;
  SleepRequestPB req;
  SleepResponsePB resp;
  int64_t at = 0;  // scheduled start, ns from t0
};

// One pacing thread with its own channel (connection) and its share of the
// schedule; brpc runs the done closures on the client's bthread workers.
class Issuer {
 public:
  Issuer(const std::vector<osprey::bench::Phase>& schedule, int index, int issuers,
         size_t num_windows, int64_t window_ns, ErrorCounts* codes)
      : index_(index),
        arrivals_(schedule, 1.0 / issuers, FLAGS_arrivals == "poisson",
                  FLAGS_seed + static_cast<uint64_t>(index), static_cast<double>(index) / issuers),
        windows_(new Window[num_windows]),
        num_windows_(num_windows),
        window_ns_(window_ns),
        timeout_ns_(static_cast<int64_t>(FLAGS_call_timeout_ms) * 1000000),
        max_in_flight_(std::max<int64_t>(1, kMaxInFlight / issuers)),
        max_lag_allowed_ns_(static_cast<int64_t>(FLAGS_max_start_lag_us) * 1000),
        codes_(codes),
        servers_(ServerList()),
        answered_by_server_(new std::atomic<uint64_t>[num_windows * (servers_.size() + 1)]) {
    for (size_t i = 0; i < num_windows * (servers_.size() + 1); ++i) answered_by_server_[i] = 0;
    InitChannel(&channel_, FLAGS_server_address, "open-" + std::to_string(index));
    stub_.reset(new CalculatorService_Stub(&channel_));
  }

  void Connect() { ConnectCall(&channel_); }

  void Run(int64_t t0) {
    t0_ = t0;
    for (int64_t at = arrivals_.Next(); at >= 0; at = arrivals_.Next()) {
      int64_t now = NowNanos() - t0;
      if (at > now) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(at - now));
        now = NowNanos() - t0;
      }
      Window& w = windows_[WindowOf(at)];
      Inc(&w.offered);
      const int64_t lag = now - at;
      max_lag_ns_ = std::max(max_lag_ns_, lag);
      if (lag > max_lag_allowed_ns_) w.behind.store(true, std::memory_order_relaxed);
      if (in_flight_.load(std::memory_order_relaxed) >= max_in_flight_) {
        w.behind.store(true, std::memory_order_relaxed);  // not started
        continue;
      }
      auto* call = new OpenCall();
      call->issuer = this;
      call->at = at;
      PrepareSleep(&call->req);
      // The deadline counts from the scheduled start (as rpc-bench's);
      // brpc takes whole milliseconds, so the rest is rounded up.
      const int64_t remaining_ns = at + timeout_ns_ - now;
      call->cntl.set_timeout_ms(std::max<int64_t>(1, (remaining_ns + 999999) / 1000000));
      call->cntl.set_max_retry(MaxRetry());
      Inc(&w.sent);
      in_flight_.fetch_add(1, std::memory_order_relaxed);
      stub_->Sleep(&call->cntl, &call->req, &call->resp,
                   brpc::NewCallback(&Issuer::OnDoneThunk, call));
    }
  }

  int64_t Drain(int64_t until) {
    while (in_flight_.load() > 0 && NowNanos() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    closed_.store(true);
    return in_flight_.load();
  }

  const Window* windows() const { return windows_.get(); }
  // Calls answered in window `w` by server `s` (servers_.size(): another).
  uint64_t answered_by(size_t w, size_t s) const {
    return answered_by_server_[w * (servers_.size() + 1) + s].load();
  }
  uint64_t backup_requests() const { return backup_requests_.load(); }
  int64_t max_lag_ns() const { return max_lag_ns_; }
  Latencies* ok_latency() { return &ok_latency_; }
  Latencies* refusal_latency() { return &refusal_latency_; }

 private:
  static void OnDoneThunk(OpenCall* call) { call->issuer->OnDone(call); }

  size_t WindowOf(int64_t t_ns) const {
    if (t_ns < 0) return 0;
    return std::min(static_cast<size_t>(t_ns / window_ns_), num_windows_ - 1);
  }

  void OnDone(OpenCall* call) {
    if (!closed_.load(std::memory_order_relaxed)) {
      const int64_t now = NowNanos() - t0_;
      const int64_t latency = std::max<int64_t>(now - call->at, 0);
      Window& w = windows_[WindowOf(now)];
      const int code = call->cntl.ErrorCode();
      if (call->cntl.has_backup_request()) Inc(&backup_requests_);
      if (!call->cntl.Failed()) {
        Inc(latency <= timeout_ns_ ? &w.goodput : &w.late);
        ok_latency_.Record(latency);
        w.answered_latency_sum_us.fetch_add(latency / 1000, std::memory_order_relaxed);
        Max(&w.answered_latency_max_us, latency / 1000);
        const std::string from = butil::endpoint2str(call->cntl.remote_side()).c_str();
        const size_t s = std::find(servers_.begin(), servers_.end(), from) - servers_.begin();
        Inc(&answered_by_server_[WindowOf(now) * (servers_.size() + 1) + s]);
      } else if (IsRefusalCode(code)) {
        Inc(&w.refused);
        refusal_latency_.Record(latency);
        codes_->Note(code, "", false);
      } else if (code == brpc::ERPCTIMEDOUT) {
        Inc(&w.timeouts);
      } else {
        Inc(&w.errors);
        codes_->Note(code,
                     "pacing thread " + std::to_string(index_) + ": code " + std::to_string(code) +
                         ": " + call->cntl.ErrorText(),
                     true);
      }
    }
    delete call;
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }

  const int index_;
  osprey::bench::Arrivals arrivals_;
  brpc::Channel channel_;
  std::unique_ptr<CalculatorService_Stub> stub_;
  std::unique_ptr<Window[]> windows_;
  const size_t num_windows_;
  const int64_t window_ns_;
  const int64_t timeout_ns_;
  const int64_t max_in_flight_;
  const int64_t max_lag_allowed_ns_;
  ErrorCounts* codes_;
  int64_t t0_ = 0;
  int64_t max_lag_ns_ = 0;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> closed_{false};
  Latencies ok_latency_;
  Latencies refusal_latency_;
  const std::vector<std::string> servers_;
  std::unique_ptr<std::atomic<uint64_t>[]> answered_by_server_;
  std::atomic<uint64_t> backup_requests_{0};
};

std::vector<osprey::bench::Phase> ParseSchedule(const std::string& text) {
  std::vector<osprey::bench::Phase> phases;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t colon = item.find(':');
    char* e1 = nullptr;
    char* e2 = nullptr;
    double secs = colon == std::string::npos ? -1 : std::strtod(item.c_str(), &e1);
    double rate = colon == std::string::npos ? -1 : std::strtod(item.c_str() + colon + 1, &e2);
    if (colon == std::string::npos || e1 != item.c_str() + colon || *e2 != '\0' ||
        !(secs > 0 && secs <= 3600) || !(rate > 0 && rate <= 1e8)) {
      BadFlag("-rate_schedule: '" + item + "' is not SECONDS:RATE (seconds up to 3600)");
    }
    phases.push_back({secs, rate});
  }
  if (phases.empty()) BadFlag("-rate_schedule is empty");
  return phases;
}

int RunOpenLoopClient() {
  const std::vector<osprey::bench::Phase> schedule = ParseSchedule(FLAGS_rate_schedule);
  if (FLAGS_call_timeout_ms < 1) BadFlag("-rate_schedule needs -call_timeout_ms >= 1");
  if (FLAGS_window_ms < 1 || FLAGS_window_ms > 60000) BadFlag("-window_ms: 1 to 60000");
  if (FLAGS_max_start_lag_us < 1 || FLAGS_max_start_lag_us > 1000000) {
    BadFlag("-max_start_lag_us: 1 to 1000000");
  }
  if (FLAGS_arrivals != "poisson" && FLAGS_arrivals != "uniform") {
    BadFlag("-arrivals must be uniform or poisson");
  }
  if (FLAGS_handler_us < 0) BadFlag("-rate_schedule needs -handler_us (the Sleep call)");
  const int n = IsDefault("client_threads") ? 2 : FLAGS_client_threads;
  const double schedule_ns = osprey::bench::Arrivals::TotalNanos(schedule);
  const double seconds = schedule_ns / 1e9;
  const int64_t window_ns = static_cast<int64_t>(FLAGS_window_ms) * 1000000;
  const int64_t timeout_ns = static_cast<int64_t>(FLAGS_call_timeout_ms) * 1000000;
  const size_t schedule_windows =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(schedule_ns / window_ns)));
  const size_t num_windows =
      schedule_windows + static_cast<size_t>((timeout_ns + kDrainSlackNs) / window_ns) + 1;

  ErrorCounts codes;
  std::vector<std::unique_ptr<Issuer>> issuers;
  for (int i = 0; i < n; ++i) {
    issuers.push_back(std::make_unique<Issuer>(schedule, i, n, num_windows, window_ns, &codes));
  }
  for (auto& is : issuers) is->Connect();
  bench::Stopwatch sw;
  sw.start();
  const int64_t t0 = NowNanos() + 50000000;  // a moment for the threads to start
  std::vector<std::thread> threads;
  for (auto& is : issuers) threads.emplace_back([&is, t0] { is->Run(t0); });
  for (auto& t : threads) t.join();
  const int64_t drain_until = t0 + static_cast<int64_t>(schedule_ns) + timeout_ns + kDrainSlackNs;
  int64_t unfinished = 0;
  for (auto& is : issuers) unfinished += is->Drain(drain_until);
  sw.stop();

  std::vector<Totals> per_window(num_windows);
  Totals total;
  Latencies ok, refusals;
  int64_t max_lag_ns = 0;
  for (auto& is : issuers) {
    ok.Merge(is->ok_latency());
    refusals.Merge(is->refusal_latency());
    max_lag_ns = std::max(max_lag_ns, is->max_lag_ns());
    for (size_t i = 0; i < num_windows; ++i) {
      const Window& w = is->windows()[i];
      Totals& t = per_window[i];
      t.offered += w.offered.load();
      t.sent += w.sent.load();
      t.goodput += w.goodput.load();
      t.refused += w.refused.load();
      t.timeouts += w.timeouts.load();
      t.late += w.late.load();
      t.errors += w.errors.load();
      t.answered_latency_sum_us += w.answered_latency_sum_us.load();
      t.answered_latency_max_us =
          std::max<uint64_t>(t.answered_latency_max_us, w.answered_latency_max_us.load());
      if (w.behind.load()) t.behind_windows = 1;
    }
  }
  ok.Sort();
  refusals.Sort();
  const std::vector<std::string> servers = ServerList();
  uint64_t backups = 0;
  for (auto& is : issuers) backups += is->backup_requests();
  size_t shown = schedule_windows;
  for (size_t i = 0; i < num_windows; ++i) {
    const Totals& t = per_window[i];
    total.offered += t.offered;
    total.sent += t.sent;
    total.goodput += t.goodput;
    total.refused += t.refused;
    total.timeouts += t.timeouts;
    total.late += t.late;
    total.errors += t.errors;
    total.behind_windows += t.behind_windows;
    if (t.goodput + t.refused + t.timeouts + t.late + t.errors > 0) shown = std::max(shown, i + 1);
  }
  // Calls that ended, each one attempt (max_retry = 0), and the backup
  // requests sent (with -backup_request_ms, brpc's one retry is the backup;
  // a retry after a failed connection is not counted).
  const uint64_t attempts =
      total.goodput + total.late + total.refused + total.timeouts + total.errors + backups;
  auto per_sec = [&](uint64_t v) { return Num(static_cast<double>(v) / seconds); };
  std::string first_error;
  {
    std::lock_guard<std::mutex> l(codes.mu);
    first_error = codes.first_error;
  }

  if (FLAGS_output == "json") {
    std::ostringstream o;
    o << "{\"mode\":\"overload\",\"client\":\"brpc-overload-bench\",\"rate_schedule\":[";
    for (size_t i = 0; i < schedule.size(); ++i) {
      o << (i ? "," : "") << "{\"seconds\":" << Num(schedule[i].seconds)
        << ",\"rate\":" << Num(schedule[i].rate) << "}";
    }
    o << "],\"arrivals\":" << JsonString(FLAGS_arrivals) << ",\"seed\":" << FLAGS_seed
      << ",\"client_threads\":" << n << ",\"handler_us\":" << FLAGS_handler_us
      << ",\"payload_bytes\":0,\"call_timeout_ms\":" << FLAGS_call_timeout_ms
      << ",\"window_ms\":" << FLAGS_window_ms
      << ",\"server_address\":" << JsonString(FLAGS_server_address)
      << ",\"seconds\":" << Num(seconds) << ",\"offered\":" << total.offered
      << ",\"sent\":" << total.sent << ",\"goodput\":" << total.goodput
      << ",\"refused\":" << total.refused << ",\"timeouts\":" << total.timeouts
      << ",\"late\":" << total.late << ",\"errors\":" << total.errors
      << ",\"unfinished\":" << unfinished << ",\"offered_per_sec\":" << per_sec(total.offered)
      << ",\"goodput_per_sec\":" << per_sec(total.goodput)
      << ",\"refusals_per_sec\":" << per_sec(total.refused)
      << ",\"timeouts_per_sec\":" << per_sec(total.timeouts)
      << ",\"late_per_sec\":" << per_sec(total.late)
      << ",\"errors_per_sec\":" << per_sec(total.errors)
      << ",\"refused_by_code\":" << CodesJson(&codes, true)
      << ",\"errors_by_code\":" << CodesJson(&codes, false)
      << ",\"latency_us\":{\"count\":" << ok.count() << ",\"p50\":" << Num(ok.PercentileUs(50))
      << ",\"p99\":" << Num(ok.PercentileUs(99)) << ",\"p99.9\":" << Num(ok.PercentileUs(99.9))
      << ",\"max\":" << Num(ok.MaxUs()) << "}"
      << ",\"refusal_latency_us\":{\"count\":" << refusals.count()
      << ",\"p50\":" << Num(refusals.PercentileUs(50))
      << ",\"p99\":" << Num(refusals.PercentileUs(99)) << "}"
      << ",\"behind\":" << (total.behind_windows > 0 ? "true" : "false")
      << ",\"behind_windows\":" << total.behind_windows
      << ",\"max_start_lag_us\":" << Num(max_lag_ns / 1000.0)
      << ",\"max_start_lag_allowed_us\":" << FLAGS_max_start_lag_us
      << ",\"client_user_cpu_us\":" << sw.elapsed().user_ns / 1000
      << ",\"client_sys_cpu_us\":" << sw.elapsed().sys_ns / 1000
      << ",\"first_error\":" << JsonString(first_error)
      << ",\"retry_attempts\":1,\"retry_budget\":false,\"client_throttling\":false"
      << ",\"throttled\":0,\"attempts_sent\":" << attempts
      << ",\"throttled_per_sec\":0,\"attempts_sent_per_sec\":" << per_sec(attempts)
      << ",\"lb\":" << JsonString(servers.size() > 1 ? FLAGS_lb : "")
      << ",\"backup_request_ms\":" << (servers.size() > 1 ? FLAGS_backup_request_ms : 0)
      << ",\"backup_requests_sent\":" << backups;
    auto series = [&](const char* name, auto field) {
      o << ",\"" << name << "\":[";
      for (size_t i = 0; i < shown; ++i) o << (i ? "," : "") << field(per_window[i], i);
      o << "]";
    };
    o << ",\"windows\":{\"count\":" << shown << ",\"schedule_windows\":" << schedule_windows;
    series("t_s", [&](const Totals&, size_t i) { return Num(i * FLAGS_window_ms / 1000.0); });
    series("offered", [](const Totals& t, size_t) { return t.offered; });
    series("sent", [](const Totals& t, size_t) { return t.sent; });
    series("goodput", [](const Totals& t, size_t) { return t.goodput; });
    series("refused", [](const Totals& t, size_t) { return t.refused; });
    series("timeouts", [](const Totals& t, size_t) { return t.timeouts; });
    series("late", [](const Totals& t, size_t) { return t.late; });
    series("errors", [](const Totals& t, size_t) { return t.errors; });
    series("behind", [](const Totals& t, size_t) { return t.behind_windows; });
    series("throttled", [](const Totals&, size_t) { return 0; });
    series("attempts_sent", [](const Totals& t, size_t) {
      return t.goodput + t.late + t.refused + t.timeouts + t.errors;
    });
    series("latency_mean_us", [](const Totals& t, size_t) {
      const uint64_t n = t.goodput + t.late;
      return n ? t.answered_latency_sum_us / n : 0;
    });
    series("latency_max_us", [](const Totals& t, size_t) { return t.answered_latency_max_us; });
    o << ",\"answered_by_server\":{";
    for (size_t s = 0; s <= servers.size(); ++s) {
      uint64_t sum = 0;
      for (size_t i = 0; i < shown; ++i) {
        for (auto& is : issuers) sum += is->answered_by(i, s);
      }
      if (s == servers.size() && sum == 0) break;  // every answer from a named server
      o << (s ? "," : "") << JsonString(s < servers.size() ? servers[s] : "other") << ":[";
      for (size_t i = 0; i < shown; ++i) {
        uint64_t n = 0;
        for (auto& is : issuers) n += is->answered_by(i, s);
        o << (i ? "," : "") << n;
      }
      o << "]";
    }
    o << "}}}\n";
    std::cout << o.str() << std::flush;
  } else {
    std::ostringstream o;
    o << "Mode:             Overload (open loop, " << FLAGS_arrivals << " arrivals, seed "
      << FLAGS_seed << ") against " << FLAGS_server_address << "\n"
      << "Pacing threads:   " << n << "\n"
      << "Call:             Sleep(" << FLAGS_handler_us << "us), deadline " << FLAGS_call_timeout_ms
      << "ms\n"
      << "Offered/sec:      " << per_sec(total.offered) << " (" << total.offered << " calls, "
      << total.sent << " started)\n"
      << "Goodput/sec:      " << per_sec(total.goodput) << "\n"
      << "Refusals/sec:     " << per_sec(total.refused) << " " << CodesJson(&codes, true) << "\n"
      << "Timeouts/sec:     " << per_sec(total.timeouts) << "\n"
      << "Late/sec:         " << per_sec(total.late) << "\n"
      << "Errors:           " << total.errors << " " << CodesJson(&codes, false) << "\n"
      << "Latency p50:      " << Num(ok.PercentileUs(50)) << "us (answered calls)\n"
      << "Latency p99:      " << Num(ok.PercentileUs(99)) << "us\n"
      << "Latency p99.9:    " << Num(ok.PercentileUs(99.9)) << "us\n"
      << "Refusal p50/p99:  " << Num(refusals.PercentileUs(50)) << "us / "
      << Num(refusals.PercentileUs(99)) << "us\n"
      << (servers.size() > 1 ? "Balancer:         -lb=" + FLAGS_lb + ", backup requests " +
                                   (FLAGS_backup_request_ms > 0
                                        ? "after " + std::to_string(FLAGS_backup_request_ms) +
                                              " ms: " + std::to_string(backups) + " sent"
                                        : std::string("off")) +
                                   "\n"
                             : std::string())
      << "Windows behind:   " << total.behind_windows << " of " << schedule_windows
      << " (max start lag " << Num(max_lag_ns / 1000.0) << "us)\n";
    if (unfinished > 0) o << "Unfinished:       " << unfinished << "\n";
    if (!first_error.empty()) o << "First error:      " << first_error << "\n";
    std::cout << o.str() << std::flush;
  }
  if (total.behind_windows > 0) {
    std::fprintf(
        stderr, "brpc-overload-bench: the client fell behind its schedule in %" PRIu64 " windows\n",
        total.behind_windows);
  }
  if (total.errors > 0) {
    std::fprintf(stderr, "brpc-overload-bench: %" PRIu64 " calls failed: %s\n", total.errors,
                 first_error.c_str());
    return 1;
  }
  return total.refused > 0 && FLAGS_fail_on_refusal ? 1 : 0;
}

// Size brpc's bthread worker pool before anything starts a bthread (the
// peer's, unchanged).
void SetupBthreadWorkers() {
  gflags::CommandLineFlagInfo info;
  int n;
  if (gflags::GetCommandLineFlagInfo("bthread_concurrency", &info) && !info.is_default) {
    // Explicit -bthread_concurrency (already applied by its gflags validator).
    n = bthread::FLAGS_bthread_concurrency;
    g_server_num_threads = n;
    g_workers_source = "-bthread_concurrency";
  } else {
    n = FLAGS_server_reactors + FLAGS_worker_threads;
    g_workers_source = "= server_reactors + worker_threads";
    if (FLAGS_brpc_clamp_workers && n < BTHREAD_MIN_CONCURRENCY) {
      n = BTHREAD_MIN_CONCURRENCY;
      g_workers_source = "clamped to brpc's minimum";
    }
    if (n >= BTHREAD_MIN_CONCURRENCY) {
      // Same as passing -bthread_concurrency=n. (bthread_setconcurrency(n)
      // would not do: gflags already validated the default 9 through it, after
      // which it only raises the pre-start value and silently ignores n < 9.)
      if (gflags::SetCommandLineOption("bthread_concurrency", std::to_string(n).c_str()).empty()) {
        Die("cannot set -bthread_concurrency");
      }
      g_server_num_threads = n;
    } else {
      // Below brpc's API minimum: the pool is created with this many workers
      // (TaskControl::init accepts any n >= 1); the server is told to leave the
      // pool alone (num_threads = 0), or it would grow it to 4.
      bthread::FLAGS_bthread_concurrency = n;
      g_server_num_threads = 0;
    }
  }
  // Create the pool now and wait until all n workers have registered. Otherwise
  // Server::Start (ServerOptions.num_threads -> bthread_setconcurrency_by_tag)
  // creates the pool itself, counts only the workers registered so far and
  // adds the "missing" ones: a fresh process got 9 workers for n = 5.
  bthread_t tid;
  BENCH_CHECK(bthread_start_background(&tid, nullptr, NoopBthread, nullptr) == 0);
  BENCH_CHECK(bthread_join(tid, nullptr) == 0);
  while (bthread_getconcurrency_by_tag(BTHREAD_TAG_DEFAULT) < n) usleep(100);
  BENCH_CHECK(bthread_getconcurrency_by_tag(BTHREAD_TAG_DEFAULT) == n);
  g_bthread_workers = n;
}

// Workers actually registered in brpc's pool (checked against the mapping).
int ActualWorkers() {
  int w = bthread_getconcurrency_by_tag(BTHREAD_TAG_DEFAULT);
  if (w != g_bthread_workers) {
    Die("bthread pool has " + std::to_string(w) + " workers, expected " +
        std::to_string(g_bthread_workers));
  }
  return w;
}

// Refuses the rpc-bench flags whose meaning this client does not have.
void CheckUnsupportedFlags() {
  if (FLAGS_payload_bytes != 0) BadFlag("-payload_bytes: only 0 (no Echo call here)");
  if (FLAGS_target_rate != 0) BadFlag("-target_rate: only 0 (use -rate_schedule)");
  if (FLAGS_retry_attempts != 1) BadFlag("-retry_attempts: only 1 (brpc max_retry = 0)");
  if (FLAGS_client_throttling) BadFlag("-client_throttling: not in this client");
  if (FLAGS_rpc_encryption != "disabled" || FLAGS_enable_encryption ||
      FLAGS_rpc_authentication != "disabled") {
    BadFlag("-rpc_encryption/-rpc_authentication/-enable_encryption: only disabled");
  }
  if (FLAGS_output != "text" && FLAGS_output != "json") BadFlag("-output: text or json");
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "brpc server and open-loop client for Osprey's overload benchmark; without "
      "-server_only or -server_address, the brpc peer of Kudu's rpc-bench (Add)");
  // brpc logs INFO lines (server start/stop) to stderr; keep only warnings and
  // errors unless -minloglevel is given.
  gflags::SetCommandLineOptionWithMode("minloglevel", "1", gflags::SET_FLAGS_DEFAULT);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  CheckUnsupportedFlags();
  if (FLAGS_client_threads < 1 || FLAGS_async_call_concurrency < 1 || FLAGS_server_reactors < 1 ||
      FLAGS_worker_threads < 0 || !(FLAGS_run_seconds > 0) || FLAGS_warmup_seconds < 0) {
    BadFlag(
        "bad flags: need client_threads, async_call_concurrency, server_reactors >= 1, "
        "run_seconds > 0, worker_threads >= 0 and warmup_seconds >= 0");
  }
  if (FLAGS_handler_factor < 1 || FLAGS_handler_factor > 1000) {
    BadFlag("-handler_factor must be from 1 to 1000, got " + std::to_string(FLAGS_handler_factor));
  }
  if (FLAGS_lb != "rr" && FLAGS_lb != "la" && FLAGS_lb != "random") {
    BadFlag("-lb must be rr, la or random, got '" + FLAGS_lb + "'");
  }
  if (FLAGS_backup_request_ms < 0 || FLAGS_backup_request_ms > 60000) {
    BadFlag("-backup_request_ms must be from 0 to 60000");
  }
  if (FLAGS_server_only) {
    SetupBthreadWorkers();
    return RunServerOnly();
  }
  if (!FLAGS_server_address.empty()) {
    SetupClientWorkers();
    if (!FLAGS_rate_schedule.empty()) return RunOpenLoopClient();
    if (FLAGS_mode != "async") BadFlag("-server_address without -rate_schedule: -mode async only");
    return RunClosedLoopClient();
  }
  const bool sync = FLAGS_mode == "sync" || FLAGS_mode == "both";
  const bool async = FLAGS_mode == "async" || FLAGS_mode == "both";
  if (!sync && !async) Die("-mode must be sync, async or both");
  SetupBthreadWorkers();
  if (sync) RunSync();
  if (sync && async) std::cout << std::endl;
  if (async) RunAsync();
  return 0;
}
