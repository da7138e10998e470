// Hedged calls' pure pieces, cell by cell: when a call is hedged
// (HedgeDelay), the cap (HedgeBudget), the p95 window (LatencyWindow), a
// proxy's plan per method (Hedger::Plan), which attempt decides
// (HedgeGroup), and the set's pick of another server (ServerSet::PickOther,
// with an injected clock and random source) and what an outrun attempt
// tells it. Bounded loops; no real time.
#include "osprey/rpc/hedger.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "osprey/rpc/remote_method.h"
#include "osprey/rpc/server_set.h"

namespace osprey {
namespace {

const MonoDelta kMs = MonoDelta::FromMilliseconds(1);

TEST(HedgeDelayTest, EachCell) {
  HedgingPolicy fixed = HedgingPolicy::After(kMs * 7);
  HedgingPolicy p95 = HedgingPolicy::AtP95(kMs * 10);
  HedgingPolicy off = fixed;
  off.enabled = false;
  const MonoDelta none;  // p95 unknown
  struct Cell {
    const HedgingPolicy* policy;
    bool idempotent, tracked;
    size_t servers;
    MonoDelta p95;
    std::optional<MonoDelta> want;
    const char* why;
  } cells[] = {
      {&off, true, false, 3, kMs * 2, std::nullopt, "off"},
      {&fixed, false, false, 3, kMs * 2, std::nullopt, "not idempotent"},
      {&fixed, true, true, 3, kMs * 2, std::nullopt, "tracked: never"},
      {&p95, true, true, 3, kMs * 2, std::nullopt, "tracked at p95: never"},
      {&fixed, true, false, 1, kMs * 2, std::nullopt, "one server: no other to ask"},
      {&fixed, true, false, 0, kMs * 2, std::nullopt, "no server"},
      {&fixed, true, false, 2, kMs * 2, kMs * 7, "fixed: the delay, whatever the p95"},
      {&fixed, true, false, 3, none, kMs * 7, "fixed, p95 unknown"},
      {&p95, true, false, 3, kMs * 2, kMs * 2, "p95 known: the p95"},
      {&p95, true, false, 3, none, kMs * 10, "p95 unknown: the policy's delay"},
  };
  for (const Cell& c : cells) {
    EXPECT_EQ(c.want, HedgeDelay(*c.policy, c.idempotent, c.tracked, c.servers, c.p95)) << c.why;
  }
}

TEST(HedgingPolicyTest, Validate) {
  EXPECT_TRUE(HedgingPolicy().Validate().ok());
  HedgingPolicy p;
  p.delay = MonoDelta::FromMilliseconds(-1);
  EXPECT_TRUE(p.Validate().IsInvalidArgument());
  p = HedgingPolicy();
  p.max_share = 1.5;
  EXPECT_TRUE(p.Validate().IsInvalidArgument());
  p.max_share = -0.1;
  EXPECT_TRUE(p.Validate().IsInvalidArgument());
  p = HedgingPolicy();
  p.burst = 0.5;
  EXPECT_TRUE(p.Validate().IsInvalidArgument());
  EXPECT_FALSE(HedgingPolicy().enabled) << "off by default";
}

TEST(HedgeBudgetTest, StartsEmptyFillsByShareAndCapsAtBurst) {
  HedgeBudget b(0.05, 2);
  EXPECT_FALSE(b.TryTake()) << "no hedge before any call";
  for (int i = 0; i < 19; ++i) b.RecordCall();
  EXPECT_FALSE(b.TryTake()) << "19 calls earn 0.95 of a hedge";
  b.RecordCall();
  EXPECT_TRUE(b.TryTake()) << "20 calls earn one";
  EXPECT_FALSE(b.TryTake());
  for (int i = 0; i < 1000; ++i) b.RecordCall();
  EXPECT_DOUBLE_EQ(2.0, b.tokens()) << "saved up to the burst only";
  EXPECT_TRUE(b.TryTake());
  EXPECT_TRUE(b.TryTake());
  EXPECT_FALSE(b.TryTake());
  b.GiveBack();
  EXPECT_TRUE(b.TryTake()) << "a hedge that could not go is given back";
}

TEST(HedgeBudgetTest, HedgesNeverExceedTheShareOfCalls) {
  // Every call wants a hedge: at most share x calls go, at every point.
  HedgeBudget b(0.05, 10);
  int calls = 0, hedges = 0;
  for (int i = 0; i < 10000; ++i) {
    b.RecordCall();
    ++calls;
    if (b.TryTake()) ++hedges;
    ASSERT_LE(hedges, calls / 20) << "after " << calls << " calls";
  }
  EXPECT_EQ(500, hedges);
}

TEST(HedgeBudgetTest, ZeroShareNeverHedges) {
  HedgeBudget b(0, 10);
  for (int i = 0; i < 1000; ++i) b.RecordCall();
  EXPECT_FALSE(b.TryTake());
}

TEST(HedgeBudgetTest, ManyThreadsNeverOverspend) {
  HedgeBudget b(0.1, 1000);
  std::atomic<int> hedges{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) {
        b.RecordCall();
        if (b.TryTake()) hedges.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // A bounded exchange loop may drop a contended deposit: never more.
  EXPECT_LE(hedges.load(), 2000);
  EXPECT_GT(hedges.load(), 1500);
}

TEST(LatencyWindowTest, NoP95UntilEnoughSamplesThenThe95thPercentile) {
  LatencyWindow w;
  EXPECT_EQ(MonoDelta(), w.p95());
  for (int i = 1; i < LatencyWindow::kMinSamples; ++i) w.Record(kMs * i);
  EXPECT_EQ(MonoDelta(), w.p95()) << "31 samples: unknown";
  w.Record(kMs * LatencyWindow::kMinSamples);
  // 32 samples of 1..32 ms: the 31st smallest (ceil(0.95 x 32) = 31).
  EXPECT_EQ(kMs * 31, w.p95());
}

TEST(LatencyWindowTest, OneHundredSamples) {
  LatencyWindow w;
  // 1..100 ms in a scrambled order, then twelve 50s: 112 samples, a
  // recompute (at 32, then every 16). The 107th smallest (ceil(0.95 x 112))
  // of [1..49, 50 x 13, 51..100] is 95.
  for (int i = 0; i < 100; ++i) w.Record(kMs * ((i * 37) % 100 + 1));
  for (int i = 0; i < 12; ++i) w.Record(kMs * 50);
  EXPECT_EQ(kMs * 95, w.p95());
}

TEST(LatencyWindowTest, OldSamplesAgeOutAfterTheWindow) {
  LatencyWindow w;
  for (int i = 0; i < LatencyWindow::kSize; ++i) w.Record(kMs * 100);
  EXPECT_EQ(kMs * 100, w.p95());
  // A whole window of faster answers: the slow past is forgotten.
  for (int i = 0; i < LatencyWindow::kSize; ++i) w.Record(kMs * 2);
  EXPECT_EQ(kMs * 2, w.p95());
  // Under 5% slow (11 of 256) is not above the p95; over 5% (13) is.
  for (int i = 0; i < LatencyWindow::kSize; ++i) w.Record(i % 25 == 0 ? kMs * 100 : kMs * 2);
  EXPECT_EQ(kMs * 2, w.p95());
  for (int i = 0; i < LatencyWindow::kSize; ++i) w.Record(i % 20 == 0 ? kMs * 100 : kMs * 2);
  EXPECT_EQ(kMs * 100, w.p95());
}

TEST(HedgerTest, PlansOnlyWhatMayBeHedgedAndCountsIt) {
  auto counters = std::make_shared<HedgeCounters>();
  HedgingPolicy policy = HedgingPolicy::AtP95(kMs * 10);
  Hedger h(policy, counters, nullptr);
  RemoteMethod read("svc", "Read"), write("svc", "Write", /*track_result=*/true);
  LatencyWindow* w = nullptr;
  EXPECT_EQ(std::nullopt, h.Plan(read, /*idempotent=*/false, false, 3, &w));
  EXPECT_EQ(std::nullopt, h.Plan(write, true, /*tracked=*/true, 3, &w));
  EXPECT_EQ(std::nullopt, h.Plan(read, true, false, /*servers=*/1, &w));
  EXPECT_EQ(0, counters->eligible.load()) << "none of those could be hedged";
  EXPECT_EQ(nullptr, w);
  EXPECT_EQ(kMs * 10, h.Plan(read, true, false, 3, &w)) << "p95 unknown";
  ASSERT_NE(nullptr, w);
  EXPECT_EQ(1, counters->eligible.load());
  for (int i = 0; i < LatencyWindow::kMinSamples; ++i) w->Record(kMs * 3);
  LatencyWindow* again = nullptr;
  EXPECT_EQ(kMs * 3, h.Plan(read, true, false, 3, &again));
  EXPECT_EQ(w, again) << "one window per method";
  // Another RemoteMethod object of the same name (a proxy's string-named
  // call) shares it; another method has its own.
  RemoteMethod read2("svc", "Read"), other("svc", "Other");
  EXPECT_EQ(kMs * 3, h.Plan(read2, true, false, 3, &again));
  EXPECT_EQ(w, again);
  EXPECT_EQ(kMs * 10, h.Plan(other, true, false, 3, &again));
  EXPECT_NE(w, again);
}

TEST(HedgerTest, MethodsPastTheTableShareItsLastWindow) {
  Hedger h(HedgingPolicy::AtP95(), std::make_shared<HedgeCounters>(), nullptr);
  std::vector<LatencyWindow*> windows;
  for (int i = 0; i < Hedger::kMethods + 4; ++i) {
    RemoteMethod m("svc", "M" + std::to_string(i));
    LatencyWindow* w = nullptr;
    ASSERT_TRUE(h.Plan(m, true, false, 2, &w).has_value());
    windows.push_back(w);
  }
  for (int i = Hedger::kMethods; i < Hedger::kMethods + 4; ++i) {
    EXPECT_EQ(windows[Hedger::kMethods - 1], windows[i]) << "bounded: " << i;
  }
}

TEST(HedgeGroupTest, TheFirstAnswerDecides) {
  int runs = 0;
  HedgeGroup g([&runs] { ++runs; });
  EXPECT_TRUE(g.Claim());
  EXPECT_FALSE(g.Claim()) << "the other answer is dropped";
  EXPECT_FALSE(g.EndedWithoutAnswer()) << "a failure after the answer is dropped";
  g.TakeCallback()();
  EXPECT_EQ(1, runs);
}

TEST(HedgeGroupTest, AFailureWaitsForTheOtherAttempt) {
  HedgeGroup answered([] {});
  EXPECT_FALSE(answered.EndedWithoutAnswer()) << "the other may still answer";
  EXPECT_TRUE(answered.Claim()) << "and does";
  HedgeGroup both_failed([] {});
  EXPECT_FALSE(both_failed.EndedWithoutAnswer());
  EXPECT_TRUE(both_failed.EndedWithoutAnswer()) << "the last failure decides";
  EXPECT_FALSE(both_failed.Claim());
}

TEST(HedgeGroupTest, ConcurrentClaimsHaveOneWinner) {
  for (int round = 0; round < 200; ++round) {
    HedgeGroup g([] {});
    std::atomic<int> winners{0};
    std::thread a([&] { winners += g.Claim() ? 1 : 0; });
    std::thread b([&] { winners += g.EndedWithoutAnswer() ? 1 : 0; });
    a.join();
    b.join();
    ASSERT_EQ(1, winners.load()) << "round " << round;
  }
}

struct SetFixture {
  MonoTime now = MonoTime() + MonoDelta::FromSeconds(1000);
  uint64_t draws = 0;
  std::shared_ptr<ServerSet> set;
  void Make(const std::string& target, LoadBalancing lb) {
    ServerSet::Options o;
    o.lb = lb;
    o.clock = [this] { return now; };
    o.random = [this] { return draws++; };
    Status s = ServerSet::Make(target, std::move(o), &set);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
};

TEST(ServerSetPickOtherTest, NeverTheSlowServerItself) {
  for (LoadBalancing lb : {LoadBalancing::kRoundRobin, LoadBalancing::kPowerOfTwoChoices,
                           LoadBalancing::kConsistentHash}) {
    SetFixture f;
    f.Make("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", lb);
    ServerSet::EntryPtr first = f.set->Pick(7, nullptr, false);
    for (int i = 0; i < 30; ++i) {
      ServerSet::EntryPtr other = f.set->PickOther(7, first);
      ASSERT_NE(nullptr, other) << LoadBalancingName(lb);
      EXPECT_NE(first, other) << LoadBalancingName(lb);
      f.set->Ended(other, ServerSet::Outcome::kAnswered);
    }
  }
}

TEST(ServerSetPickOtherTest, NoneWhenNoOtherServerIsEligible) {
  SetFixture f;
  f.Make("127.0.0.1:1,127.0.0.1:2", LoadBalancing::kRoundRobin);
  ServerSet::EntryPtr a = f.set->Pick(0, nullptr, false);
  ServerSet::EntryPtr b = f.set->PickOther(0, a);
  ASSERT_NE(nullptr, b);
  // b drains: nothing else to hedge to, and nothing counted.
  f.set->Ended(b, ServerSet::Outcome::kDraining);
  const int64_t outstanding = f.set->Report()[0].outstanding + f.set->Report()[1].outstanding;
  EXPECT_EQ(nullptr, f.set->PickOther(0, a));
  EXPECT_EQ(outstanding, f.set->Report()[0].outstanding + f.set->Report()[1].outstanding);
  // Once it may be picked again, it is.
  f.now = f.now + MonoDelta::FromSeconds(2);
  EXPECT_NE(nullptr, f.set->PickOther(0, a));
}

TEST(ServerSetPickOtherTest, AnOutrunAttemptKeepsItsServerAsSlowAsMeasured) {
  SetFixture f;
  f.Make("127.0.0.1:1,127.0.0.1:2", LoadBalancing::kPowerOfTwoChoices);
  ServerSet::EntryPtr a = f.set->Pick(0, nullptr, false);
  // Two answers of 10 ms (the first is not counted: connection setup).
  f.set->Ended(a, ServerSet::Outcome::kAnswered, kMs * 10);
  f.set->Keep(a);
  f.set->Ended(a, ServerSet::Outcome::kAnswered, kMs * 10);
  EXPECT_DOUBLE_EQ(10e6, a->latency_ns);
  // Three seconds without an answer: it decays to an eighth, so p2c tries
  // it again. That attempt is outrun by a hedge after 2 ms: still slow.
  f.now = f.now + MonoDelta::FromSeconds(3);
  f.set->Keep(a);
  f.set->Ended(a, ServerSet::Outcome::kOutrun, kMs * 2);
  EXPECT_DOUBLE_EQ(10e6, a->latency_ns) << "as last measured, the decay undone";
  EXPECT_EQ(f.now, a->latency_at);
  // Outrun after longer than it ever took: at least that.
  f.set->Keep(a);
  f.set->Ended(a, ServerSet::Outcome::kOutrun, kMs * 30);
  EXPECT_DOUBLE_EQ(30e6, a->latency_ns);
  EXPECT_EQ(0, a->failures_in_a_row) << "outrun is not a failure";
  // An answer still moves it down as before.
  f.set->Keep(a);
  f.set->Ended(a, ServerSet::Outcome::kAnswered, kMs * 10);
  EXPECT_DOUBLE_EQ(0.8 * 30e6 + 0.2 * 10e6, a->latency_ns);
}

}  // namespace
}  // namespace osprey
