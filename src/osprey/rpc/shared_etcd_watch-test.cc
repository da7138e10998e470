// The table of shared etcd watches, cell by cell: which watch a proxy gets,
// which idle ones Trim stops. Against a port where nothing listens: each
// watch's first read fails at once and its thread keeps trying, which is
// all these cells need.
#include "osprey/rpc/shared_etcd_watch.h"

#include <gtest/gtest.h>

#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"

namespace osprey {
namespace {

std::string Unreachable(const std::string& prefix) {
  Sockaddr addr;
  Socket probe;  // bound, not listening: connections are refused
  EXPECT_TRUE(probe.Init(Sockaddr::Loopback(0)).ok());
  EXPECT_TRUE(probe.Bind(Sockaddr::Loopback(0)).ok());
  EXPECT_TRUE(probe.GetLocalAddress(&addr).ok());
  return "etcd://" + addr.ToString() + prefix;
}

std::shared_ptr<SharedEtcdWatch> GetWatch(EtcdWatches* table, const std::string& key) {
  EtcdTarget target;
  EXPECT_TRUE(EtcdTarget::Parse(key, &target).ok()) << key;
  return table->Get(key, target, EtcdWatchTimeouts());
}

TEST(EtcdWatchesTest, OneWatchPerTargetAndTheLongestIdleStopsFirst) {
  EtcdWatches table(/*max_idle=*/2);
  const std::string a = Unreachable("/a"), b = Unreachable("/b"), c = Unreachable("/c");
  auto wa = GetWatch(&table, a);
  EXPECT_EQ(wa, GetWatch(&table, a)) << "one watch per target";
  auto wb = GetWatch(&table, b);
  auto wc = GetWatch(&table, c);
  EXPECT_NE(wa, wb);
  int calls = 0;
  const auto count = [&calls](const ParsedServers& servers) {
    EXPECT_TRUE(servers.empty());  // etcd never answered
    ++calls;
  };
  const uint64_t sa = wa->Subscribe(count, MonoDelta::FromSeconds(1));
  const uint64_t sb = wb->Subscribe(count, MonoDelta::FromSeconds(1));
  const uint64_t sc = wc->Subscribe(count, MonoDelta::FromSeconds(1));
  EXPECT_EQ(3, calls) << "each subscriber is told the servers known at once";
  const uint64_t sa2 = wa->Subscribe(count, MonoDelta::FromSeconds(1));
  EXPECT_EQ(2u, wa->subscribers());
  // Idle in the order b, a, c.
  wb->Unsubscribe(sb);
  wa->Unsubscribe(sa);
  table.Trim();
  EXPECT_EQ(3u, table.size()) << "a has a subscriber left: only b is idle";
  wa->Unsubscribe(sa2);
  wc->Unsubscribe(sc);
  table.Trim();  // three idle, two kept: b, idle longest, goes
  EXPECT_EQ(2u, table.size());
  EXPECT_NE(wb, GetWatch(&table, b)) << "b was stopped: a new watch";
  EXPECT_EQ(wa, GetWatch(&table, a));
  EXPECT_EQ(wc, GetWatch(&table, c));
  // A watch a set subscribes to is never stopped under it.
  const uint64_t held = wc->Subscribe(count, MonoDelta::FromSeconds(1));
  table.Trim(0);
  EXPECT_EQ(1u, table.size());
  EXPECT_EQ(wc, GetWatch(&table, c));
  wc->Unsubscribe(held);
}

}  // namespace
}  // namespace osprey
