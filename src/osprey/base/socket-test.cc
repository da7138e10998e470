#include "osprey/base/socket.h"

#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <vector>

namespace osprey {
namespace {

// A listening socket on 127.0.0.1 with a kernel-chosen port.
void Listen(Socket* listener, Sockaddr* bound) {
  Sockaddr any_port = Sockaddr::Loopback(0);
  ASSERT_TRUE(listener->Init(any_port).ok());
  ASSERT_TRUE(listener->SetReuseAddr(true).ok());
  Status s = listener->Bind(any_port);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(listener->Listen(16).ok());
  ASSERT_TRUE(listener->GetLocalAddress(bound).ok());
  ASSERT_NE(bound->port(), 0);
}

// A connected pair: `client` connected to `server` through a listener.
void ConnectPair(Socket* client, Socket* server) {
  Socket listener;
  Sockaddr addr;
  ASSERT_NO_FATAL_FAILURE(Listen(&listener, &addr));
  ASSERT_TRUE(client->Init(addr).ok());
  Status s = client->Connect(addr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Sockaddr remote;
  s = listener.Accept(server, &remote, /*nonblocking=*/false);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Sockaddr client_local;
  ASSERT_TRUE(client->GetLocalAddress(&client_local).ok());
  EXPECT_EQ(remote, client_local);
}

TEST(SocketTest, ConnectAcceptWriteRead) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  EXPECT_TRUE(client.SetNoDelay(true).ok());

  Sockaddr peer, server_local;
  ASSERT_TRUE(client.GetPeerAddress(&peer).ok());
  ASSERT_TRUE(server.GetLocalAddress(&server_local).ok());
  EXPECT_EQ(peer, server_local);
  EXPECT_TRUE(peer.IsLoopback());

  const std::string msg = "hello, server";
  ASSERT_TRUE(client.WriteAll(reinterpret_cast<const uint8_t*>(msg.data()), msg.size()).ok());
  std::string got(msg.size(), '\0');
  ASSERT_TRUE(server.ReadAll(reinterpret_cast<uint8_t*>(got.data()), got.size()).ok());
  EXPECT_EQ(got, msg);

  // Writev in the other direction, gathered from two pieces.
  std::string a = "two ", b = "pieces";
  iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  size_t n = 0;
  ASSERT_TRUE(server.Writev(iov, 2, &n).ok());
  EXPECT_EQ(n, a.size() + b.size());
  std::string back(n, '\0');
  ASSERT_TRUE(client.ReadAll(reinterpret_cast<uint8_t*>(back.data()), back.size()).ok());
  EXPECT_EQ(back, "two pieces");
}

TEST(SocketTest, NonBlockingReadWithNoDataReturnsZeroBytes) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  ASSERT_TRUE(server.SetNonBlocking(true).ok());
  uint8_t buf[16];
  size_t n = 99;
  Status s = server.Read(buf, sizeof(buf), &n);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(n, 0u);

  // Data that arrives is then read; blocking mode again waits for it.
  ASSERT_TRUE(client.WriteAll(reinterpret_cast<const uint8_t*>("x"), 1).ok());
  ASSERT_TRUE(server.SetNonBlocking(false).ok());
  s = server.Read(buf, sizeof(buf), &n);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(buf[0], 'x');
}

TEST(SocketTest, ReadAfterPeerClosedIsNetworkError) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  client.Close();
  EXPECT_FALSE(client.is_open());
  uint8_t buf[4];
  size_t n = 0;
  Status s = server.Read(buf, sizeof(buf), &n);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_EQ(n, 0u);
  EXPECT_NE(s.ToString().find("closed by peer"), std::string::npos) << s.ToString();
  EXPECT_TRUE(server.ReadAll(buf, sizeof(buf)).IsNetworkError());
}

TEST(SocketTest, NonBlockingAcceptWithNoneWaitingIsEagain) {
  Socket listener;
  Sockaddr addr;
  ASSERT_NO_FATAL_FAILURE(Listen(&listener, &addr));
  ASSERT_TRUE(listener.SetNonBlocking(true).ok());
  Socket conn;
  Status s = listener.Accept(&conn, nullptr, /*nonblocking=*/true);
  EXPECT_TRUE(s.IsNetworkError());
  EXPECT_EQ(s.posix_errno(), EAGAIN) << s.ToString();
  EXPECT_FALSE(conn.is_open());
}

