#include "osprey/base/ip_network.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace osprey {
namespace {

Sockaddr Addr(const std::string& host_port) {
  Sockaddr a;
  Status s = Sockaddr::Parse(host_port, &a);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return a;
}

IpNetwork Net(const std::string& cidr) {
  IpNetwork n;
  Status s = IpNetwork::Parse(cidr, &n);
  EXPECT_TRUE(s.ok()) << cidr << ": " << s.ToString();
  return n;
}

TEST(IpNetworkTest, ParsesCidrAndDropsTheBitsPastTheLength) {
  struct Cell {
    const char* text;
    const char* canonical;
  };
  for (const Cell& c : std::vector<Cell>{{"10.0.0.0/8", "10.0.0.0/8"},
                                         {"10.1.2.3/8", "10.0.0.0/8"},
                                         {"172.31.255.255/12", "172.16.0.0/12"},
                                         {"198.18.0.7/32", "198.18.0.7/32"},
                                         {"0.0.0.0/0", "0.0.0.0/0"},
                                         {"1.2.3.4/0", "0.0.0.0/0"},
                                         {"::1/128", "::1/128"},
                                         {"fe80::1/10", "fe80::/10"},
                                         {"fdff:1::/8", "fd00::/8"},
                                         {"::/0", "::/0"}}) {
    EXPECT_EQ(c.canonical, Net(c.text).ToString()) << c.text;
  }
}

TEST(IpNetworkTest, RefusesWhatIsNotCidrAndSaysWhy) {
  struct Cell {
    const char* text;
    const char* why;
  };
  for (const Cell& c : std::vector<Cell>{{"10.0.0.0", "not in CIDR notation"},
                                         {"", "not in CIDR notation"},
                                         {"10.0.0.0/", "the length after '/'"},
                                         {"10.0.0.0/33", "IPv4 block's length is at most 32"},
                                         {"::/129", "IPv6 block's length is at most 128"},
                                         {"10.0.0.0/08", "the length after '/'"},
                                         {"10.0.0.0/+8", "the length after '/'"},
                                         {"10.0.0.0/8 ", "the length after '/'"},
                                         {"10.0.0.0/1000", "the length after '/'"},
                                         {" 10.0.0.0/8", "is not an IPv4 or IPv6 address"},
                                         {"localhost/8", "is not an IPv4 or IPv6 address"},
                                         {"10.0.0/8", "is not an IPv4 or IPv6 address"},
                                         {"/8", "is not an IPv4 or IPv6 address"}}) {
    IpNetwork n;
    Status s = IpNetwork::Parse(c.text, &n);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find(c.why), std::string::npos) << c.text << ": " << s.ToString();
    EXPECT_NE(s.message().find("'" + std::string(c.text) + "'"), std::string::npos) << s.ToString();
  }
}

TEST(IpNetworkTest, ContainsExactlyTheAddressesOfTheBlock) {
  struct Cell {
    const char* network;
    const char* address;
    bool in;
  };
  for (const Cell& c :
       std::vector<Cell>{{"10.0.0.0/8", "10.255.1.2:1", true},
                         {"10.0.0.0/8", "11.0.0.1:1", false},
                         {"172.16.0.0/12", "172.31.255.255:1", true},
                         {"172.16.0.0/12", "172.32.0.0:1", false},
                         {"172.16.0.0/12", "172.15.255.255:1", false},
                         {"198.18.0.7/32", "198.18.0.7:1", true},
                         {"198.18.0.7/32", "198.18.0.6:1", false},
                         {"0.0.0.0/0", "8.8.8.8:1", true},
                         {"0.0.0.0/0", "[2001:db8::1]:1", false},  // a family of its own
                         {"::/0", "[2001:db8::1]:1", true},
                         {"::/0", "8.8.8.8:1", false},
                         {"fe80::/10", "[febf::1]:1", true},
                         {"fe80::/10", "[fec0::1]:1", false},
                         {"::1/128", "[::1]:1", true},
                         {"::1/128", "[::2]:1", false},
                         // A dual-stack listener's IPv4 peer is its IPv4 address.
                         {"127.0.0.0/8", "[::ffff:127.0.0.1]:1", true},
                         {"::ffff:0:0/96", "[::ffff:127.0.0.1]:1", false},
                         {"10.0.0.0/8", "[::ffff:8.8.8.8]:1", false},
                         {"0.0.0.0/0", "unix:/tmp/x.sock", false},
                         {"::/0", "unix:@name", false}}) {
    EXPECT_EQ(c.in, Net(c.network).Contains(Addr(c.address)))
        << c.network << " contains " << c.address;
  }
}

