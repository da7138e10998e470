// Hedged calls (issue 50, item 3) against in-process servers, one of them
// slow: which calls are hedged (a method's idempotency_level, the call's
// set_idempotent, never a tracked one), that the first answer wins and the
// other attempt's is dropped, sync and async, the cap, the p95 delay, the
// messenger's default, and a call whose attempts both fail or are
// cancelled ending once. Real time, bounded: every wait has a limit and a
// watchdog. The same with server processes: fleet-test.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "contract_test_util.h"
#include "hedge_test.osprey.h"
#include "osprey/base/countdown_latch.h"
#include "rpc_test_util.h"

namespace osprey::hedge_test {
namespace {

using rpc_test::Watchdog;

class HedgeServiceImpl : public HedgeServiceIf {
 public:
  explicit HedgeServiceImpl(std::string name) : name_(std::move(name)) {}
  void Read(const WorkRequestPB* req, WorkResponsePB* resp, RpcContext* ctx) override {
    Work(&reads, req, resp, ctx);
  }
  void Write(const WorkRequestPB* req, WorkResponsePB* resp, RpcContext* ctx) override {
    Work(&writes, req, resp, ctx);
  }
  void Plain(const WorkRequestPB* req, WorkResponsePB* resp, RpcContext* ctx) override {
    Work(&plains, req, resp, ctx);
  }
  std::atomic<int> reads{0}, writes{0}, plains{0};
  std::atomic<int> finished{0};
  std::atomic<uint32_t> slowness{1};  // the request's sleep times this
  std::atomic<bool> fail{false};      // answer with an application error

 private:
  void Work(std::atomic<int>* count, const WorkRequestPB* req, WorkResponsePB* resp,
            RpcContext* ctx) {
    count->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(uint64_t{req->sleep_us()} * slowness));
    finished.fetch_add(1);
    if (fail || req->fail()) {
      ctx->RespondFailure(Status::InvalidArgument("failed on " + name_));
      return;
    }
    resp->set_server(name_);
    ctx->RespondSuccess();
  }
  const std::string name_;
};

struct Server {
  std::shared_ptr<Messenger> messenger;
  Sockaddr address;
  HedgeServiceImpl* service = nullptr;
  Status Start(const std::string& name) {
    MessengerBuilder b("hedge-" + name);
    b.set_num_reactors(1);
    OSPREY_RETURN_NOT_OK(b.Build(&messenger));
    auto svc = std::make_unique<HedgeServiceImpl>(name);
    service = svc.get();
    ServicePoolOptions pool;
    pool.worker_threads = 8;  // slow handlers must not queue the fast calls behind them
    OSPREY_RETURN_NOT_OK(messenger->RegisterService(std::move(svc), pool));
    return messenger->Listen(Sockaddr::Loopback(0), &address);
  }
  int runs() const { return service->reads + service->writes + service->plains; }
};

// Servers named s0, s1, ...; `slow` of them (the first ones) `slowness`
// times slower.
struct Fleet {
  std::vector<std::unique_ptr<Server>> servers;
  std::string target;
  void Start(int n, int slow = 0, uint32_t slowness = 200) {
    for (int i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<Server>());
      Status s = servers.back()->Start("s" + std::to_string(i));
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (i < slow) servers.back()->service->slowness = slowness;
      target += (target.empty() ? "" : ",") + servers.back()->address.ToString();
    }
  }
  int runs() const {
    int n = 0;
    for (const auto& s : servers) n += s->runs();
    return n;
  }
  int finished() const {
    int n = 0;
    for (const auto& s : servers) n += s->service->finished;
    return n;
  }
};

HedgingPolicy Every(MonoDelta delay) {
  HedgingPolicy p = HedgingPolicy::After(delay);
  p.max_share = 1;  // every call may be hedged: the cap has a test of its own
  return p;
}

const MonoDelta kSlow = MonoDelta::FromMilliseconds(200);  // 1000 us x 200

WorkRequestPB Sleep(uint32_t us = 1000) {
  WorkRequestPB req;
  req.set_sleep_us(us);
  return req;
}

