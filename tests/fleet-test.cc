// One service on many servers (issue 49): targets naming a set of servers,
// load balancing per call, graceful drain, and what the client does when a
// server fails. In-process servers first, then server processes
// (test_server) drained with SIGTERM, killed with SIGKILL, and slowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
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
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(CheckedAdd(proxy, i, 1, MonoDelta::FromSeconds(10)).ok());
  }
  // One call at a time: every server is idle at each pick, so the first
  // drawn wins; the draws spread them.
  for (int i = 0; i < 3; ++i) EXPECT_GT(fleet.adds(i), 50) << "server " << i;
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
  // A call held on server 0 (it sleeps until released).
  CalculatorServiceProxy direct(client, fleet.addrs[0]);
  SleepRequestPB held_req;
  held_req.set_sleep_micros(CalculatorService::kHeldSleep);
  SleepResponsePB held_resp;
  RpcController held_ctl;
  held_ctl.set_timeout(MonoDelta::FromSeconds(30));
  CountDownLatch held_done(1);
  direct.SleepAsync(held_req, &held_resp, &held_ctl, [&] { held_done.CountDown(); });
  ASSERT_TRUE(fleet.servers[0]->service->WaitForSleepsStarted(1));
  std::thread drainer([&] { fleet.servers[0]->messenger->Drain(MonoDelta::FromSeconds(20)); });
  ASSERT_TRUE(WaitUntil([&] { return fleet.servers[0]->messenger->draining(); }));
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
  EXPECT_FALSE(held_done.WaitFor(MonoDelta::FromMilliseconds(100)));
  fleet.servers[0]->service->ReleaseHeldSleeps();
  ASSERT_TRUE(held_done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_TRUE(held_ctl.status().ok()) << held_ctl.status().ToString();
  drainer.join();
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
  CalculatorServiceProxy sleeper(client, fleet.addrs[0]);
  SleepRequestPB req;
  req.set_sleep_micros(CalculatorService::kHeldSleep);
  SleepResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  CountDownLatch done(1);
  sleeper.SleepAsync(req, &resp, &ctl, [&] { done.CountDown(); });
  ASSERT_TRUE(fleet.servers[0]->service->WaitForSleepsStarted(1));
  std::thread drainer([&] { fleet.servers[0]->messenger->Drain(MonoDelta::FromSeconds(20)); });
  ASSERT_TRUE(WaitUntil([&] { return fleet.servers[0]->messenger->draining(); }));
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
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  drainer.join();
}

}  // namespace
}  // namespace osprey::rpc_test
