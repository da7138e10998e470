// rpc-bench: measures calls per second and their CPU cost, in Apache Kudu's
// rpc-bench modes and report format, so a Kudu command line runs unchanged.
//
// Sync:  -client_threads threads, each with its own client Messenger and one
//        blocking call at a time.
// Async: -client_threads client Messengers (one reactor each) and
//        -async_call_concurrency call loops spread over them; each loop
//        issues its next call from the previous call's callback.
// With -target_rate the run is open-loop: calls start on a fixed schedule
// and latency counts from the scheduled start.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "osprey/base/countdown_latch.h"
#include "osprey/base/histogram.h"
#include "osprey/base/stopwatch.h"
#include "rpc_bench.osprey.h"

DEFINE_int32(client_threads, 16, "sync: client threads; async: client reactors (Messengers)");
DEFINE_int32(async_call_concurrency, 60, "async: calls in flight at once, over all reactors");
DEFINE_int32(worker_threads, 1, "server service-pool worker threads (0: run on reactors)");
DEFINE_int32(server_reactors, 4, "server reactor threads");
DEFINE_double(run_seconds, 1, "seconds to measure each mode");
DEFINE_string(mode, "both", "sync, async or both (sync first)");
DEFINE_int32(payload_bytes, 0, "0: the Add call; N > 0: Echo of N bytes each way");
DEFINE_string(server_address, "",
              "HOST:PORT of a running server (ours or Kudu's); empty: "
              "run a server in this process");
DEFINE_string(rpc_encryption, "disabled",
              "Kudu's --rpc_encryption, for the client and the in-process or -server_only "
              "server: disabled, optional (TLS when the peer can) or required (a peer "
              "without TLS is refused). A server makes a self-signed certificate. Default "
              "disabled, as Kudu's rpc-bench runs without -enable_encryption");
DEFINE_bool(rpc_encrypt_loopback_connections, false,
            "Kudu's flag: encrypt loopback connections too; otherwise TLS on loopback "
            "only authenticates and the calls stay in the clear");
DEFINE_bool(enable_encryption, false,
            "Kudu's rpc-bench flag: the same as --rpc_encryption=required "
            "--rpc_encrypt_loopback_connections");
DEFINE_bool(server_only, false, "only serve, on -listen, until SIGINT or SIGTERM");
DEFINE_string(listen, "127.0.0.1:0", "address the in-process or -server_only server binds");
DEFINE_string(output, "text", "report format: text or json");
DEFINE_double(warmup_seconds, 0, "seconds of calls before measuring starts");
DEFINE_double(target_rate, 0,
              "open loop: calls per second over all threads or loops; 0: "
              "closed loop");