TEST(IpNetworkTest, KudusDefaultIsParsedAndHoldsThePrivateBlocks) {
  std::vector<IpNetwork> nets;
  ASSERT_TRUE(IpNetwork::ParseList(KuduDefaultTrustedSubnets(), &nets).ok());
  auto any = [&](const std::string& a) { return InAnyOf(nets, Addr(a)); };
  for (const char* in : {"127.0.0.1:1", "10.2.3.4:1", "172.20.0.1:1", "192.168.1.1:1",
                         "169.254.1.1:1", "[::1]:1", "[fe80::1]:1", "[fd12::1]:1"}) {
    EXPECT_TRUE(any(in)) << in;
  }
  for (const char* out : {"8.8.8.8:1", "198.18.0.1:1", "[2001:db8::1]:1", "172.32.0.1:1"}) {
    EXPECT_FALSE(any(out)) << out;
  }
}

TEST(IpNetworkTest, ParseListNamesTheFirstEntryThatDoesNotParse) {
  std::vector<IpNetwork> nets = {Net("10.0.0.0/8")};
  Status s = IpNetwork::ParseList({"10.0.0.0/8", "10.0.0.0/40", "nonsense"}, &nets);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'10.0.0.0/40'"), std::string::npos) << s.ToString();
  EXPECT_EQ(1u, nets.size());  // untouched
}

TEST(IpNetworkTest, AnInterfacesMaskGivesItsLength) {
  auto v4 = [](const char* a) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    EXPECT_EQ(1, inet_pton(AF_INET, a, &s.sin_addr));
    return s;
  };
  sockaddr_in addr = v4("198.18.0.1"), mask = v4("255.255.255.0");
  IpNetwork n = IpNetwork::FromAddressAndMask(reinterpret_cast<const sockaddr*>(&addr),
                                              reinterpret_cast<const sockaddr*>(&mask));
  EXPECT_EQ("198.18.0.0/24", n.ToString());
  mask = v4("255.240.0.0");
  n = IpNetwork::FromAddressAndMask(reinterpret_cast<const sockaddr*>(&addr),
                                    reinterpret_cast<const sockaddr*>(&mask));
  EXPECT_EQ("198.16.0.0/12", n.ToString());
  mask = v4("255.255.255.255");
  n = IpNetwork::FromAddressAndMask(reinterpret_cast<const sockaddr*>(&addr),
                                    reinterpret_cast<const sockaddr*>(&mask));
  EXPECT_EQ("198.18.0.1/32", n.ToString());

  sockaddr_in6 a6{}, m6{};
  a6.sin6_family = m6.sin6_family = AF_INET6;
  ASSERT_EQ(1, inet_pton(AF_INET6, "fd12:3456::9", &a6.sin6_addr));
  ASSERT_EQ(1, inet_pton(AF_INET6, "ffff:ffff:ffff:ffff::", &m6.sin6_addr));
  n = IpNetwork::FromAddressAndMask(reinterpret_cast<const sockaddr*>(&a6),
                                    reinterpret_cast<const sockaddr*>(&m6));
  EXPECT_EQ("fd12:3456::/64", n.ToString());
}

TEST(IpNetworkTest, LoopbackIsAmongThisHostsNetworks) {
  std::vector<IpNetwork> nets;
  ASSERT_TRUE(LocalIpNetworks(&nets).ok());
  bool found = false;
  for (const IpNetwork& n : nets) found |= n.Contains(Sockaddr::Loopback(1));
  EXPECT_TRUE(found) << "lo (127.0.0.1/8) should be up";
}

}  // namespace
}  // namespace osprey
