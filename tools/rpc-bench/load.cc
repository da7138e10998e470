#include "load.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "arrivals.h"
#include "call_slot.h"
#include "flags.h"
#include "osprey/base/countdown_latch.h"
#include "rpc_bench.osprey.h"
#include "servers.h"

namespace osprey::bench {

std::shared_ptr<Messenger> NewClientMessenger(const std::string& name) {
  std::shared_ptr<Messenger> m;
  Status s = BenchMessengerBuilder(name)
                 .set_num_reactors(1)
                 .set_retry_budget(FLAGS_retry_budget)
                 .set_client_throttling(FLAGS_client_throttling)
                 .Build(&m);
  if (!s.ok()) BadFlag("cannot start a client messenger: " + s.ToString());
  return m;
}

int64_t NowNanos() { return (MonoTime::Now() - MonoTime()).ToNanoseconds(); }

std::string TargetText(const Settings& cfg) {
  if (cfg.target.empty()) return cfg.server.ToString();
  if (!cfg.server_set) return cfg.target;
  return cfg.target + " (" + LoadBalancingName(cfg.lb) + ")";
}

namespace {

using kudu::rpc_test::CalculatorServiceProxy;

// Per-thread or per-loop tallies, merged at the end.
struct alignas(64) Tally {
  uint64_t calls = 0;
  Histogram latency;
};

// The open loop's schedule for thread or issuer `index`: its share of
// -target_rate until stopped.
Arrivals OpenLoopArrivals(const Settings& cfg, int index) {
  std::vector<Phase> endless;
  if (cfg.target_rate > 0) {
    endless.push_back({std::numeric_limits<double>::infinity(), cfg.target_rate});
  }
  return Arrivals(std::move(endless), 1.0 / cfg.client_threads, cfg.poisson,
                  cfg.seed + static_cast<uint64_t>(index),
                  static_cast<double>(index) / cfg.client_threads);
}

// ---------------------------------------------------------------- sync mode

// `proxy` calls through `messenger`, made by RunSync so that it can read
// the proxies' calls per server while the threads run.
void SyncThread(const Settings& cfg, int index, const std::shared_ptr<Messenger>& messenger,
                const CalculatorServiceProxy& proxy, RunState* state, Tally* tally) {
  CallSlot slot;
  uint32_t seq = static_cast<uint32_t>(index) << 20;
  // Open loop: this thread's share of the schedule.
  const bool open_loop = cfg.target_rate > 0;
  Arrivals arrivals = OpenLoopArrivals(cfg, index);
  const int64_t t0 = NowNanos();
  while (!state->stop.load(std::memory_order_relaxed)) {
    int64_t start;
    if (open_loop) {
      start = t0 + arrivals.Next();
      int64_t now = NowNanos();
      if (start > now) std::this_thread::sleep_for(std::chrono::nanoseconds(start - now));
    } else {
      start = NowNanos();
    }
    slot.Prepare(cfg, seq++);
    (void)slot.IssueSync(&proxy, cfg);  // Check reads the outcome
    bool ok = slot.Check(cfg, state, "sync thread", index);
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
  CallLoop(const Settings& cfg, int index, const CalculatorServiceProxy* proxy, RunState* state,
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
  // A call may end inside Issue (the client's throttling refuses it at
  // once), and its callback asks for the next from there: with calls
  // refused one after another that recursion overflowed the stack. So
  // each ask counts in `asks_`, and only the frame that took it from 0
  // issues, looping while more were asked meanwhile (by a callback inside
  // Issue, or by the reactor before this frame finished its turn).
  void IssueNext() {
    if (asks_.fetch_add(1, std::memory_order_acq_rel) > 0) return;  // that frame issues it
    do {
      if (state_->stop.load(std::memory_order_relaxed)) {
        // No call in flight, so no other ask comes; `this` may be freed
        // once the latch is down.
        finished_->CountDown();
        return;
      }
      slot_.Prepare(cfg_, seq_++);
      start_ns_ = NowNanos();
      slot_.Issue(proxy_, cfg_, [this] { OnDone(); });
    } while (asks_.fetch_sub(1, std::memory_order_acq_rel) > 1);
  }
  void OnDone() {
    bool ok = slot_.Check(cfg_, state_, "async loop", index_);
    if (ok && state_->measuring.load(std::memory_order_relaxed)) {
      tally_->calls++;
      tally_->latency.Record(static_cast<uint64_t>(NowNanos() - start_ns_));
      state_->progress_calls.fetch_add(1, std::memory_order_relaxed);
    }
    IssueNext();
  }

  const Settings& cfg_;
  const int index_;
  const CalculatorServiceProxy* proxy_;
  RunState* state_;
  CountDownLatch* finished_;
  uint32_t seq_;
  CallSlot slot_;
  int64_t start_ns_ = 0;
  Tally* tally_;
  std::atomic<int> asks_{0};  // IssueNext calls not yet served
};

// Open loop on one client messenger: a thread starts calls on schedule;
// each call owns its slot until its callback frees it.
class OpenLoopIssuer {
 public:
  OpenLoopIssuer(const Settings& cfg, int index, const CalculatorServiceProxy* proxy,
                 RunState* state)
      : cfg_(cfg), index_(index), proxy_(proxy), state_(state) {}

  void Run() {
    Arrivals arrivals = OpenLoopArrivals(cfg_, index_);
    const int64_t t0 = NowNanos();
    uint32_t seq = static_cast<uint32_t>(index_) << 20;
    while (!state_->stop.load(std::memory_order_relaxed)) {
      int64_t scheduled = t0 + arrivals.Next();
      int64_t now = NowNanos();
      if (scheduled > now) std::this_thread::sleep_for(std::chrono::nanoseconds(scheduled - now));
      if (in_flight_.load() >= kMaxOpenLoopInFlight) {
        state_->RecordError("open loop: " + std::to_string(kMaxOpenLoopInFlight) +
                                " calls in flight, call not started",
                            "not started (client)");
        continue;
      }
      auto* slot = new CallSlot();
      slot->Prepare(cfg_, seq++);
      in_flight_++;
      slot->Issue(proxy_, cfg_, [this, slot, scheduled] {
        bool ok = slot->Check(cfg_, state_, "open-loop issuer", index_);
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
  const CalculatorServiceProxy* proxy_;
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
// `proxies`: the run's, whose calls per server (a set's) the interval's
// report gives.
Results Measure(const Settings& cfg, RunState* state,
                const std::vector<std::unique_ptr<CalculatorServiceProxy>>& proxies,
                const std::function<void()>& stop_and_wait,
                const std::function<void(Results*)>& collect) {
  if (cfg.warmup_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(cfg.warmup_seconds));
  }
  Stopwatch sw(Stopwatch::Scope::kProcess);
  sw.Start();
  const std::vector<ServerLine> servers_at_start = SumServers(proxies);
  const HedgeStats hedges_at_start = SumHedges(proxies);
  state->measuring.store(true);
  std::atomic<bool> done{false};
  std::thread progress([&] { ShowProgress(cfg, state, &done); });
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg.run_seconds));
  state->measuring.store(false);
  sw.Stop();
  std::vector<ServerLine> servers = ServersSince(servers_at_start, SumServers(proxies));
  const HedgeStats hedges = HedgesSince(hedges_at_start, SumHedges(proxies));
  done.store(true);
  progress.join();
  stop_and_wait();
  Results r;
  r.cpu = sw.Elapsed();
  collect(&r);
  r.errors = state->errors.load();
  r.refusals.Merge(state->refusals);
  r.refused = r.refusals.total();
  r.servers = std::move(servers);
  r.hedges = hedges;
  {
    std::lock_guard<std::mutex> l(state->error_mu);
    r.first_error = state->first_error;
    r.errors_by_cause = state->errors_by_cause;
  }
  state->TakeSecurity(&r);
  return r;
}

}  // namespace

Results RunSync(const Settings& cfg) {
  RunState state;
  std::vector<Tally> tallies(cfg.client_threads);
  std::vector<std::shared_ptr<Messenger>> messengers;
  std::vector<std::unique_ptr<CalculatorServiceProxy>> proxies;
  for (int i = 0; i < cfg.client_threads; ++i) {
    messengers.push_back(NewClientMessenger("bench-client-" + std::to_string(i)));
    proxies.push_back(NewProxy(messengers.back(), cfg));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < cfg.client_threads; ++i) {
    threads.emplace_back(
        [&, i] { SyncThread(cfg, i, messengers[i], *proxies[i], &state, &tallies[i]); });
  }
  return Measure(
      cfg, &state, proxies,
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
    proxies.push_back(NewProxy(messengers.back(), cfg));
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
        cfg, &state, proxies,
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
  // Started from a thread of their own: a loop whose calls the client's
  // throttling refuses at once issues again where it runs until a call is
  // sent or the run stops, and this thread is the one that stops it.
  std::thread starter([&loops] {
    for (auto& l : loops) l->Start();
  });
  Results r = Measure(
      cfg, &state, proxies,
      [&] {
        state.stop.store(true);
        starter.join();
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

void ProbeServer(const Settings& cfg) {
  auto m = NewClientMessenger("bench-probe");
  auto proxy = NewProxy(m, cfg);
  CallSlot slot;
  slot.Prepare(cfg, 1);
  slot.ctl.set_timeout(MonoDelta::FromSeconds(5));
  // Other clients may already fill a short service queue; a refusal says the
  // server is there and busy, so the probe tries again within its deadline.
  // A server that is not there fails at once.
  RetryPolicy busy_only;
  busy_only.max_attempts = 100;
  busy_only.initial_backoff = MonoDelta::FromMilliseconds(5);
  busy_only.max_backoff = MonoDelta::FromMilliseconds(100);
  busy_only.retry_server_shutting_down = false;
  busy_only.retry_network_errors = false;
  Status s = slot.ctl.set_retry_policy(busy_only);
  if (s.ok()) s = slot.IssueSync(proxy.get(), cfg);
  if (!s.ok()) BadFlag("server at " + TargetText(cfg) + " is not usable: " + s.ToString());
  m->Shutdown();
}

}  // namespace osprey::bench