TEST(HedgingTest, AReadIsHedgedToAnotherServerAndTheFirstAnswerWins) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/1));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  ASSERT_TRUE(proxy.set_hedging(Every(MonoDelta::FromMilliseconds(20))).ok());
  int won = 0;
  for (int i = 0; i < 6; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    const MonoTime start = MonoTime::Now();
    Status s = (i % 2 == 0) ? proxy.Read(Sleep(), &resp, &ctl) : [&] {
      // Async, every other call.
      CountDownLatch done(1);
      proxy.ReadAsync(Sleep(), &resp, &ctl, [&done] { done.CountDown(); });
      EXPECT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
      return ctl.status();
    }();
    const MonoDelta took = MonoTime::Now() - start;
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_LT(took, MonoDelta::FromMilliseconds(150)) << "call " << i << " waited for the slow one";
    if (ctl.hedge() == RpcController::Hedge::kWon) {
      ++won;
      EXPECT_EQ("s1", resp.server()) << "the winner's answer fills the response";
      EXPECT_EQ(fleet.servers[1]->address, ctl.server());
      EXPECT_EQ(2, ctl.attempts());
      EXPECT_EQ(2, ctl.attempts_sent());
    } else {
      EXPECT_EQ(RpcController::Hedge::kNone, ctl.hedge()) << "the fast server answers in 1 ms";
      EXPECT_EQ("s1", resp.server());
    }
  }
  EXPECT_GE(won, 3) << "round robin sends every other first attempt, at least, to the slow one";
  const HedgeStats stats = proxy.hedging_stats();
  EXPECT_EQ(6, stats.eligible);
  EXPECT_EQ(won, stats.sent);
  EXPECT_EQ(won, stats.won);
  // The slow server ran every first attempt sent to it (a client's cancel
  // does not reach a server); its late answers were dropped, and its
  // connection serves on: a call that is not hedged goes there and is
  // answered.
  ASSERT_TRUE(rpc_test::WaitUntil([&] { return fleet.finished() == fleet.runs(); }));
  EXPECT_EQ(won, fleet.servers[0]->runs());
  ASSERT_TRUE(proxy.set_hedging(HedgingPolicy()).ok());  // off
  int slow_answers = 0;
  for (int i = 0; i < 2; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Plain(Sleep(), &resp, &ctl).ok());
    if (resp.server() == "s0") ++slow_answers;
  }
  EXPECT_EQ(1, slow_answers);
  EXPECT_EQ(won, proxy.hedging_stats().sent) << "off: no more hedges";
}

TEST(HedgingTest, APlainMethodIsHedgedOnlyWhenTheCallSaysItIsIdempotent) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/1));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  ASSERT_TRUE(proxy.set_hedging(Every(MonoDelta::FromMilliseconds(20))).ok());
  int slow_calls = 0;
  for (int i = 0; i < 2; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    const MonoTime start = MonoTime::Now();
    ASSERT_TRUE(proxy.Plain(Sleep(), &resp, &ctl).ok());
    EXPECT_EQ(RpcController::Hedge::kNone, ctl.hedge());
    if (resp.server() == "s0") {
      ++slow_calls;
      EXPECT_GE(MonoTime::Now() - start, kSlow);
    }
  }
  EXPECT_EQ(1, slow_calls) << "round robin, no hedge: one call each";
  EXPECT_EQ(0, proxy.hedging_stats().eligible);
  int hedged = 0;
  for (int i = 0; i < 2; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ctl.set_idempotent(true);
    const MonoTime start = MonoTime::Now();
    ASSERT_TRUE(proxy.Plain(Sleep(), &resp, &ctl).ok());
    EXPECT_LT(MonoTime::Now() - start, MonoDelta::FromMilliseconds(150));
    EXPECT_EQ("s1", resp.server());
    if (ctl.hedge() == RpcController::Hedge::kWon) ++hedged;
  }
  EXPECT_GE(hedged, 1);
  EXPECT_EQ(2, proxy.hedging_stats().eligible);
}

