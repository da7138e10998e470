#include "osprey/base/sockaddr.h"

#include <gtest/gtest.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace osprey {
namespace {

// Expects Parse to fail with InvalidArgument whose message contains `want`.
void ExpectParseError(const std::string& input, const std::string& want) {
  SCOPED_TRACE("input '" + input + "'");
  Sockaddr a;
  Status s = Sockaddr::Parse(input, &a);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find(want), std::string::npos) << s.ToString();
}

TEST(SockaddrTest, DefaultAndLoopback) {
  Sockaddr any;
  EXPECT_EQ(any.ToString(), "0.0.0.0:0");
  EXPECT_FALSE(any.IsLoopback());
  Sockaddr lo = Sockaddr::Loopback(8080);
  EXPECT_EQ(lo.ToString(), "127.0.0.1:8080");
  EXPECT_EQ(lo.host(), "127.0.0.1");
  EXPECT_EQ(lo.port(), 8080);
  EXPECT_EQ(lo.family(), AF_INET);
  EXPECT_TRUE(lo.IsLoopback());
  lo.set_port(9);
  EXPECT_EQ(lo.port(), 9);
}

TEST(SockaddrTest, ParseIpv4) {
  Sockaddr a;
  ASSERT_TRUE(Sockaddr::Parse("10.1.2.3:7051", &a).ok());
  EXPECT_EQ(a.family(), AF_INET);
  EXPECT_EQ(a.host(), "10.1.2.3");
  EXPECT_EQ(a.port(), 7051);
  EXPECT_EQ(a.ToString(), "10.1.2.3:7051");
  EXPECT_EQ(a.addrlen(), sizeof(sockaddr_in));
  EXPECT_FALSE(a.IsLoopback());
  ASSERT_TRUE(Sockaddr::Parse("127.0.0.1:0", &a).ok());
  EXPECT_TRUE(a.IsLoopback());
  ASSERT_TRUE(Sockaddr::Parse("127.0.0.1:65535", &a).ok());
  EXPECT_EQ(a.port(), 65535);
}

TEST(SockaddrTest, ParseBracketedIpv6) {
  Sockaddr a;
  ASSERT_TRUE(Sockaddr::Parse("[::1]:8000", &a).ok());
  EXPECT_EQ(a.family(), AF_INET6);
  EXPECT_EQ(a.host(), "::1");
  EXPECT_EQ(a.port(), 8000);
  EXPECT_EQ(a.ToString(), "[::1]:8000");
  EXPECT_EQ(a.addrlen(), sizeof(sockaddr_in6));
  EXPECT_TRUE(a.IsLoopback());
}

