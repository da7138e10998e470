// Microbenchmark of a call's pick and end in a server set, by the set's
// size and the balancing policy: what the client spends per call on
// choosing a server of a fleet (issue 49), under the set's one lock.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "osprey/rpc/server_set.h"

namespace osprey {
namespace {

std::vector<std::string> Addresses(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    out.push_back("127.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + ":7051");
  }
  return out;
}

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

// One server joins a set of N (an etcd watch event): the whole list is
// handed over, and the entries of those that stay are kept.
void BM_OneServerJoins(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<std::string> before = Addresses(n), after = Addresses(n + 1);
  std::shared_ptr<ServerSet> set;
  if (!ServerSet::Make("etcd://127.0.0.1:1/unused", ServerSet::Options(), &set).ok()) {
    state.SkipWithError("no set");
    return;
  }
  bool joined = false;
  for (auto _ : state) {
    set->ReplaceServers(joined ? before : after);
    joined = !joined;
  }
}
BENCHMARK(BM_OneServerJoins)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace osprey