TEST(SocketTest, NonBlockingConnectCompletes) {
  Socket listener;
  Sockaddr addr;
  ASSERT_NO_FATAL_FAILURE(Listen(&listener, &addr));
  Socket client;
  ASSERT_TRUE(client.Init(addr).ok());
  ASSERT_TRUE(client.SetNonBlocking(true).ok());
  bool in_progress = false;
  Status s = client.Connect(addr, &in_progress);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // On loopback the connect may finish at once or be in progress; accepting
  // it completes the handshake either way.
  Socket server;
  ASSERT_TRUE(listener.Accept(&server, nullptr, false).ok());
  s = client.GetSocketError();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(SocketTest, ConnectToClosedPortIsRefusedWithErrnoText) {
  // Find a port nobody listens on: bind one, note it, close it.
  Sockaddr addr;
  {
    Socket probe;
    ASSERT_TRUE(probe.Init(Sockaddr::Loopback(0)).ok());
    ASSERT_TRUE(probe.Bind(Sockaddr::Loopback(0)).ok());
    ASSERT_TRUE(probe.GetLocalAddress(&addr).ok());
  }
  Socket client;
  ASSERT_TRUE(client.Init(addr).ok());
  Status s = client.Connect(addr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsNetworkError());
  EXPECT_EQ(s.posix_errno(), ECONNREFUSED);
  EXPECT_NE(s.ToString().find("Connection refused"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find(addr.ToString()), std::string::npos) << s.ToString();
}

TEST(SocketTest, BindToAddressInUseNamesAddressAndErrno) {
  Socket a;
  Sockaddr addr;
  ASSERT_NO_FATAL_FAILURE(Listen(&a, &addr));
  Socket b;
  ASSERT_TRUE(b.Init(addr).ok());
  Status s = b.Bind(addr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.posix_errno(), EADDRINUSE);
  EXPECT_NE(s.ToString().find("Address already in use"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find(addr.ToString()), std::string::npos) << s.ToString();
}

TEST(SocketTest, MoveTransfersOwnership) {
  Socket a;
  ASSERT_TRUE(a.Init(Sockaddr::Loopback(0)).ok());
  int fd = a.fd();
  Socket b(std::move(a));
  EXPECT_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(b.fd(), fd);
  Socket c;
  c = std::move(b);
  EXPECT_EQ(c.fd(), fd);
  EXPECT_EQ(c.Release(), fd);
  EXPECT_FALSE(c.is_open());
  Socket d(fd);  // take it back so it is closed
  d.Close();
  d.Close();  // closing twice is harmless
  EXPECT_FALSE(d.is_open());
}

TEST(SocketTest, KeepaliveSettingsReachTheKernel) {
  Socket s;
  ASSERT_TRUE(s.Init(Sockaddr::Loopback(0)).ok());
  TcpKeepalive k;
  k.idle = MonoDelta::FromSeconds(7);
  k.interval = MonoDelta::FromMilliseconds(1500);  // rounds up to 2 s
  k.count = 4;
  k.user_timeout = MonoDelta::FromMilliseconds(2500);
  ASSERT_TRUE(s.SetTcpKeepalive(k).ok());
  auto get = [&](int level, int name) {
    int v = -1;
    socklen_t len = sizeof(v);
    EXPECT_EQ(0, getsockopt(s.fd(), level, name, &v, &len));
    return v;
  };
  EXPECT_EQ(1, get(SOL_SOCKET, SO_KEEPALIVE));
  EXPECT_EQ(7, get(IPPROTO_TCP, TCP_KEEPIDLE));
  EXPECT_EQ(2, get(IPPROTO_TCP, TCP_KEEPINTVL));
  EXPECT_EQ(4, get(IPPROTO_TCP, TCP_KEEPCNT));
  EXPECT_EQ(2500, get(IPPROTO_TCP, TCP_USER_TIMEOUT));
  EXPECT_EQ(MonoDelta::FromSeconds(7 + 4 * 1.5), k.DetectionBound());

  k.enabled = false;
  k.user_timeout = MonoDelta();
  ASSERT_TRUE(s.SetTcpKeepalive(k).ok());
  EXPECT_EQ(0, get(SOL_SOCKET, SO_KEEPALIVE));
  EXPECT_EQ(0, get(IPPROTO_TCP, TCP_USER_TIMEOUT));
}

}  // namespace
}  // namespace osprey
