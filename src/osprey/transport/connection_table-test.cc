// ConnectionTable on its own, driven on a real reactor's thread (the only
// thread a connection may be asked about).
#include "osprey/transport/connection_table.h"

#include <gtest/gtest.h>

#include "osprey/base/countdown_latch.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/reactor.h"

namespace osprey::transport {
namespace {

// Runs `body` on a started reactor's thread and waits for it.
void OnReactor(const std::function<void(Reactor*)>& body) {
  auto reactor = std::make_shared<Reactor>("test", ConnectionOptions(), nullptr);
  ASSERT_TRUE(reactor->Start().ok());
  CountDownLatch done(1);
  ASSERT_TRUE(reactor->Schedule([&] {
    body(reactor.get());
    done.CountDown();
  }));
  done.Wait();
  reactor->Shutdown();
}

std::shared_ptr<Connection> NewConnection(Reactor* r, Connection::Role role, uint16_t port) {
  return std::make_shared<Connection>(r, role, Socket(), Sockaddr::Loopback(port), "user");
}

TEST(ConnectionTableTest, ClientsByKeyServersByIdentityClosedKeptUntilReleased) {
  OnReactor([](Reactor* r) {
    ConnectionTable t;
    ConnectionKey a{Sockaddr::Loopback(1), "alice", ""}, b{Sockaddr::Loopback(1), "bob", ""};
    auto ca = NewConnection(r, Connection::Role::kClient, 1);
    auto cb = NewConnection(r, Connection::Role::kClient, 1);
    auto server = NewConnection(r, Connection::Role::kServer, 2);
    t.AddClient(a, ca);
    t.AddClient(b, cb);
    t.AddServer(server);
    EXPECT_EQ(3u, t.size());
    EXPECT_EQ(ca.get(), t.FindClient(a));
    EXPECT_EQ(cb.get(), t.FindClient(b));  // same address, other user: its own
    EXPECT_EQ(nullptr, t.FindClient({Sockaddr::Loopback(3), "alice", ""}));

    // Removed: gone from both indexes, but alive until released.
    std::weak_ptr<Connection> weak = ca;
    Connection* raw = ca.get();
    ca.reset();
    t.Remove(raw);
    EXPECT_EQ(nullptr, t.FindClient(a));
    EXPECT_EQ(2u, t.size());
    EXPECT_FALSE(weak.expired());
    t.ReleaseClosed();
    EXPECT_TRUE(weak.expired());
    t.Remove(raw);  // twice: harmless

    // A client connection that shut down is not found; a new one replaces it.
    cb->Shutdown(Status::NetworkError("test"));
    EXPECT_EQ(nullptr, t.FindClient(b));
    auto cb2 = NewConnection(r, Connection::Role::kClient, 1);
    t.AddClient(b, cb2);
    EXPECT_EQ(cb2.get(), t.FindClient(b));

    int seen = 0;
    t.ForEach([&](const Connection&) { ++seen; });
    EXPECT_EQ(static_cast<int>(t.size()), seen);
    EXPECT_EQ(t.size(), t.Snapshot().size());
    t.Clear();
    EXPECT_EQ(0u, t.size());
    server->Shutdown(Status::Aborted("test over"));
    cb2->Shutdown(Status::Aborted("test over"));
  });
}

}  // namespace
}  // namespace osprey::transport