namespace osprey::bench {
namespace {

using kudu::rpc_test::AddRequestPB;
using kudu::rpc_test::AddResponsePB;
using kudu::rpc_test::CalculatorServiceIf;
using kudu::rpc_test::CalculatorServiceProxy;
using kudu::rpc_test::EchoRequestPB;
using kudu::rpc_test::EchoResponsePB;

constexpr int kExitBadFlags = 2;
// Open loop: calls in flight beyond this are not started (counted as
// errors), so a stalled server cannot make the client grow without bound.
constexpr int64_t kMaxOpenLoopInFlight = 100000;

[[noreturn]] void BadFlag(const std::string& msg) {
  std::fprintf(stderr, "rpc-bench: %s\n", msg.c_str());
  std::exit(kExitBadFlags);
}

class BenchService : public CalculatorServiceIf {
 public:
  void Add(const AddRequestPB* req, AddResponsePB* resp, RpcContext* ctx) override {
    resp->set_result(req->x() + req->y());
    ctx->RespondSuccess();
  }
  void Echo(const EchoRequestPB* req, EchoResponsePB* resp, RpcContext* ctx) override {
    resp->set_data(req->data());
    ctx->RespondSuccess();
  }
};

struct Settings {
  bool async = false;
  int client_threads;
  int concurrency;
  int payload;
  double run_seconds;
  double warmup_seconds;
  double target_rate;
  Sockaddr server;
};

struct Results {
  uint64_t calls = 0;
  uint64_t errors = 0;
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

[[noreturn]] void WrongResult(const std::string& what) {
  std::fprintf(stderr, "rpc-bench: FATAL: wrong result: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// One call's request and response, and how to check the answer.
struct CallSlot {
  AddRequestPB add_req;
  AddResponsePB add_resp;
  EchoRequestPB echo_req;
  EchoResponsePB echo_resp;
  RpcController ctl;
  uint32_t seq = 0;

  void Prepare(int payload, uint32_t seed) {
    seq = seed;
    ctl.Reset();
    ctl.set_timeout(MonoDelta::FromSeconds(10));  // as Kudu's rpc-bench
    if (payload == 0) {
      add_req.set_x(seed);
      add_req.set_y(seed * 7 + 1);
    } else {
      std::string* d = echo_req.mutable_data();
      d->assign(static_cast<size_t>(payload), static_cast<char>('a' + seed % 26));
      (*d)[0] = static_cast<char>(seed & 0xff);
    }
  }
  void Issue(CalculatorServiceProxy* proxy, int payload, ResponseCallback cb) {
    if (payload == 0) {
      proxy->AddAsync(add_req, &add_resp, &ctl, std::move(cb));
    } else {
      proxy->EchoAsync(echo_req, &echo_resp, &ctl, std::move(cb));
    }
  }
  Status IssueSync(CalculatorServiceProxy* proxy, int payload) {
    return payload == 0 ? proxy->Add(add_req, &add_resp, &ctl)
                        : proxy->Echo(echo_req, &echo_resp, &ctl);
  }
  // Fatal on a wrong answer; false for an RPC error.
  // `who` names the caller ("async loop 3"); it is formatted only on error,
  // never on the measured path.
  bool Check(int payload, RunState* state, const char* who_kind, int who_index) {
    auto who = [&] {
      return std::string(who_kind) + " " + std::to_string(who_index) + " call " +
             std::to_string(seq);
    };
    if (!ctl.status().ok()) {
      state->RecordError(who() + ": " + ctl.status().ToString());
      return false;
    }
    if (payload == 0) {
      uint32_t want = add_req.x() + add_req.y();
      if (add_resp.result() != want) {
        WrongResult(who() + " Add(" + std::to_string(add_req.x()) + ", " +
                    std::to_string(add_req.y()) + ") returned " +
                    std::to_string(add_resp.result()) + ", expected " + std::to_string(want));
      }
    } else if (echo_resp.data() != echo_req.data()) {
      WrongResult(who() + " Echo of " + std::to_string(payload) + " bytes returned " +
                  std::to_string(echo_resp.data().size()) + " different bytes");
    }
    return true;
  }
};

// --rpc_encryption, parsed by ValidateFlags.
RpcEncryption g_encryption = RpcEncryption::kDisabled;

MessengerBuilder BenchMessengerBuilder(const std::string& name) {
  MessengerBuilder b(name);
  b.set_rpc_encryption(g_encryption)
      .set_rpc_encrypt_loopback(FLAGS_rpc_encrypt_loopback_connections);
  return b;
}

// What was asked, for the report: "rpc_encryption=required, loopback encrypted".
std::string AskedEncryption() {
  std::string s = "rpc_encryption=" + FLAGS_rpc_encryption;
  if (FLAGS_rpc_encrypt_loopback_connections) s += ", loopback encrypted";
  return s;
}

std::shared_ptr<Messenger> NewClientMessenger(const std::string& name) {
  std::shared_ptr<Messenger> m;
  Status s = BenchMessengerBuilder(name).set_num_reactors(1).Build(&m);
  if (!s.ok()) BadFlag("cannot start a client messenger: " + s.ToString());
  return m;
}

// Per-thread or per-loop tallies, merged at the end.
struct alignas(64) Tally {
  uint64_t calls = 0;
  Histogram latency;
};

int64_t NowNanos() { return (MonoTime::Now() - MonoTime()).ToNanoseconds(); }

// ---------------------------------------------------------------- sync mode

void SyncThread(const Settings& cfg, int index, RunState* state, Tally* tally) {
  auto messenger = NewClientMessenger("bench-client-" + std::to_string(index));
  CalculatorServiceProxy proxy(messenger, cfg.server);
  CallSlot slot;
  uint32_t seq = static_cast<uint32_t>(index) << 20;
  // Open loop: this thread's share of the schedule.
  int64_t interval_ns =
      cfg.target_rate > 0 ? static_cast<int64_t>(1e9 * cfg.client_threads / cfg.target_rate) : 0;
  int64_t next_start = NowNanos() + (interval_ns * index) / std::max(cfg.client_threads, 1);
  while (!state->stop.load(std::memory_order_relaxed)) {
    int64_t start;
    if (interval_ns > 0) {
      int64_t now = NowNanos();
      if (next_start > now) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(next_start - now));
      }
      start = next_start;
      next_start += interval_ns;
    } else {
      start = NowNanos();
    }
    slot.Prepare(cfg.payload, seq++);
    (void)slot.IssueSync(&proxy, cfg.payload);  // Check reads the outcome
    bool ok = slot.Check(cfg.payload, state, "sync thread", index);
    if (ok && state->measuring.load(std::memory_order_relaxed)) {
      tally->calls++;
      tally->latency.Record(static_cast<uint64_t>(NowNanos() - start));
      state->progress_calls.fetch_add(1, std::memory_order_relaxed);
    }
  }
  state->RecordSecurity(*messenger);
  messenger->Shutdown();
}

// --------------------------------------------------------------- async mode

// One closed-loop chain of calls: each callback issues the next call.
class CallLoop {
 public:
  CallLoop(const Settings& cfg, int index, CalculatorServiceProxy* proxy, RunState* state,
           CountDownLatch* finished, Tally* tally)
      : cfg_(cfg),
        index_(index),
        proxy_(proxy),
        state_(state),
        finished_(finished),
        seq_(static_cast<uint32_t>(index) << 20),
        tally_(tally) {}

