// Copied from Osprey's tools/rpc-bench/arrivals.h (namespace renamed), so the
// brpc client draws its arrivals exactly as rpc-bench does.
// Arrivals: when an open-loop generator starts its calls. A schedule of
// phases, each a duration at a constant rate; within a phase the gaps are
// all equal (-arrivals=uniform) or exponential (-arrivals=poisson, a
// Poisson process, from a seeded std::mt19937_64 so a run can be repeated).
// One generator thread owns one Arrivals.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace overload {

struct Phase {
  double seconds;  // +infinity: until stopped
  double rate;     // calls per second, > 0
};

class Arrivals {
 public:
  // `share`: this generator's part of each phase's rate (1 / generators).
  // `offset`: 0 to 1, where in the first uniform gap the first call falls,
  // so that generators of equal share interleave rather than coincide.
  Arrivals(std::vector<Phase> phases, double share, bool poisson, uint64_t seed, double offset)
      : phases_(std::move(phases)), share_(share), poisson_(poisson), rng_(seed) {
    phase_end_ns_ = EndOf(0);
    if (!poisson_ && !phases_.empty()) t_ns_ = (offset - 1) * Gap(0);
  }

  // The next call's time in nanoseconds from the schedule's start; -1 after
  // the last phase. Each step moves on by a gap or to a phase's end, so it
  // ends within the number of phases.
  int64_t Next() {
    while (k_ < phases_.size()) {
      double t = t_ns_ + Gap(k_);
      if (t < phase_end_ns_) {
        t_ns_ = t;
        return static_cast<int64_t>(std::max(t, 0.0));
      }
      // The rest of this phase holds no call: the next phase starts anew.
      t_ns_ = phase_end_ns_;
      ++k_;
      if (k_ < phases_.size()) phase_end_ns_ = EndOf(k_);
    }
    return -1;
  }

  // The schedule's length in nanoseconds (+infinity if a phase is endless).
  static double TotalNanos(const std::vector<Phase>& phases) {
    double total = 0;
    for (const Phase& p : phases) total += p.seconds * 1e9;
    return total;
  }

 private:
  double Gap(size_t k) {
    double mean = 1e9 / (phases_[k].rate * share_);
    return poisson_ ? exp_(rng_) * mean : mean;
  }
  double EndOf(size_t k) const {
    if (k >= phases_.size()) return 0;
    double end = 0;
    for (size_t i = 0; i <= k; ++i) end += phases_[i].seconds * 1e9;
    return end;
  }

  const std::vector<Phase> phases_;
  const double share_;
  const bool poisson_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> exp_{1.0};
  size_t k_ = 0;
  double t_ns_ = 0;
  double phase_end_ns_ = 0;
};

}  // namespace overload
