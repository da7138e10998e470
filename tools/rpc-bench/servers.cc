#include "servers.h"

#include <glog/logging.h>

#include <map>

namespace osprey::bench {

std::unique_ptr<kudu::rpc_test::CalculatorServiceProxy> NewProxy(
    std::shared_ptr<Messenger> messenger, const Settings& cfg) {
  if (cfg.target.empty()) {
    return std::make_unique<kudu::rpc_test::CalculatorServiceProxy>(std::move(messenger),
                                                                    cfg.server);
  }
  auto p =
      std::make_unique<kudu::rpc_test::CalculatorServiceProxy>(std::move(messenger), cfg.target);
  if (cfg.server_set) {
    p->set_load_balancing(cfg.lb);
    Status s = p->set_hedging(cfg.hedging);  // valid: ParseHedging
    CHECK(s.ok()) << s.ToString();
  }
  return p;
}

size_t ServerIndex::Of(const Sockaddr& addr) {
  // Lock-free for a server already seen: every call of the run asks.
  size_t n = size_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    if (addrs_[i] == addr) return i;
  }
  std::lock_guard<std::mutex> l(mu_);
  n = size_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    if (addrs_[i] == addr) return i;
  }
  if (n == kMax - 1) {
    other_.store(true, std::memory_order_relaxed);
    return kMax - 1;
  }
  addrs_[n] = addr;
  size_.store(n + 1, std::memory_order_release);
  return n;
}

std::vector<std::string> ServerIndex::Names() const {
  std::vector<std::string> out;
  size_t n = size_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) out.push_back(addrs_[i].ToString());
  if (other_.load(std::memory_order_relaxed)) out.push_back("other");
  return out;
}

std::vector<ServerLine> SumServers(const std::vector<const Proxy*>& proxies) {
  std::vector<ServerLine> out;
  std::map<std::string, size_t> at;
  for (const auto& p : proxies) {
    for (const Proxy::ServerReport& r : p->servers()) {
      auto [it, added] = at.emplace(r.address, out.size());
      if (added) out.push_back({r.address});
      ServerLine& line = out[it->second];
      line.calls += r.calls;
      line.ejected = line.ejected || r.ejected;
      line.draining = line.draining || r.draining;
    }
  }
  return out;
}

HedgeStats SumHedges(const std::vector<const Proxy*>& proxies) {
  HedgeStats sum;
  for (const Proxy* p : proxies) {
    HedgeStats h = p->hedging_stats();
    sum.eligible += h.eligible;
    sum.sent += h.sent;
    sum.won += h.won;
    sum.refused_by_cap += h.refused_by_cap;
    sum.no_other_server += h.no_other_server;
  }
  return sum;
}

HedgeStats HedgesSince(const HedgeStats& start, HedgeStats end) {
  end.eligible -= start.eligible;
  end.sent -= start.sent;
  end.won -= start.won;
  end.refused_by_cap -= start.refused_by_cap;
  end.no_other_server -= start.no_other_server;
  return end;
}

std::vector<ServerLine> ServersSince(const std::vector<ServerLine>& start,
                                     std::vector<ServerLine> end) {
  for (ServerLine& e : end) {
    for (const ServerLine& s : start) {
      if (s.address == e.address) e.calls -= s.calls;
    }
  }
  return end;
}

}  // namespace osprey::bench