TEST(HedgingTest, ATrackedCallIsNeverHedged) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/1));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  ASSERT_TRUE(proxy.set_hedging(Every(MonoDelta::FromMilliseconds(5))).ok());
  int slow_calls = 0;
  for (int i = 0; i < 4; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ctl.set_idempotent(true);  // and its .proto says IDEMPOTENT: still exactly once
    const MonoTime start = MonoTime::Now();
    ASSERT_TRUE(proxy.Write(Sleep(), &resp, &ctl).ok());
    EXPECT_EQ(RpcController::Hedge::kNone, ctl.hedge());
    EXPECT_EQ(1, ctl.attempts());
    if (resp.server() == "s0") {
      ++slow_calls;
      EXPECT_GE(MonoTime::Now() - start, kSlow) << "waited for its one server";
    }
  }
  EXPECT_EQ(2, slow_calls);
  const HedgeStats stats = proxy.hedging_stats();
  EXPECT_EQ(0, stats.eligible);
  EXPECT_EQ(0, stats.sent);
  EXPECT_EQ(4, fleet.runs()) << "each write ran once, on one server";
  EXPECT_EQ(4, fleet.servers[0]->service->writes + fleet.servers[1]->service->writes);
}

TEST(HedgingTest, TheCapHolds) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(3));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  // Every call is slower than the delay, so every call wants a hedge; 5%
  // of them may have one.
  HedgingPolicy policy = HedgingPolicy::After(MonoDelta::FromMicroseconds(500));
  policy.burst = 1;
  ASSERT_TRUE(proxy.set_hedging(policy).ok());
  constexpr int kCalls = 400;
  for (int i = 0; i < kCalls; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Read(Sleep(3000), &resp, &ctl).ok());
  }
  const HedgeStats stats = proxy.hedging_stats();
  EXPECT_EQ(kCalls, stats.eligible);
  EXPECT_LE(stats.sent, kCalls / 20) << "at most 5% of the calls";
  EXPECT_GE(stats.sent, kCalls / 20 - 2) << "and about that many: each was due";
  // Every call's hedge came due (its timer fires before the 3 ms answer)
  // and was decided, but for the odd timer that runs late: under TSan with
  // other tests beside it, one of 400 answers came first.
  const int64_t decided = stats.sent + stats.refused_by_cap + stats.no_other_server;
  EXPECT_LE(decided, kCalls);
  EXPECT_GE(decided, kCalls - kCalls / 20);
  ASSERT_TRUE(rpc_test::WaitUntil([&] { return fleet.finished() == fleet.runs(); }));
  EXPECT_LE(fleet.runs(), kCalls + kCalls / 20) << "what the servers ran";
}

TEST(HedgingTest, AtP95TheDelayIsTheMethodsRecentP95) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  // Until 32 answers are known, 5 s: no hedge at all.
  HedgingPolicy policy = HedgingPolicy::AtP95(MonoDelta::FromSeconds(5));
  policy.max_share = 1;
  ASSERT_TRUE(proxy.set_hedging(policy).ok());
  for (int i = 0; i < 64; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Read(Sleep(), &resp, &ctl).ok());
    // Each of the first 32 calls started with fewer answers known.
    if (i == 31) {
      EXPECT_EQ(0, proxy.hedging_stats().sent);
    }
  }
  // From then on a healthy fleet's call past the p95 is hedged, as it
  // should be: about 5% of the other 32 (this asserted none, and failed
  // 17 runs in 200 on this machine).
  EXPECT_LE(proxy.hedging_stats().sent, 6);
  // Now s0 slows down: its calls are hedged after about 1 ms, the p95.
  fleet.servers[0]->service->slowness = 200;
  for (int i = 0; i < 4; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    const MonoTime start = MonoTime::Now();
    ASSERT_TRUE(proxy.Read(Sleep(), &resp, &ctl).ok());
    EXPECT_LT(MonoTime::Now() - start, MonoDelta::FromMilliseconds(150));
    EXPECT_EQ("s1", resp.server());
  }
  EXPECT_GE(proxy.hedging_stats().won, 2);
}