TEST(SockaddrTest, ParseLocalhostName) {
  // localhost resolves to 127.0.0.1 or ::1 depending on /etc/hosts; either
  // is loopback.
  Sockaddr a;
  Status s = Sockaddr::Parse("localhost:7051", &a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(a.IsLoopback()) << a.ToString();
  EXPECT_EQ(a.port(), 7051);
}

TEST(SockaddrTest, ParseErrorsSayWhatIsWrong) {
  ExpectParseError("", "empty address");
  ExpectParseError("127.0.0.1", "expected HOST:PORT");
  ExpectParseError("localhost", "expected HOST:PORT");
  ExpectParseError("127.0.0.1:", "port '' is not a number");
  ExpectParseError("127.0.0.1:http", "port 'http' is not a number");
  ExpectParseError("127.0.0.1:65536", "port '65536' is not a number from 0 to 65535");
  ExpectParseError("127.0.0.1:-1", "port '-1'");
  ExpectParseError("127.0.0.1:80x", "port '80x'");
  ExpectParseError("::1:8000", "IPv6 hosts must be bracketed");
  ExpectParseError("fe80::1", "IPv6 hosts must be bracketed");
  ExpectParseError("[::1:8000", "missing ']'");
  ExpectParseError("[::1]", "expected ':PORT' after ']'");
  ExpectParseError("[::1]8000", "expected ':PORT' after ']'");
  ExpectParseError(":8000", "empty host");
  ExpectParseError("[]:8000", "empty host");
}

TEST(SockaddrTest, HostOfTakesTheHostPartUnresolved) {
  EXPECT_EQ("db-1", Sockaddr::HostOf("db-1:7050"));
  EXPECT_EQ("127.0.0.1", Sockaddr::HostOf("127.0.0.1:7050"));
  EXPECT_EQ("::1", Sockaddr::HostOf("[::1]:7050"));
  EXPECT_EQ("fe80::1", Sockaddr::HostOf("[fe80::1"));  // unclosed: the rest
  EXPECT_EQ("", Sockaddr::HostOf("unix:/run/x.sock"));
  EXPECT_EQ("", Sockaddr::HostOf("unix:@name"));
  EXPECT_EQ("db-1", Sockaddr::HostOf("db-1"));  // no port: the whole
}

TEST(SockaddrTest, UnresolvableHostIsNetworkError) {
  // ".invalid" is reserved (RFC 2606) and never resolves.
  Sockaddr a;
  Status s = Sockaddr::Parse("no-such-host.invalid:80", &a);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_NE(s.message().find("no-such-host.invalid"), std::string::npos) << s.ToString();
}

TEST(SockaddrTest, EqualityAndHash) {
  Sockaddr a, b, c;
  ASSERT_TRUE(Sockaddr::Parse("127.0.0.1:1", &a).ok());
  ASSERT_TRUE(Sockaddr::Parse("127.0.0.1:1", &b).ok());
  ASSERT_TRUE(Sockaddr::Parse("127.0.0.1:2", &c).ok());
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == c);
  EXPECT_EQ(a.Hash(), b.Hash());
  Sockaddr v6;
  ASSERT_TRUE(Sockaddr::Parse("[::1]:1", &v6).ok());
  EXPECT_FALSE(a == v6);
  std::unordered_set<Sockaddr> set{a, b, c, v6};
  EXPECT_EQ(set.size(), 3u);
}

TEST(SockaddrTest, FromNativeRoundTrip) {
  Sockaddr a = Sockaddr::Loopback(4242);
  Sockaddr b = Sockaddr::FromNative(a.addr(), a.addrlen());
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.ToString(), "127.0.0.1:4242");
}

TEST(SockaddrTest, UnixPathsAndAbstractNames) {
  Sockaddr a;
  ASSERT_TRUE(Sockaddr::Parse("unix:/run/osprey/x.sock", &a).ok());
  EXPECT_TRUE(a.is_unix());
  EXPECT_EQ("/run/osprey/x.sock", a.unix_path());
  EXPECT_EQ("unix:/run/osprey/x.sock", a.ToString());
  EXPECT_EQ(0, a.port());
  a.set_port(9);  // nothing to set
  EXPECT_EQ("unix:/run/osprey/x.sock", a.ToString());
  EXPECT_TRUE(a.IsLoopback());  // never leaves the host

  Sockaddr b;
  ASSERT_TRUE(Sockaddr::Parse("unix:@osprey-abstract", &b).ok());
  EXPECT_EQ("@osprey-abstract", b.unix_path());
  EXPECT_EQ("unix:@osprey-abstract", b.ToString());
  EXPECT_FALSE(a == b);

  Sockaddr a2;
  ASSERT_TRUE(Sockaddr::Parse(a.ToString(), &a2).ok());
  EXPECT_TRUE(a == a2);
  EXPECT_EQ(a.Hash(), a2.Hash());
  Sockaddr round = Sockaddr::FromNative(a.addr(), a.addrlen());
  EXPECT_TRUE(round == a);

  ExpectParseError("unix:", "expected unix:/PATH or unix:@NAME");
  ExpectParseError("unix:@", "expected unix:/PATH or unix:@NAME");
  ExpectParseError("unix:/" + std::string(200, 'x'), "longer than 107 bytes");
}

TEST(SockaddrTest, ResolveAllGivesEveryAddressOnce) {
  std::vector<Sockaddr> all;
  ASSERT_TRUE(Sockaddr::ResolveAll("localhost:7050", &all).ok());
  ASSERT_FALSE(all.empty());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(all[i].IsLoopback()) << all[i].ToString();
    EXPECT_EQ(7050, all[i].port());
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(all[i] == all[j]) << all[i].ToString();
  }
  Status s = Sockaddr::ResolveAll("no-such-host.invalid:1", &all);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_TRUE(all.empty());
}

}  // namespace
}  // namespace osprey
