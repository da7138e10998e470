#include "overload.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "call_slot.h"
#include "flags.h"
#include "osprey/base/histogram.h"
#include "osprey/base/stopwatch.h"
#include "refusal.h"
#include "report.h"
#include "rpc_bench.osprey.h"
#include "servers.h"

namespace osprey::bench {
namespace {

using kudu::rpc_test::CalculatorServiceProxy;

// After the schedule, calls still in flight get their deadline and this
// long again to end; any left then are reported unfinished.
constexpr int64_t kDrainSlackNs = 2000000000;

// One window's counts. Offered, sent (calls started) and behind by the
// call's scheduled time; the outcomes, and the attempts a call sent to the
// server (first attempt and retries), by the time it ended.
struct Window {
  std::atomic<uint64_t> offered{0};
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> goodput{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> late{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> throttled{0};      // refused by the client, never sent
  std::atomic<uint64_t> attempts_sent{0};  // RpcController::attempts_sent()
  // The answered calls' (goodput and late) latency, for its mean and max.
  std::atomic<uint64_t> latency_sum_us{0};
  std::atomic<uint64_t> latency_max_us{0};
  std::atomic<bool> behind{false};
};

void Add(std::atomic<uint64_t>* c, uint64_t n = 1) { c->fetch_add(n, std::memory_order_relaxed); }
uint64_t Get(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }

struct Totals {
  uint64_t offered = 0, sent = 0, goodput = 0, refused = 0, timeouts = 0, late = 0, errors = 0;
  uint64_t throttled = 0, attempts_sent = 0;
  uint64_t latency_sum_us = 0, latency_max_us = 0;
  uint64_t behind_windows = 0;
};

// One client Messenger's share of the schedule: its thread starts the calls
// (Run), its reactor thread ends them (OnDone).
class Issuer {
 public:
  // `servers`: with a set of servers, numbers them for the per-server
  // series (shared by the issuers); null otherwise.
  Issuer(const Settings& cfg, const std::vector<Phase>& schedule, int index,
         std::shared_ptr<Messenger> messenger, size_t num_windows, int64_t window_ns,
         ServerIndex* servers)
      : cfg_(cfg),
        index_(index),
        arrivals_(schedule, 1.0 / cfg.client_threads, cfg.poisson,
                  cfg.seed + static_cast<uint64_t>(index),
                  static_cast<double>(index) / cfg.client_threads),
        messenger_(std::move(messenger)),
        proxy_(NewProxy(messenger_, cfg)),
        windows_(new Window[num_windows]),
        servers_(servers),
        by_server_(servers != nullptr ? new std::atomic<uint64_t>[num_windows * ServerIndex::kMax]()
                                      : nullptr),
        num_windows_(num_windows),
        window_ns_(window_ns),
        timeout_ns_(static_cast<int64_t>(cfg.call_timeout_ms) * 1000000),
        max_in_flight_(std::max<int64_t>(1, kMaxOpenLoopInFlight / cfg.client_threads)),
        max_lag_allowed_ns_(static_cast<int64_t>(FLAGS_max_start_lag_us) * 1000) {}

  // One call before the schedule, so that the connection is up and
  // negotiated when the first call is due. Its outcome counts nothing.
  void Connect() {
    CallSlot slot;
    slot.Prepare(cfg_, 0);
    (void)slot.IssueSync(proxy_.get(), cfg_);
  }

  // Starts the calls of the schedule, `t0` its start (NowNanos()). Ends
  // with the schedule: one step per call, and each wait is until the next
  // call's time.
  void Run(int64_t t0) {
    t0_ = t0;
    uint32_t seq = static_cast<uint32_t>(index_) << 20;
    for (int64_t at = arrivals_.Next(); at >= 0; at = arrivals_.Next()) {
      int64_t now = NowNanos() - t0;
      if (at > now) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(at - now));
        now = NowNanos() - t0;
      }
      Window& w = windows_[WindowOf(at)];
      Add(&w.offered);
      const int64_t lag = now - at;
      max_lag_ns_ = std::max(max_lag_ns_, lag);
      if (lag > max_lag_allowed_ns_) w.behind.store(true, std::memory_order_relaxed);
      if (in_flight_.load(std::memory_order_relaxed) >= max_in_flight_) {
        // Not started: the client cannot keep up, so the window is invalid.
        w.behind.store(true, std::memory_order_relaxed);
        continue;
      }
      auto* slot = new CallSlot();
      slot->Prepare(cfg_, seq++);
      slot->ctl.set_deadline(MonoTime() + MonoDelta::FromNanoseconds(t0 + at + timeout_ns_));
      Add(&w.sent);
      in_flight_.fetch_add(1, std::memory_order_relaxed);
      slot->Issue(proxy_.get(), cfg_, [this, slot, at] { OnDone(slot, at); });
    }
  }

