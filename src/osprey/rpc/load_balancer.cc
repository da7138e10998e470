#include "osprey/rpc/load_balancer.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace osprey {

std::optional<LoadBalancing> ParseLoadBalancing(std::string_view name) {
  if (name == "round_robin") return LoadBalancing::kRoundRobin;
  if (name == "p2c") return LoadBalancing::kPowerOfTwoChoices;
  if (name == "hash") return LoadBalancing::kConsistentHash;
  return std::nullopt;
}

const char* LoadBalancingName(LoadBalancing lb) {
  switch (lb) {
    case LoadBalancing::kRoundRobin:
      return "round_robin";
    case LoadBalancing::kPowerOfTwoChoices:
      return "p2c";
    case LoadBalancing::kConsistentHash:
      return "hash";
  }
  return "?";
}

namespace {

// SplitMix64's finalizer: a well-mixed 64-bit hash of 64 bits.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t ServerIdOf(std::string_view address) {
  // FNV-1a, then mixed: stable across processes and platforms.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : address) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return Mix(h);
}

size_t PickServer(LoadBalancing lb, std::span<const ServerView> servers, uint64_t key,
                  uint64_t draw1, uint64_t draw2, uint64_t* round_robin_next, int exclude) {
  const size_t n = servers.size();
  if (n == 1) return 0;
  // The candidates: eligible and not excluded; else eligible; else all.
  std::vector<size_t> candidates;
  candidates.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (servers[i].eligible && static_cast<int>(i) != exclude) candidates.push_back(i);
  }
  if (candidates.empty()) {
    for (size_t i = 0; i < n; ++i) {
      if (servers[i].eligible) candidates.push_back(i);
    }
  }
  if (candidates.empty()) {
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<int>(i) != exclude) candidates.push_back(i);
    }
  }
  if (candidates.empty()) candidates.push_back(static_cast<size_t>(exclude));
  switch (lb) {
    case LoadBalancing::kRoundRobin: {
      // The first candidate at or after the position, in server order, so
      // that an ejection shifts only the ejected server's turn.
      const size_t from = static_cast<size_t>(*round_robin_next % n);
      size_t best = candidates.front();
      for (size_t c : candidates) {
        if (c >= from) {
          best = c;
          break;
        }
      }
      *round_robin_next = best + 1;
      return best;
    }
    case LoadBalancing::kPowerOfTwoChoices: {
      const size_t m = candidates.size();
      if (m == 1) return candidates.front();
      const size_t a = static_cast<size_t>(draw1 % m);
      size_t b = static_cast<size_t>(draw2 % (m - 1));
      if (b >= a) ++b;  // distinct from a
      const size_t first = candidates[a], second = candidates[b];
      // Latencies within twice each other are noise between like servers,
      // and so are differences under a millisecond (a scheduler's delay
      // on a busy host is that long): then the calls outstanding decide
      // alone, so that like servers share the calls even one at a time.
      // Otherwise each call outstanding costs its server's own latency: a
      // 2 ms server beside 0.35 ms ones costs six times as much per call
      // (not as much as a 1 ms floor under the fast ones would make it).
      constexpr double kNoiseNs = 1e6;
      const double l1 = servers[first].latency_ns;
      const double l2 = servers[second].latency_ns;
      const bool alike = std::abs(l1 - l2) < kNoiseNs || (l1 <= 2 * l2 && l2 <= 2 * l1);
      auto cost = [&](size_t i, double latency) {
        return static_cast<double>(servers[i].outstanding + 1) * (alike ? 1.0 : latency);
      };
      return cost(second, l2) < cost(first, l1) ? second : first;
    }
    case LoadBalancing::kConsistentHash: {
      size_t best = candidates.front();
      uint64_t best_weight = 0;
      bool any = false;
      for (size_t c : candidates) {
        const uint64_t w = Mix(key ^ Mix(servers[c].id));
        if (!any || w > best_weight) {
          best = c;
          best_weight = w;
          any = true;
        }
      }
      return best;
    }
  }
  return candidates.front();
}

}  // namespace osprey