  void Start() { IssueNext(); }

 private:
  void IssueNext() {
    if (state_->stop.load(std::memory_order_relaxed)) {
      finished_->CountDown();
      return;
    }
    slot_.Prepare(cfg_.payload, seq_++);
    start_ns_ = NowNanos();
    slot_.Issue(proxy_, cfg_.payload, [this] { OnDone(); });
  }
  void OnDone() {
    bool ok = slot_.Check(cfg_.payload, state_, "async loop", index_);
    if (ok && state_->measuring.load(std::memory_order_relaxed)) {
      tally_->calls++;
      tally_->latency.Record(static_cast<uint64_t>(NowNanos() - start_ns_));
      state_->progress_calls.fetch_add(1, std::memory_order_relaxed);
    }
    IssueNext();
  }

  const Settings& cfg_;
  const int index_;
  CalculatorServiceProxy* proxy_;
  RunState* state_;
  CountDownLatch* finished_;
  uint32_t seq_;
  CallSlot slot_;
  int64_t start_ns_ = 0;
  Tally* tally_;
};

// Open loop on one client messenger: a thread starts calls on schedule;
// each call owns its slot until its callback frees it.
class OpenLoopIssuer {
 public:
  OpenLoopIssuer(const Settings& cfg, int index, CalculatorServiceProxy* proxy, RunState* state)
      : cfg_(cfg), index_(index), proxy_(proxy), state_(state) {}