  // Waits (polling) until no call is in flight or `until` (NowNanos());
  // then later answers count nothing. Returns the calls still in flight.
  int64_t Drain(int64_t until) {
    while (in_flight_.load() > 0 && NowNanos() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    closed_.store(true);
    return in_flight_.load();
  }

  Messenger* messenger() { return messenger_.get(); }
  const Window* windows() const { return windows_.get(); }
  const std::unique_ptr<CalculatorServiceProxy>& proxy() const { return proxy_; }
  // Answered calls of server `s` (ServerIndex) in window `w`; a set only.
  uint64_t answered_by(size_t w, size_t s) const {
    return Get(by_server_[w * ServerIndex::kMax + s]);
  }
  int64_t max_lag_ns() const { return max_lag_ns_; }
  // After Drain.
  void TakeHistograms(Histogram* ok, Histogram* refusals, std::string* first_error,
                      RefusalTotals* reasons, std::map<std::string, uint64_t>* causes) {
    reasons->Merge(reasons_);
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [cause, n] : causes_) (*causes)[cause] += n;
    ok->Merge(ok_latency_);
    refusals->Merge(refusal_latency_);
    if (first_error->empty()) *first_error = first_error_;
  }

 private:
  size_t WindowOf(int64_t t_ns) const {
    if (t_ns < 0) return 0;
    return std::min(static_cast<size_t>(t_ns / window_ns_), num_windows_ - 1);
  }

  // On the messenger's reactor (or wherever the call ended).
  void OnDone(CallSlot* slot, int64_t at) {
    if (!closed_.load(std::memory_order_relaxed)) {
      const int64_t now = NowNanos() - t0_;
      const int64_t latency = now - at;
      Window& w = windows_[WindowOf(now)];
      const Status& s = slot->ctl.status();
      Add(&w.attempts_sent, static_cast<uint64_t>(slot->ctl.attempts_sent()));
      if (s.ok()) {
        slot->VerifyAnswer(cfg_, [&] {
          return "overload issuer " + std::to_string(index_) + " call " + std::to_string(slot->seq);
        });
        Add(latency <= timeout_ns_ ? &w.goodput : &w.late);
        const uint64_t latency_us = static_cast<uint64_t>(std::max<int64_t>(latency, 0) / 1000);
        Add(&w.latency_sum_us, latency_us);
        uint64_t max = w.latency_max_us.load(std::memory_order_relaxed);
        while (latency_us > max && !w.latency_max_us.compare_exchange_weak(max, latency_us)) {
        }
        if (servers_ != nullptr) {
          Add(&by_server_[WindowOf(now) * ServerIndex::kMax + servers_->Of(slot->ctl.server())]);
        }
        std::lock_guard<std::mutex> l(mu_);
        ok_latency_.Record(static_cast<uint64_t>(std::max<int64_t>(latency, 0)));
      } else if (IsThrottled(slot->ctl)) {
        Add(&w.throttled);
      } else if (IsRefusal(slot->ctl)) {
        Add(&w.refused);
        reasons_.Add(ClassifyRefusal(slot->ctl), slot->ctl);
        std::lock_guard<std::mutex> l(mu_);
        refusal_latency_.Record(static_cast<uint64_t>(std::max<int64_t>(latency, 0)));
      } else if (s.IsTimedOut()) {
        Add(&w.timeouts);
        std::lock_guard<std::mutex> l(mu_);
        causes_[FailureCause(slot->ctl)]++;
      } else {
        Add(&w.errors);
        std::lock_guard<std::mutex> l(mu_);
        causes_[FailureCause(slot->ctl)]++;
        if (first_error_.empty()) {
          first_error_ = "overload issuer " + std::to_string(index_) + " call " +
                         std::to_string(slot->seq) + ": " + s.ToString();
        }
      }
    }
    delete slot;
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }

