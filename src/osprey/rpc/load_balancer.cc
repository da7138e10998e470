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

namespace {

// Draw `k` of a pick from `draw`, below `m`: the first as given, the
// later ones mixed from it.
size_t DrawBelow(uint64_t draw, int k, size_t m) {
  const uint64_t d = k == 0 ? draw : Mix(draw + static_cast<uint64_t>(k));
  return static_cast<size_t>(d % m);
}

// Two choices between drawn servers a and b: the one of lower cost.
size_t Cheaper(size_t first, const ServerView& a, size_t second, const ServerView& b) {
  // Latencies within twice each other are noise between like servers,
  // and so are differences under a millisecond (a scheduler's delay on a
  // busy host is that long): then the calls outstanding decide alone, so
  // that like servers share the calls even one at a time. Otherwise each
  // call outstanding costs its server's own latency: a 2 ms server beside
  // 0.35 ms ones costs six times as much per call (not as much as a 1 ms
  // floor under the fast ones would make it).
  constexpr double kNoiseNs = 1e6;
  const double l1 = a.latency_ns, l2 = b.latency_ns;
  const bool alike = std::abs(l1 - l2) < kNoiseNs || (l1 <= 2 * l2 && l2 <= 2 * l1);
  auto cost = [&](const ServerView& v, double latency) {
    return static_cast<double>(v.outstanding + 1) * (alike ? 1.0 : latency);
  };
  return cost(b, l2) < cost(a, l1) ? second : first;
}

}  // namespace

size_t PickServer(LoadBalancing lb, std::span<const ServerView> servers, uint64_t key,
                  uint64_t draw1, uint64_t draw2, uint64_t* round_robin_next, int exclude) {
  return PickServer(
      lb, servers.size(), [servers](size_t i) { return servers[i]; }, key, draw1, draw2,
      round_robin_next, exclude);
}

size_t PickServer(LoadBalancing lb, size_t n, const ServerViewOf& view_of, uint64_t key,
                  uint64_t draw1, uint64_t draw2, uint64_t* round_robin_next, int exclude,
                  std::span<const uint64_t> ids) {
  if (n == 1) return 0;
  const auto usable = [exclude](size_t i, const ServerView& v) {
    return v.eligible && static_cast<int>(i) != exclude;
  };
  switch (lb) {
    case LoadBalancing::kRoundRobin: {
      // The first usable server at or after the position, in server order
      // (wrapping), so that an ejection shifts only the ejected one's turn.
      const size_t from = static_cast<size_t>(*round_robin_next % n);
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (from + k) % n;
        if (usable(i, view_of(i))) {
          *round_robin_next = i + 1;
          return i;
        }
      }
      break;  // none usable: the fallback below
    }
    case LoadBalancing::kPowerOfTwoChoices: {
      // Two distinct usable servers, each drawn uniformly among all and
      // drawn again when not usable: uniform among the usable ones.
      size_t a = n, b = n;
      ServerView va, vb;
      for (int k = 0; k < kDraws && a == n; ++k) {
        const size_t i = DrawBelow(draw1, k, n);
        ServerView v = view_of(i);
        if (usable(i, v)) {
          a = i;
          va = v;
        }
      }
      for (int k = 0; a != n && k < kDraws && b == n; ++k) {
        size_t i = DrawBelow(draw2, k, n - 1);
        if (i >= a) ++i;  // distinct from a
        ServerView v = view_of(i);
        if (usable(i, v)) {
          b = i;
          vb = v;
        }
      }
      if (b != n) return Cheaper(a, va, b, vb);
      break;  // few or none usable: the fallback below
    }
    case LoadBalancing::kConsistentHash: {
      if (ids.size() == n) {
        // The heaviest of all, weighed in one array: when it is usable it
        // is the heaviest usable one too, and no other view is needed.
        size_t heaviest = 0;
        uint64_t heaviest_weight = 0;
        for (size_t i = 0; i < n; ++i) {
          const uint64_t w = Mix(key ^ Mix(ids[i]));
          if (i == 0 || w > heaviest_weight) {
            heaviest = i;
            heaviest_weight = w;
          }
        }
        if (usable(heaviest, view_of(heaviest))) return heaviest;
      }
      // The highest weight among usable servers; else among eligible ones
      // (the excluded one among them); else among all but the excluded.
      struct Best {
        size_t index = 0;
        uint64_t weight = 0;
        bool any = false;
        void Offer(size_t i, uint64_t w) {
          if (!any || w > weight) *this = {i, w, true};
        }
      } usable_best, eligible_best, other_best;
      for (size_t i = 0; i < n; ++i) {
        const ServerView v = view_of(i);
        const uint64_t w = Mix(key ^ Mix(v.id));
        if (usable(i, v)) usable_best.Offer(i, w);
        if (v.eligible) eligible_best.Offer(i, w);
        if (static_cast<int>(i) != exclude) other_best.Offer(i, w);
      }
      for (const Best& b : {usable_best, eligible_best, other_best}) {
        if (b.any) return b.index;
      }
      return static_cast<size_t>(exclude);
    }
  }
  // The candidates, listed: usable; else eligible; else all but the
  // excluded; else the excluded.
  std::vector<size_t> candidates;
  std::vector<ServerView> views(n);
  for (size_t i = 0; i < n; ++i) {
    views[i] = view_of(i);
    if (usable(i, views[i])) candidates.push_back(i);
  }
  if (candidates.empty()) {
    for (size_t i = 0; i < n; ++i) {
      if (views[i].eligible) candidates.push_back(i);
    }
  }
  if (candidates.empty()) {
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<int>(i) != exclude) candidates.push_back(i);
    }
  }
  if (candidates.empty()) candidates.push_back(static_cast<size_t>(exclude));
  if (lb == LoadBalancing::kRoundRobin) {
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
  const size_t m = candidates.size();
  if (m == 1) return candidates.front();
  const size_t a = static_cast<size_t>(draw1 % m);
  size_t b = static_cast<size_t>(draw2 % (m - 1));
  if (b >= a) ++b;
  return Cheaper(candidates[a], views[candidates[a]], candidates[b], views[candidates[b]]);
}

}  // namespace osprey
