// PickServer, cell by cell: each policy against the servers' state.
#include "osprey/rpc/load_balancer.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace osprey {
namespace {

std::vector<ServerView> Servers(size_t n) {
  std::vector<ServerView> v(n);
  for (size_t i = 0; i < n; ++i) v[i].id = ServerIdOf("10.0.0." + std::to_string(i) + ":7050");
  return v;
}

TEST(LoadBalancerTest, NamesParseBothWays) {
  for (LoadBalancing lb : {LoadBalancing::kRoundRobin, LoadBalancing::kPowerOfTwoChoices,
                           LoadBalancing::kConsistentHash}) {
    EXPECT_EQ(lb, ParseLoadBalancing(LoadBalancingName(lb)));
  }
  EXPECT_FALSE(ParseLoadBalancing("random").has_value());
}

TEST(LoadBalancerTest, RoundRobinTakesEachEligibleServerInTurn) {
  auto s = Servers(3);
  uint64_t next = 0;
  std::vector<size_t> picks;
  for (int i = 0; i < 6; ++i) {
    picks.push_back(PickServer(LoadBalancing::kRoundRobin, s, 0, 0, 0, &next));
  }
  EXPECT_EQ((std::vector<size_t>{0, 1, 2, 0, 1, 2}), picks);
  s[1].eligible = false;  // ejected: skipped, the others keep their turns
  picks.clear();
  for (int i = 0; i < 4; ++i) {
    picks.push_back(PickServer(LoadBalancing::kRoundRobin, s, 0, 0, 0, &next));
  }
  EXPECT_EQ((std::vector<size_t>{0, 2, 0, 2}), picks);
}

TEST(LoadBalancerTest, PowerOfTwoChoicesTakesTheLessLoadedOfTwoDraws) {
  auto s = Servers(3);
  s[0].outstanding = 5;
  s[1].outstanding = 2;
  s[2].outstanding = 9;
  uint64_t rr = 0;
  // Draws 0 and 0: candidates 0 and 1 (the second skips the first).
  EXPECT_EQ(1u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 0, &rr));
  // Draws 0 and 1: candidates 0 and 2.
  EXPECT_EQ(0u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  // Draws 2 and 0: candidates 2 and 0.
  EXPECT_EQ(0u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 2, 0, &rr));
  // A tie goes to the first drawn.
  s[0].outstanding = s[2].outstanding = 4;
  EXPECT_EQ(2u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 2, 0, &rr));
  // Equal calls outstanding: the faster recently wins, whichever drawn first.
  s[0].outstanding = s[2].outstanding = 0;
  s[0].latency_ns = 10e6;
  s[2].latency_ns = 1e6;
  EXPECT_EQ(2u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  // ... until the fast one holds ten times the calls.
  s[2].outstanding = 10;
  EXPECT_EQ(0u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  // Latencies within twice each other: only the calls outstanding count.
  s[0].latency_ns = 1.9e6;
  s[2].latency_ns = 1e6;
  s[0].outstanding = 1;
  s[2].outstanding = 2;
  EXPECT_EQ(0u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  // And so are latencies less than a millisecond apart, whatever their ratio.
  s[0].latency_ns = 900e3;
  s[2].latency_ns = 30e3;
  EXPECT_EQ(0u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  // Not alike (2.3 ms beside 0.35): each call outstanding costs the
  // server's own latency, not the floor's millisecond, so the fast one
  // holding two calls (3 x 0.35 ms) still costs less than the idle slow one.
  s[0].latency_ns = 2.3e6;
  s[2].latency_ns = 350e3;
  s[0].outstanding = 0;
  s[2].outstanding = 2;
  EXPECT_EQ(2u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  EXPECT_EQ(2u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 2, 0, &rr));
  // ... until it holds seven (8 x 0.35 = 2.8 ms).
  s[2].outstanding = 7;
  EXPECT_EQ(0u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  // 1.6 ms (the slow one's average, decayed while it was not picked) is
  // still not like 0.35 ms: the fast one wins even drawn second.
  s[0].latency_ns = 1.6e6;
  s[2].outstanding = 0;
  EXPECT_EQ(2u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 1, &rr));
  s[0].latency_ns = s[2].latency_ns = 0;
  // An ineligible server is never drawn while another is eligible.
  s[1].eligible = false;
  for (uint64_t d1 = 0; d1 < 4; ++d1) {
    for (uint64_t d2 = 0; d2 < 4; ++d2) {
      EXPECT_NE(1u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, d1, d2, &rr));
    }
  }
}

TEST(LoadBalancerTest, AnExcludedServerIsPickedOnlyWhenNoOtherCanBe) {
  auto s = Servers(2);
  uint64_t rr = 0;
  for (LoadBalancing lb : {LoadBalancing::kRoundRobin, LoadBalancing::kPowerOfTwoChoices,
                           LoadBalancing::kConsistentHash}) {
    for (uint64_t k = 0; k < 20; ++k) {
      EXPECT_EQ(1u, PickServer(lb, s, k, k, k + 1, &rr, /*exclude=*/0)) << LoadBalancingName(lb);
    }
  }
  s[1].eligible = false;  // the only other one is ejected: the excluded is eligible
  EXPECT_EQ(0u, PickServer(LoadBalancing::kPowerOfTwoChoices, s, 0, 0, 0, &rr, 0));
}

TEST(LoadBalancerTest, WithNoServerEligibleEveryServerIsTried) {
  auto s = Servers(3);
  for (auto& v : s) v.eligible = false;
  uint64_t rr = 0;
  std::map<size_t, int> seen;
  for (int i = 0; i < 3; ++i) seen[PickServer(LoadBalancing::kRoundRobin, s, 0, 0, 0, &rr)]++;
  EXPECT_EQ(3u, seen.size());
}

// A pick among 10,000 servers looks at a few of them, not all (it ran
// under the set's lock for every call: 8.4 us a call among 1,000 servers,
// 89 us among 10,000, before; bench/server-set-microbench.cc).
TEST(LoadBalancerTest, APickAmongTenThousandServersLooksAtAFew) {
  constexpr size_t kServers = 10000;
  std::vector<ServerView> s(kServers);
  for (size_t i = 0; i < kServers; ++i) s[i].id = i;
  int looked = 0;
  const ServerViewOf view_of = [&](size_t i) {
    ++looked;
    return s[i];
  };
  uint64_t rr = 0;
  std::mt19937_64 random(7);
  for (int call = 0; call < 100; ++call) {
    looked = 0;
    const uint64_t d1 = random(), d2 = random();
    PickServer(LoadBalancing::kPowerOfTwoChoices, kServers, view_of, 0, d1, d2, &rr);
    EXPECT_EQ(2, looked) << "two choices, every server eligible";
    looked = 0;
    PickServer(LoadBalancing::kRoundRobin, kServers, view_of, 0, d1, d2, &rr);
    EXPECT_EQ(1, looked) << "round robin, every server eligible";
  }
  // Half of them ejected (every other one, as the ejected share allows at
  // most): draws that fall on an ejected server are drawn again, and only
  // eligible servers are picked.
  for (size_t i = 0; i < kServers; i += 2) s[i].eligible = false;
  int most = 0;
  for (int call = 0; call < 1000; ++call) {
    looked = 0;
    const size_t p2c = PickServer(LoadBalancing::kPowerOfTwoChoices, kServers, view_of, 0, random(),
                                  random(), &rr);
    EXPECT_TRUE(s[p2c].eligible);
    most = std::max(most, looked);
    looked = 0;
    const size_t next = PickServer(LoadBalancing::kRoundRobin, kServers, view_of, 0, 0, 0, &rr);
    EXPECT_TRUE(s[next].eligible);
    EXPECT_LE(looked, 2);
  }
  EXPECT_LE(most, 2 * kDraws) << "two choices listed the servers (or drew without end)";
  // One eligible server among 10,000: the draws fail, and the listing finds it.
  for (auto& v : s) v.eligible = false;
  s[4321].eligible = true;
  EXPECT_EQ(4321u, PickServer(LoadBalancing::kPowerOfTwoChoices, kServers, view_of, 0, random(),
                              random(), &rr));
  EXPECT_EQ(4321u, PickServer(LoadBalancing::kRoundRobin, kServers, view_of, 0, 0, 0, &rr));
}

// Rendezvous hashing over the ids in one array picks what it picks over
// the views alone, whichever servers are eligible or excluded, and asks
// for one view when the heaviest server is usable.
TEST(LoadBalancerTest, HashingOverAnArrayOfIdsPicksAsOverTheViews) {
  auto s = Servers(50);
  std::vector<uint64_t> ids;
  for (const ServerView& v : s) ids.push_back(v.id);
  int looked = 0;
  const ServerViewOf view_of = [&](size_t i) {
    ++looked;
    return s[i];
  };
  uint64_t rr = 0;
  std::mt19937_64 random(11);
  for (int round = 0; round < 3; ++round) {
    if (round == 1) {
      for (size_t i = 0; i < s.size(); i += 3) s[i].eligible = false;
    }
    if (round == 2) {
      for (auto& v : s) v.eligible = false;
    }
    for (int k = 0; k < 500; ++k) {
      const uint64_t key = random();
      const int exclude = k % 5 == 0 ? static_cast<int>(key % s.size()) : -1;
      looked = 0;
      const size_t with_ids = PickServer(LoadBalancing::kConsistentHash, s.size(), view_of, key, 0,
                                         0, &rr, exclude, ids);
      const int looked_with_ids = looked;
      EXPECT_EQ(PickServer(LoadBalancing::kConsistentHash, s, key, 0, 0, &rr, exclude), with_ids)
          << "round " << round << ", key " << key;
      if (round == 0 && exclude == -1) {
        EXPECT_EQ(1, looked_with_ids);
      }
    }
  }
}

// Rendezvous hashing: a key stays put while its server stays; one server
// of N leaving moves only its own keys (1/N of them), one joining takes
// about 1/(N+1), each from whichever server had it.
TEST(LoadBalancerTest, ConsistentHashingMovesAboutOneNthOfTheKeys) {
  constexpr int kKeys = 20000;
  auto five = Servers(5);
  uint64_t rr = 0;
  std::vector<size_t> before(kKeys);
  std::mt19937_64 rng(49);
  std::vector<uint64_t> keys(kKeys);
  for (auto& k : keys) k = rng();
  for (int i = 0; i < kKeys; ++i) {
    before[i] = PickServer(LoadBalancing::kConsistentHash, five, keys[i], 0, 0, &rr);
    EXPECT_EQ(before[i], PickServer(LoadBalancing::kConsistentHash, five, keys[i], 1, 2, &rr));
  }
  std::map<size_t, int> share;
  for (size_t b : before) share[b]++;
  for (auto [server, n] : share) EXPECT_NEAR(n, kKeys / 5, kKeys / 5 * 0.1) << server;
  // Server 2 is ejected: only its keys move.
  five[2].eligible = false;
  int moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    size_t now = PickServer(LoadBalancing::kConsistentHash, five, keys[i], 0, 0, &rr);
    if (now != before[i]) {
      ++moved;
      EXPECT_EQ(2u, before[i]) << "a key moved off a server that stayed";
    }
  }
  EXPECT_EQ(share[2], moved);
  // A sixth server joins: about 1/6 of the keys move, all to it.
  five[2].eligible = true;
  auto six = Servers(6);
  moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    size_t now = PickServer(LoadBalancing::kConsistentHash, six, keys[i], 0, 0, &rr);
    if (now != before[i]) {
      ++moved;
      EXPECT_EQ(5u, now);
    }
  }
  EXPECT_NEAR(moved, kKeys / 6, kKeys / 6 * 0.1);
}

}  // namespace
}  // namespace osprey
