// Microbenchmark of a call's pick and end in a server set, by the set's
// size and the balancing policy: what the client spends per call on
// choosing a server of a fleet (issue 49), under the set's one lock.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "osprey/rpc/server_set.h"

namespace osprey {
namespace {

void BM_PickAndEnd(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  ServerSet::Options options;
  options.lb = static_cast<LoadBalancing>(state.range(1));
  std::string target;
  for (int i = 0; i < n; ++i) {
    target += (i > 0 ? "," : "") + std::string("127.0.") + std::to_string(i / 250) + "." +
              std::to_string(i % 250 + 1) + ":7051";
  }
  std::shared_ptr<ServerSet> set;
  if (!ServerSet::Make(target, options, &set).ok()) {
    state.SkipWithError("the set did not parse");
    return;
  }
  // Every server answered twice: latencies known, as in a running client.
  for (int i = 0; i < 2 * n; ++i) {
    ServerSet::EntryPtr e = set->Pick(static_cast<uint64_t>(i), nullptr, false);
    set->Ended(e, ServerSet::Outcome::kAnswered, MonoDelta::FromMicroseconds(100));
  }
  uint64_t key = 0;
  for (auto _ : state) {
    ServerSet::EntryPtr e = set->Pick(key += 7919, nullptr, false);
    set->Ended(e, ServerSet::Outcome::kAnswered, MonoDelta::FromMicroseconds(100));
  }
  state.SetLabel(LoadBalancingName(options.lb));
}
BENCHMARK(BM_PickAndEnd)
    ->ArgsProduct({{3, 100, 1000, 10000},
                   {static_cast<int>(LoadBalancing::kPowerOfTwoChoices),
                    static_cast<int>(LoadBalancing::kRoundRobin),
                    static_cast<int>(LoadBalancing::kConsistentHash)}});

}  // namespace
}  // namespace osprey