  void Run() {
    int64_t interval_ns = static_cast<int64_t>(1e9 * cfg_.client_threads / cfg_.target_rate);
    int64_t next = NowNanos() + (interval_ns * index_) / std::max(cfg_.client_threads, 1);
    uint32_t seq = static_cast<uint32_t>(index_) << 20;
    while (!state_->stop.load(std::memory_order_relaxed)) {
      int64_t now = NowNanos();
      if (next > now) std::this_thread::sleep_for(std::chrono::nanoseconds(next - now));
      int64_t scheduled = next;
      next += interval_ns;
      if (in_flight_.load() >= kMaxOpenLoopInFlight) {
        state_->RecordError("open loop: " + std::to_string(kMaxOpenLoopInFlight) +
                            " calls in flight, call not started");
        continue;
      }
      auto* slot = new CallSlot();
      slot->Prepare(cfg_.payload, seq++);
      in_flight_++;
      slot->Issue(proxy_, cfg_.payload, [this, slot, scheduled] {
        bool ok = slot->Check(cfg_.payload, state_, "open-loop issuer", index_);
        if (ok && state_->measuring.load(std::memory_order_relaxed)) {
          // Callbacks of one messenger run on its single reactor thread.
          tally_.calls++;
          tally_.latency.Record(static_cast<uint64_t>(NowNanos() - scheduled));
          state_->progress_calls.fetch_add(1, std::memory_order_relaxed);
        }
        delete slot;
        in_flight_--;
      });
    }
  }
  void WaitIdle() {
    while (in_flight_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Tally& tally() { return tally_; }

 private:
  const Settings& cfg_;
  const int index_;
  CalculatorServiceProxy* proxy_;
  RunState* state_;
  std::atomic<int64_t> in_flight_{0};
  Tally tally_;
};

// ------------------------------------------------------------------ driver

void ShowProgress(const Settings& cfg, RunState* state, const std::atomic<bool>* done) {
  if (cfg.run_seconds < 5 || !isatty(STDERR_FILENO)) return;
  uint64_t last = 0;
  MonoTime last_t = MonoTime::Now();
  while (!done->load()) {
    for (int i = 0; i < 100 && !done->load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (done->load()) break;
    uint64_t now_calls = state->progress_calls.load();
    MonoTime now = MonoTime::Now();
    double rate = static_cast<double>(now_calls - last) / (now - last_t).ToSeconds();
    std::fprintf(stderr, "  %s: %.0f calls/s\n", cfg.async ? "async" : "sync", rate);
    last = now_calls;
    last_t = now;
  }
}

// Runs warm-up, then the measured interval; `stop_and_wait` ends the calls.
Results Measure(const Settings& cfg, RunState* state, const std::function<void()>& stop_and_wait,
                const std::function<void(Results*)>& collect) {
  if (cfg.warmup_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(cfg.warmup_seconds));
  }
  Stopwatch sw(Stopwatch::Scope::kProcess);
  sw.Start();
  state->measuring.store(true);
  std::atomic<bool> done{false};
  std::thread progress([&] { ShowProgress(cfg, state, &done); });
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg.run_seconds));
  state->measuring.store(false);
  sw.Stop();
  done.store(true);
  progress.join();
  stop_and_wait();
  Results r;
  r.cpu = sw.Elapsed();
  collect(&r);
  r.errors = state->errors.load();
  r.first_error = state->first_error;
  state->TakeSecurity(&r);
  return r;
}

Results RunSync(const Settings& cfg) {
  RunState state;
  std::vector<Tally> tallies(cfg.client_threads);
  std::vector<std::thread> threads;
  for (int i = 0; i < cfg.client_threads; ++i) {
    threads.emplace_back([&, i] { SyncThread(cfg, i, &state, &tallies[i]); });
  }
  return Measure(
      cfg, &state,
      [&] {
        state.stop.store(true);
        for (auto& t : threads) t.join();
      },
      [&](Results* r) {
        for (auto& t : tallies) {
          r->calls += t.calls;
          r->latency.Merge(t.latency);
        }
      });
}

Results RunAsync(const Settings& cfg) {
  RunState state;
  std::vector<std::shared_ptr<Messenger>> messengers;
  std::vector<std::unique_ptr<CalculatorServiceProxy>> proxies;
  for (int i = 0; i < cfg.client_threads; ++i) {
    messengers.push_back(NewClientMessenger("bench-client-" + std::to_string(i)));
    proxies.push_back(std::make_unique<CalculatorServiceProxy>(messengers.back(), cfg.server));
  }
  auto record_security = [&] {
    for (auto& m : messengers) state.RecordSecurity(*m);
  };
  auto shutdown_all = [&] {
    for (auto& m : messengers) m->Shutdown();
  };
  if (cfg.target_rate > 0) {
    std::vector<std::unique_ptr<OpenLoopIssuer>> issuers;
    std::vector<std::thread> threads;
    for (int i = 0; i < cfg.client_threads; ++i) {
      issuers.push_back(std::make_unique<OpenLoopIssuer>(cfg, i, proxies[i].get(), &state));
    }
    for (auto& is : issuers) threads.emplace_back([&is] { is->Run(); });
    Results r = Measure(
        cfg, &state,
        [&] {
          state.stop.store(true);
          for (auto& t : threads) t.join();
          for (auto& is : issuers) is->WaitIdle();
          record_security();
        },
        [&](Results* r) {
          for (auto& is : issuers) {
            r->calls += is->tally().calls;
            r->latency.Merge(is->tally().latency);
          }
        });
    shutdown_all();
    return r;
  }
  CountDownLatch finished(cfg.concurrency);
  // Loops on one messenger run on its one reactor thread: they share a
  // tally, which keeps the histograms few and in cache.
  std::vector<Tally> tallies(cfg.client_threads);
  std::vector<std::unique_ptr<CallLoop>> loops;
  for (int i = 0; i < cfg.concurrency; ++i) {
    int m = i % cfg.client_threads;
    loops.push_back(
        std::make_unique<CallLoop>(cfg, i, proxies[m].get(), &state, &finished, &tallies[m]));
  }
  for (auto& l : loops) l->Start();
  Results r = Measure(
      cfg, &state,
      [&] {
        state.stop.store(true);
        finished.Wait();
        record_security();
      },
      [&](Results* r) {
        for (auto& t : tallies) {
          r->calls += t.calls;
          r->latency.Merge(t.latency);
        }
      });
  shutdown_all();
  return r;
}

// Six significant digits as Kudu prints, but never in exponent form, so
// that scripts reading the report see plain numbers however large.
std::string Num(double v) {
  std::ostringstream o;
  if (std::fabs(v) >= 1e6) {
    o << std::fixed << std::setprecision(0) << v;
  } else {
    o << v;
  }
  return o.str();
}

// gflags exits with status 1 on an unknown flag or a value it cannot parse;
// this checks both first, so every bad flag exits 2 like the range checks.
void PrecheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body.substr(0, body.find('='));
    bool has_value = body.find('=') != std::string::npos;
    gflags::CommandLineFlagInfo info;
    if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) {
      // "-nofoo" negates bool flag "foo".
      if (name.rfind("no", 0) == 0 &&
          gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) && info.type == "bool" &&
          !has_value) {
        continue;
      }
      BadFlag("unknown flag '" + arg + "'; see -help");
    }
    std::string value;
    if (has_value) {
      value = body.substr(body.find('=') + 1);
    } else if (info.type == "bool") {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      BadFlag("flag '" + arg + "' needs a value");
    }
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      BadFlag("flag '" + arg + "': '" + value + "' is not a valid " + info.type);
    }
  }
}