TEST(HedgingTest, OffByDefaultAndNeverForOneAddress) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/2, /*slowness=*/50));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy set(client, fleet.target);
  HedgeServiceProxy one(client, fleet.servers[0]->address);
  ASSERT_TRUE(one.set_hedging(Every(MonoDelta::FromMilliseconds(1))).ok());
  for (HedgeServiceProxy* proxy : {&set, &one}) {
    WorkResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy->Read(Sleep(), &resp, &ctl).ok());
    EXPECT_EQ(RpcController::Hedge::kNone, ctl.hedge());
    EXPECT_EQ(0, proxy->hedging_stats().eligible);
  }
  EXPECT_EQ(2, fleet.runs());
}

TEST(HedgingTest, TheMessengersPolicyIsTheDefault) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/1));
  std::shared_ptr<Messenger> bad;
  HedgingPolicy wrong = Every(MonoDelta::FromMilliseconds(20));
  wrong.max_share = 2;
  EXPECT_TRUE(MessengerBuilder("c").set_hedging(wrong).Build(&bad).IsInvalidArgument());
  auto client = rpc_test::MakeClient(
      1, MessengerBuilder("c").set_hedging(Every(MonoDelta::FromMilliseconds(20))));
  HedgeServiceProxy proxy(client, fleet.target);
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  for (int i = 0; i < 2; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Read(Sleep(), &resp, &ctl).ok());
    EXPECT_EQ("s1", resp.server());
  }
  EXPECT_GE(proxy.hedging_stats().won, 1);
}

TEST(HedgingTest, AnApplicationErrorIsAnAnswerAndWins) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/1));
  fleet.servers[1]->service->fail = true;
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);
  ASSERT_TRUE(proxy.set_hedging(Every(MonoDelta::FromMilliseconds(20))).ok());
  int won = 0;
  for (int i = 0; i < 2; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    const MonoTime start = MonoTime::Now();
    Status s = proxy.Read(Sleep(), &resp, &ctl);
    EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
    EXPECT_LT(MonoTime::Now() - start, MonoDelta::FromMilliseconds(150));
    if (ctl.hedge() == RpcController::Hedge::kWon) ++won;
  }
  EXPECT_GE(won, 1);
}

TEST(HedgingTest, WhenBothAttemptsTimeOutTheCallEndsOnce) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/2));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  ASSERT_TRUE(proxy.set_hedging(Every(MonoDelta::FromMilliseconds(20))).ok());
  for (int i = 0; i < 2; ++i) {
    WorkResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromMilliseconds(100));
    std::atomic<int> callbacks{0};
    CountDownLatch done(1);
    proxy.ReadAsync(Sleep(), &resp, &ctl, [&] {
      callbacks.fetch_add(1);
      done.CountDown();
    });
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
    EXPECT_TRUE(ctl.status().IsTimedOut()) << ctl.status().ToString();
    EXPECT_EQ(RpcController::Hedge::kSent, ctl.hedge());
    EXPECT_EQ(2, ctl.attempts());
    // Both attempts ended; the callback ran once.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(1, callbacks.load());
  }
  EXPECT_EQ(2, proxy.hedging_stats().sent);
  EXPECT_EQ(0, proxy.hedging_stats().won);
}

TEST(HedgingTest, CancelEndsBothAttempts) {
  Watchdog dog(std::chrono::seconds(60));
  Fleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(2, /*slow=*/2));
  auto client = rpc_test::MakeClient(1);
  HedgeServiceProxy proxy(client, fleet.target);
  ASSERT_TRUE(proxy.set_hedging(Every(MonoDelta::FromMilliseconds(10))).ok());
  WorkResponsePB resp;
  RpcController ctl;
  std::atomic<int> callbacks{0};
  CountDownLatch done(1);
  proxy.ReadAsync(Sleep(), &resp, &ctl, [&] {
    callbacks.fetch_add(1);
    done.CountDown();
  });
  ASSERT_TRUE(rpc_test::WaitUntil([&] { return fleet.runs() == 2; }))
      << "the first attempt and its hedge both run";
  const MonoTime cancelled = MonoTime::Now();
  ctl.Cancel();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_LT(MonoTime::Now() - cancelled, MonoDelta::FromMilliseconds(100))
      << "ended at once, not by the slow answers";
  EXPECT_TRUE(ctl.status().IsAborted()) << ctl.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(1, callbacks.load());
}

}  // namespace
}  // namespace osprey::hedge_test
