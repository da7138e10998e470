// rpc-bench against a set of servers (-server_address HOST:PORT,HOST:PORT
// or dns:NAME:PORT, balanced by -lb): making the proxy, and counting calls
// per server for the reports. Any thread unless said.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "load.h"
#include "osprey/rpc/proxy.h"
#include "rpc_bench.osprey.h"

namespace osprey::bench {

// The proxy the run's calls go through: built from the Sockaddr for one
// address, exactly as before sets existed (the fast path stays the
// measured one), else from the target text, balanced by cfg.lb.
std::unique_ptr<kudu::rpc_test::CalculatorServiceProxy> NewProxy(
    std::shared_ptr<Messenger> messenger, const Settings& cfg);

// Small dense numbers for the servers calls went to, so that per-window
// counts are arrays: a server keeps its number when it restarts on its
// address. The first kMax - 1 servers have their own; later ones share the
// last ("other").
class ServerIndex {
 public:
  static constexpr size_t kMax = 16;
  size_t Of(const Sockaddr& addr);
  // The servers seen, by number ("other" last if it was used).
  std::vector<std::string> Names() const;

 private:
  std::mutex mu_;                // taken only to add a server
  std::atomic<size_t> size_{0};  // entries below it never change
  Sockaddr addrs_[kMax - 1];
  std::atomic<bool> other_{false};
};

// Proxy::servers() of every proxy, summed by address in the set's order;
// empty for one address. Main thread.
std::vector<ServerLine> SumServers(const std::vector<const Proxy*>& proxies);
inline std::vector<ServerLine> SumServers(
    const std::vector<std::unique_ptr<kudu::rpc_test::CalculatorServiceProxy>>& proxies) {
  std::vector<const Proxy*> p;
  for (const auto& q : proxies) p.push_back(q.get());
  return SumServers(p);
}
// Proxy::hedging_stats() of every proxy, summed; and those of an interval.
HedgeStats SumHedges(const std::vector<const Proxy*>& proxies);
inline HedgeStats SumHedges(
    const std::vector<std::unique_ptr<kudu::rpc_test::CalculatorServiceProxy>>& proxies) {
  std::vector<const Proxy*> p;
  for (const auto& q : proxies) p.push_back(q.get());
  return SumHedges(p);
}
HedgeStats HedgesSince(const HedgeStats& start, HedgeStats end);
// `end` with `start`'s calls taken away: the attempts of an interval.
std::vector<ServerLine> ServersSince(const std::vector<ServerLine>& start,
                                     std::vector<ServerLine> end);

}  // namespace osprey::bench