void PrintText(const Settings& cfg, const Results& r) {
  double wall = r.cpu.wall.ToSeconds();
  double calls = static_cast<double>(std::max<uint64_t>(r.calls, 1));
  std::ostringstream o;
  o << "Mode:            " << (cfg.async ? "Async" : "Sync") << "\n";
  if (cfg.async) {
    o << "Client reactors:  " << cfg.client_threads << "\n";
    o << "Call concurrency: " << cfg.concurrency << "\n";
  } else {
    o << "Client threads:   " << cfg.client_threads << "\n";
  }
  o << "Worker threads:   " << FLAGS_worker_threads << "\n";
  o << "Server reactors:  " << FLAGS_server_reactors << "\n";
  // Kudu's 1 or 0 first (1: the calls travelled encrypted), then what the
  // connections negotiated and what was asked.
  o << "Encryption:       " << (r.encrypted ? 1 : 0) << " (negotiated " << r.negotiated << "; "
    << AskedEncryption() << ")\n";
  o << "----------------------------------\n";
  o << "Reqs/sec:         " << Num(std::round(static_cast<double>(r.calls) / wall)) << "\n";
  o << "User CPU per req: " << Num(r.cpu.user.ToNanoseconds() / 1000.0 / calls) << "us\n";
  o << "Sys CPU per req:  " << Num(r.cpu.system.ToNanoseconds() / 1000.0 / calls) << "us\n";
  o << "Ctx Sw. per req:  " << Num(r.cpu.context_switches / calls) << "\n";
  auto us = [&](double p) { return Num(r.latency.Percentile(p) / 1000.0); };
  o << "Latency p50:      " << us(50) << "us\n";
  o << "Latency p99:      " << us(99) << "us\n";
  o << "Latency p99.9:    " << us(99.9) << "us\n";
  o << "Latency max:      " << Num(r.latency.max() / 1000.0) << "us\n";
  if (cfg.target_rate > 0) o << "Target rate:      " << Num(cfg.target_rate) << "/s (open loop)\n";
  if (cfg.payload > 0) o << "Payload bytes:    " << cfg.payload << "\n";
  o << "Errors:           " << r.errors << "\n";
  if (!r.first_error.empty()) o << "First error:      " << r.first_error << "\n";
  std::cout << o.str() << std::flush;
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

void PrintJson(const Settings& cfg, const Results& r) {
  double wall = r.cpu.wall.ToSeconds();
  double calls = static_cast<double>(std::max<uint64_t>(r.calls, 1));
  std::ostringstream o;
  o << "{\"mode\":\"" << (cfg.async ? "async" : "sync") << "\""
    << ",\"client_threads\":" << cfg.client_threads
    << ",\"async_call_concurrency\":" << cfg.concurrency
    << ",\"worker_threads\":" << FLAGS_worker_threads
    << ",\"server_reactors\":" << FLAGS_server_reactors
    << ",\"encryption\":" << (r.encrypted ? "true" : "false")
    << ",\"negotiated\":" << JsonString(r.negotiated)
    << ",\"rpc_encryption\":" << JsonString(FLAGS_rpc_encryption)
    << ",\"rpc_encrypt_loopback_connections\":"
    << (FLAGS_rpc_encrypt_loopback_connections ? "true" : "false")
    << ",\"run_seconds\":" << Num(cfg.run_seconds)
    << ",\"warmup_seconds\":" << Num(cfg.warmup_seconds)
    << ",\"target_rate\":" << Num(cfg.target_rate) << ",\"payload_bytes\":" << cfg.payload
    << ",\"server_address\":" << JsonString(cfg.server.ToString()) << ",\"calls\":" << r.calls
    << ",\"wall_seconds\":" << Num(wall) << ",\"reqs_per_sec\":" << Num(r.calls / wall)
    << ",\"user_cpu_us_per_req\":" << Num(r.cpu.user.ToNanoseconds() / 1000.0 / calls)
    << ",\"sys_cpu_us_per_req\":" << Num(r.cpu.system.ToNanoseconds() / 1000.0 / calls)
    << ",\"ctx_switches_per_req\":" << Num(r.cpu.context_switches / calls)
    << ",\"latency_us\":{\"p50\":" << Num(r.latency.Percentile(50) / 1000.0)
    << ",\"p99\":" << Num(r.latency.Percentile(99) / 1000.0)
    << ",\"p99.9\":" << Num(r.latency.Percentile(99.9) / 1000.0)
    << ",\"max\":" << Num(r.latency.max() / 1000.0) << "}"
    << ",\"errors\":" << r.errors << ",\"first_error\":" << JsonString(r.first_error) << "}\n";
  std::cout << o.str() << std::flush;
}

// Refuses flags out of range before any work starts.
void ValidateFlags() {
  if (FLAGS_client_threads < 1 || FLAGS_client_threads > 4096) {
    BadFlag("-client_threads must be from 1 to 4096, got " + std::to_string(FLAGS_client_threads));
  }
  if (FLAGS_async_call_concurrency < 1 || FLAGS_async_call_concurrency > 1000000) {
    BadFlag("-async_call_concurrency must be from 1 to 1000000, got " +
            std::to_string(FLAGS_async_call_concurrency));
  }
  if (FLAGS_worker_threads < 0 || FLAGS_worker_threads > 4096) {
    BadFlag("-worker_threads must be from 0 to 4096, got " + std::to_string(FLAGS_worker_threads));
  }
  if (FLAGS_server_reactors < 1 || FLAGS_server_reactors > 1024) {
    BadFlag("-server_reactors must be from 1 to 1024, got " +
            std::to_string(FLAGS_server_reactors));
  }
  if (!(FLAGS_run_seconds > 0) || FLAGS_run_seconds > 86400) {
    BadFlag("-run_seconds must be above 0 and at most 86400, got " + Num(FLAGS_run_seconds));
  }
  if (!(FLAGS_warmup_seconds >= 0) || FLAGS_warmup_seconds > 86400) {
    BadFlag("-warmup_seconds must be from 0 to 86400, got " + Num(FLAGS_warmup_seconds));
  }
  if (!(FLAGS_target_rate >= 0) || std::isinf(FLAGS_target_rate)) {
    BadFlag("-target_rate must be 0 (closed loop) or a positive rate, got " +
            Num(FLAGS_target_rate));
  }
  if (FLAGS_payload_bytes < 0 || FLAGS_payload_bytes > 64 * 1024 * 1024) {
    BadFlag("-payload_bytes must be from 0 to 67108864, got " +
            std::to_string(FLAGS_payload_bytes));
  }
  if (FLAGS_mode != "sync" && FLAGS_mode != "async" && FLAGS_mode != "both") {
    BadFlag("-mode must be sync, async or both, got '" + FLAGS_mode + "'");
  }
  if (FLAGS_output != "text" && FLAGS_output != "json") {
    BadFlag("-output must be text or json, got '" + FLAGS_output + "'");
  }
  if (FLAGS_server_only && !FLAGS_server_address.empty()) {
    BadFlag("-server_only serves on -listen; it takes no -server_address");
  }
  if (FLAGS_enable_encryption) {
    // Kudu's rpc-bench spelling; a contradiction is an error, not a guess.
    if (!gflags::GetCommandLineFlagInfoOrDie("rpc_encryption").is_default &&
        FLAGS_rpc_encryption != "required") {
      BadFlag(
          "-enable_encryption means --rpc_encryption=required; it contradicts "
          "--rpc_encryption=" +
          FLAGS_rpc_encryption);
    }
    if (!gflags::GetCommandLineFlagInfoOrDie("rpc_encrypt_loopback_connections").is_default &&
        !FLAGS_rpc_encrypt_loopback_connections) {
      BadFlag(
          "-enable_encryption encrypts loopback; it contradicts "
          "--rpc_encrypt_loopback_connections=false");
    }
    FLAGS_rpc_encryption = "required";
    FLAGS_rpc_encrypt_loopback_connections = true;
  }
  if (FLAGS_rpc_encryption == "disabled") {
    g_encryption = RpcEncryption::kDisabled;
  } else if (FLAGS_rpc_encryption == "optional") {
    g_encryption = RpcEncryption::kOptional;
  } else if (FLAGS_rpc_encryption == "required") {
    g_encryption = RpcEncryption::kRequired;
  } else {
    BadFlag("--rpc_encryption must be disabled, optional or required, got '" +
            FLAGS_rpc_encryption + "'");
  }
}

// Probes the server with one call so an unreachable or wrong server is a
// clear error before the run.
void ProbeServer(const Sockaddr& addr, int payload) {
  auto m = NewClientMessenger("bench-probe");
  CalculatorServiceProxy proxy(m, addr);
  CallSlot slot;
  slot.Prepare(payload, 1);
  slot.ctl.set_timeout(MonoDelta::FromSeconds(5));
  Status s = slot.IssueSync(&proxy, payload);
  if (!s.ok()) BadFlag("server at " + addr.ToString() + " is not usable: " + s.ToString());
  m->Shutdown();
}

std::shared_ptr<Messenger> StartServer(Sockaddr* bound) {
  Sockaddr addr;
  Status s = Sockaddr::Parse(FLAGS_listen, &addr);
  if (!s.ok()) BadFlag("-listen: " + s.message());
  std::shared_ptr<Messenger> server;
  s = BenchMessengerBuilder("bench-server").set_num_reactors(FLAGS_server_reactors).Build(&server);
  ServicePoolOptions pool;
  pool.worker_threads = FLAGS_worker_threads;
  // Deep enough that the benchmark's own calls in flight never overflow it:
  // the run measures the call path, not ERROR_SERVER_TOO_BUSY.
  pool.queue_length =
      static_cast<size_t>(std::max({50, FLAGS_client_threads, FLAGS_async_call_concurrency}));
  if (s.ok()) s = server->RegisterService(std::make_unique<BenchService>(), pool);
  if (s.ok()) s = server->Listen(addr, bound);
  if (!s.ok()) BadFlag("cannot start the server: " + s.ToString());
  return server;
}

int ServeOnly() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts
  Sockaddr bound;
  auto server = StartServer(&bound);
  std::printf("Listening on %s\n", bound.ToString().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "rpc-bench: signal %d, shutting down\n", sig);
  server->Shutdown();
  return 0;
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage("rpc-bench [flags]: Osprey RPC benchmark (Kudu rpc-bench flags)");
  PrecheckFlags(argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
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

  std::shared_ptr<Messenger> server;
  if (FLAGS_server_address.empty()) {
    server = StartServer(&cfg.server);
  } else {
    Status s = Sockaddr::Parse(FLAGS_server_address, &cfg.server);
    if (!s.ok()) BadFlag("-server_address: " + s.message());
  }
  ProbeServer(cfg.server, cfg.payload);

  uint64_t errors = 0;
  for (bool async : {false, true}) {
    if ((async && FLAGS_mode == "sync") || (!async && FLAGS_mode == "async")) continue;
    cfg.async = async;
    Results r = async ? RunAsync(cfg) : RunSync(cfg);
    errors += r.errors;
    if (FLAGS_output == "json") {
      PrintJson(cfg, r);
    } else {
      PrintText(cfg, r);
    }
  }
  if (server) server->Shutdown();
  if (errors > 0) {
    std::fprintf(stderr, "rpc-bench: %" PRIu64 " calls failed\n", errors);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace osprey::bench

int main(int argc, char** argv) { return osprey::bench::Main(argc, argv); }