  const Settings& cfg_;
  const int index_;
  Arrivals arrivals_;  // the issuing thread's
  std::shared_ptr<Messenger> messenger_;
  std::unique_ptr<CalculatorServiceProxy> proxy_;
  std::unique_ptr<Window[]> windows_;
  ServerIndex* const servers_;
  std::unique_ptr<std::atomic<uint64_t>[]> by_server_;  // [window][server]; a set only
  const size_t num_windows_;
  const int64_t window_ns_;
  const int64_t timeout_ns_;
  const int64_t max_in_flight_;
  const int64_t max_lag_allowed_ns_;  // -max_start_lag_us
  int64_t t0_ = 0;
  int64_t max_lag_ns_ = 0;  // the issuing thread's
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  Histogram ok_latency_;       // guarded by mu_; ns from the scheduled start
  Histogram refusal_latency_;  // guarded by mu_
  RefusalCounts reasons_;      // the server's refusals (w.refused) by reason
  std::string first_error_;    // guarded by mu_
  // Timeouts and errors by cause (FailureCause); guarded by mu_.
  std::map<std::string, uint64_t> causes_;
};

std::string ScheduleText(const std::vector<Phase>& schedule) {
  std::string s;
  for (const Phase& p : schedule) {
    s += (s.empty() ? "" : ", ") + Num(p.seconds) + "s at " + Num(p.rate) + "/s";
  }
  return s;
}

std::string CallText(const Settings& cfg) {
  if (cfg.handler_us >= 0) return "Sleep(" + std::to_string(cfg.handler_us) + "us)";
  return cfg.payload == 0 ? "Add" : "Echo(" + std::to_string(cfg.payload) + " bytes)";
}

}  // namespace

int RunOverloadMode(const Settings& cfg, const std::vector<Phase>& schedule) {
  const double schedule_ns = Arrivals::TotalNanos(schedule);
  const double seconds = schedule_ns / 1e9;
  const int64_t window_ns = static_cast<int64_t>(FLAGS_window_ms) * 1000000;
  const int64_t timeout_ns = static_cast<int64_t>(cfg.call_timeout_ms) * 1000000;
  const size_t schedule_windows =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(schedule_ns / window_ns)));
  // Room for the answers that arrive after the schedule.
  const size_t num_windows =
      schedule_windows + static_cast<size_t>((timeout_ns + kDrainSlackNs) / window_ns) + 1;

  std::unique_ptr<ServerIndex> server_index;
  if (cfg.server_set) server_index = std::make_unique<ServerIndex>();
  std::vector<std::unique_ptr<Issuer>> issuers;
  for (int i = 0; i < cfg.client_threads; ++i) {
    issuers.push_back(std::make_unique<Issuer>(
        cfg, schedule, i, NewClientMessenger("bench-client-" + std::to_string(i)), num_windows,
        window_ns, server_index.get()));
  }
  for (auto& is : issuers) is->Connect();
  Stopwatch sw(Stopwatch::Scope::kProcess);
  sw.Start();
  // A moment for the threads to start before the first call is due.
  const int64_t t0 = NowNanos() + 50000000;
  std::vector<std::thread> threads;
  for (auto& is : issuers) threads.emplace_back([&is, t0] { is->Run(t0); });
  for (auto& t : threads) t.join();
  const int64_t drain_until = t0 + static_cast<int64_t>(schedule_ns) + timeout_ns + kDrainSlackNs;
  int64_t unfinished = 0;
  for (auto& is : issuers) unfinished += is->Drain(drain_until);
  sw.Stop();
  std::vector<const Proxy*> proxies;
  for (auto& is : issuers) proxies.push_back(is->proxy().get());
  // Every attempt of the run, the connecting calls' too.
  const std::vector<ServerLine> server_lines = SumServers(proxies);
  const HedgeStats hedges = SumHedges(proxies);
  for (auto& is : issuers) is->messenger()->Shutdown();

  // Merge.
  std::vector<Totals> per_window(num_windows);
  Totals total;
  Histogram ok, refusals;
  RefusalTotals reasons;
  std::map<std::string, uint64_t> causes;
  std::string first_error;
  int64_t max_lag_ns = 0;
  for (auto& is : issuers) {
    is->TakeHistograms(&ok, &refusals, &first_error, &reasons, &causes);
    max_lag_ns = std::max(max_lag_ns, is->max_lag_ns());
    for (size_t i = 0; i < num_windows; ++i) {
      const Window& w = is->windows()[i];
      Totals& t = per_window[i];
      t.offered += Get(w.offered);
      t.sent += Get(w.sent);
      t.goodput += Get(w.goodput);
      t.refused += Get(w.refused);
      t.timeouts += Get(w.timeouts);
      t.late += Get(w.late);
      t.errors += Get(w.errors);
      t.throttled += Get(w.throttled);
      t.attempts_sent += Get(w.attempts_sent);
      t.latency_sum_us += Get(w.latency_sum_us);
      t.latency_max_us = std::max(t.latency_max_us, Get(w.latency_max_us));
      if (w.behind.load()) t.behind_windows = 1;
    }
  }
  size_t shown = schedule_windows;  // and any later window with an outcome
  for (size_t i = 0; i < num_windows; ++i) {
    const Totals& t = per_window[i];
    total.offered += t.offered;
    total.sent += t.sent;
    total.goodput += t.goodput;
    total.refused += t.refused;
    total.timeouts += t.timeouts;
    total.late += t.late;
    total.errors += t.errors;
    total.throttled += t.throttled;
    total.attempts_sent += t.attempts_sent;
    total.behind_windows += t.behind_windows;
    if (t.goodput + t.refused + t.timeouts + t.late + t.errors + t.throttled > 0) {
      shown = std::max(shown, i + 1);
    }
  }
  // A set: each server's answered calls per window, and in all.
  const std::vector<std::string> server_names =
      server_index ? server_index->Names() : std::vector<std::string>{};
  std::vector<std::vector<uint64_t>> by_server(server_names.size(),
                                               std::vector<uint64_t>(num_windows, 0));
  std::vector<uint64_t> answered_by(server_names.size(), 0);
  for (size_t s = 0; s < server_names.size(); ++s) {
    const size_t slot = server_names[s] == "other" ? ServerIndex::kMax - 1 : s;
    for (auto& is : issuers) {
      for (size_t i = 0; i < num_windows; ++i) by_server[s][i] += is->answered_by(i, slot);
    }
    for (uint64_t n : by_server[s]) answered_by[s] += n;
  }
  auto attempts_to = [&](const std::string& name) -> const ServerLine* {
    for (const ServerLine& l : server_lines) {
      if (l.address == name) return &l;
    }
    return nullptr;
  };
  const CpuTimes cpu = sw.Elapsed();
  auto per_sec = [&](uint64_t n) { return Num(static_cast<double>(n) / seconds); };
  auto us = [](const Histogram& h, double p) { return Num(h.Percentile(p) / 1000.0); };

  if (FLAGS_output == "json") {
    std::ostringstream o;
    o << "{\"mode\":\"overload\",\"rate_schedule\":[";
    for (size_t i = 0; i < schedule.size(); ++i) {
      o << (i ? "," : "") << "{\"seconds\":" << Num(schedule[i].seconds)
        << ",\"rate\":" << Num(schedule[i].rate) << "}";
    }
    o << "],\"arrivals\":\"" << (cfg.poisson ? "poisson" : "uniform") << "\""
      << ",\"seed\":" << cfg.seed << ",\"client_threads\":" << cfg.client_threads
      << ",\"handler_us\":" << cfg.handler_us << ",\"payload_bytes\":" << cfg.payload
      << ",\"call_timeout_ms\":" << cfg.call_timeout_ms << ",\"window_ms\":" << FLAGS_window_ms
      << ",\"server_address\":" << JsonString(TargetText(cfg))
      << ",\"lb\":" << (cfg.server_set ? JsonString(LoadBalancingName(cfg.lb)) : "null")
      << ",\"servers\":" << ServersJson(server_lines) << ",\"hedges\":" << HedgesJson(cfg, hedges)
      << ",\"errors_by_cause\":" << CausesJson(causes) << ",\"seconds\":" << Num(seconds)
      << ",\"offered\":" << total.offered << ",\"sent\":" << total.sent
      << ",\"goodput\":" << total.goodput << ",\"refused\":" << total.refused
      << ",\"refused_by_reason\":" << reasons.Json()
      << ",\"first_other_refusal\":" << JsonString(reasons.first_other)
      << ",\"timeouts\":" << total.timeouts << ",\"late\":" << total.late
      << ",\"errors\":" << total.errors << ",\"unfinished\":" << unfinished
      << ",\"offered_per_sec\":" << per_sec(total.offered)
      << ",\"goodput_per_sec\":" << per_sec(total.goodput)
      << ",\"refusals_per_sec\":" << per_sec(total.refused)
      << ",\"timeouts_per_sec\":" << per_sec(total.timeouts)
      << ",\"late_per_sec\":" << per_sec(total.late)
      << ",\"errors_per_sec\":" << per_sec(total.errors)
      << ",\"latency_us\":{\"count\":" << ok.count() << ",\"p50\":" << us(ok, 50)
      << ",\"p99\":" << us(ok, 99) << ",\"p99.9\":" << us(ok, 99.9)
      << ",\"max\":" << Num(ok.max() / 1000.0) << "}"
      << ",\"refusal_latency_us\":{\"count\":" << refusals.count()
      << ",\"p50\":" << us(refusals, 50) << ",\"p99\":" << us(refusals, 99) << "}"
      << ",\"behind\":" << (total.behind_windows > 0 ? "true" : "false")
      << ",\"behind_windows\":" << total.behind_windows
      << ",\"max_start_lag_us\":" << Num(max_lag_ns / 1000.0)
      << ",\"max_start_lag_allowed_us\":" << FLAGS_max_start_lag_us
      << ",\"client_user_cpu_us\":" << cpu.user.ToMicroseconds()
      << ",\"client_sys_cpu_us\":" << cpu.system.ToMicroseconds()
      << ",\"first_error\":" << JsonString(first_error)
      << ",\"retry_attempts\":" << cfg.retry.max_attempts
      << ",\"retry_budget\":" << (FLAGS_retry_budget ? "true" : "false")
      << ",\"client_throttling\":" << (FLAGS_client_throttling ? "true" : "false")
      << ",\"throttled\":" << total.throttled << ",\"attempts_sent\":" << total.attempts_sent
      << ",\"throttled_per_sec\":" << per_sec(total.throttled)
      << ",\"attempts_sent_per_sec\":" << per_sec(total.attempts_sent);
    // The series: arrays, one element per window (t_s: the window's start).
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
    series("throttled", [](const Totals& t, size_t) { return t.throttled; });
    series("attempts_sent", [](const Totals& t, size_t) { return t.attempts_sent; });
    // The answered calls' latency, from their scheduled start.
    series("latency_mean_us", [](const Totals& t, size_t) {
      const uint64_t n = t.goodput + t.late;
      return n == 0 ? uint64_t{0} : t.latency_sum_us / n;
    });
    series("latency_max_us", [](const Totals& t, size_t) { return t.latency_max_us; });
    // A set: {"ADDRESS":[answered calls per window],...}.
    o << ",\"answered_by_server\":{";
    for (size_t s = 0; s < server_names.size(); ++s) {
      o << (s ? "," : "") << JsonString(server_names[s]) << ":[";
      for (size_t i = 0; i < shown; ++i) o << (i ? "," : "") << by_server[s][i];
      o << "]";
    }
    o << "}";
    o << "}}\n";
    std::cout << o.str() << std::flush;
  } else {
    std::ostringstream o;
    o << "Mode:             Overload (open loop, " << (cfg.poisson ? "poisson" : "uniform")
      << " arrivals" << (cfg.poisson ? ", seed " + std::to_string(cfg.seed) : "") << ")\n";
    o << "Client reactors:  " << cfg.client_threads << "\n";
    o << "Call:             " << CallText(cfg) << ", deadline " << cfg.call_timeout_ms << "ms\n";
    o << "Rate schedule:    " << ScheduleText(schedule) << "\n";
    o << "----------------------------------\n";
    o << "Offered/sec:      " << per_sec(total.offered) << " (" << total.offered << " calls, "
      << total.sent << " started)\n";
    o << "Goodput/sec:      " << per_sec(total.goodput) << "\n";
    o << "Refusals/sec:     " << per_sec(total.refused) << "\n";
    o << reasons.TextLines("  Refused, ");
    o << "Timeouts/sec:     " << per_sec(total.timeouts) << "\n";
    o << "Late/sec:         " << per_sec(total.late) << "\n";
    o << "Errors:           " << total.errors << "\n";
    if (!causes.empty()) o << "Failed, by cause: " << CausesText(causes) << " (timeouts too)\n";
    o << "Attempts sent:    " << total.attempts_sent << " (first attempts and retries of the "
      << "calls that ended; -retry_attempts " << cfg.retry.max_attempts << ", retry budget "
      << (FLAGS_retry_budget ? "on" : "off") << ")\n";
    o << "Throttled:        " << total.throttled << " (refused by the client, never sent; "
      << "-client_throttling " << (FLAGS_client_throttling ? "on" : "off") << ")\n";
    o << HedgesText(cfg, hedges);
    o << "Latency p50:      " << us(ok, 50) << "us (answered calls, from the scheduled start)\n";
    o << "Latency p99:      " << us(ok, 99) << "us\n";
    o << "Latency p99.9:    " << us(ok, 99.9) << "us\n";
    o << "Refusal p50/p99:  " << us(refusals, 50) << "us / " << us(refusals, 99) << "us\n";
    o << "Windows behind:   " << total.behind_windows << " of " << schedule_windows << " ("
      << FLAGS_window_ms << "ms; max start lag " << Num(max_lag_ns / 1000.0) << "us)"
      << (total.behind_windows > 0 ? ": the client fell behind its schedule; not valid" : "")
      << "\n";
    if (unfinished > 0) o << "Unfinished:       " << unfinished << "\n";
    if (!first_error.empty()) o << "First error:      " << first_error << "\n";
    if (!server_names.empty()) {
      o << "Servers:          " << server_names.size() << " (" << LoadBalancingName(cfg.lb)
        << "; calls answered by each, and attempts sent to it)\n";
      for (size_t s = 0; s < server_names.size(); ++s) {
        const ServerLine* l = attempts_to(server_names[s]);
        o << "  " << server_names[s] << ": " << answered_by[s] << " answered";
        if (l != nullptr) {
          o << ", " << l->calls << " attempts" << (l->ejected ? " (ejected)" : "")
            << (l->draining ? " (draining)" : "");
        }
        o << "\n";
      }
    }
    std::cout << o.str() << std::flush;
  }
  if (total.behind_windows > 0) {
    std::fprintf(stderr,
                 "rpc-bench: the client fell behind its schedule in %" PRIu64
                 " windows: it measured itself, not the server (fewer calls, more "
                 "-client_threads or another core)\n",
                 total.behind_windows);
  }
  if (total.errors > 0) {
    std::fprintf(stderr, "rpc-bench: %" PRIu64 " calls failed (neither refused nor timed out)\n",
                 total.errors);
    return 1;
  }
  return total.refused > 0 && FLAGS_fail_on_refusal ? 1 : 0;
}

}  // namespace osprey::bench
