// HttpHostCheck cell by cell: which Host headers name this server (issue 40,
// finding 3: DNS rebinding).
#include "osprey/transport/http_host_check.h"

#include <gtest/gtest.h>

namespace osprey::transport {
namespace {

Sockaddr Addr(const std::string& s) {
  Sockaddr a;
  EXPECT_TRUE(Sockaddr::Parse(s, &a).ok()) << s;
  return a;
}

TEST(HttpHostCheckTest, HostPartParsesEveryForm) {
  std::string h;
  ASSERT_TRUE(HttpHostCheck::HostPart("127.0.0.1:8050", &h));
  EXPECT_EQ("127.0.0.1", h);
  ASSERT_TRUE(HttpHostCheck::HostPart("[::1]:8050", &h));
  EXPECT_EQ("::1", h);
  ASSERT_TRUE(HttpHostCheck::HostPart("[::1]", &h));
  EXPECT_EQ("::1", h);
  ASSERT_TRUE(HttpHostCheck::HostPart("DB-1.Example.COM.", &h));
  EXPECT_EQ("db-1.example.com", h);
  for (const char* bad : {"", ":80", "[::1", "[::1]x", "::1", "a b", "a/b", "user@host"}) {
    EXPECT_FALSE(HttpHostCheck::HostPart(bad, &h)) << bad;
  }
}

TEST(HttpHostCheckTest, OnlyNamesOfThisServerPass) {
  HttpHostCheck check({"metrics.example.com"}, "db-1");
  const Sockaddr v4 = Addr("127.0.0.1:8050"), v6 = Addr("[::1]:8050");
  const Sockaddr lan = Addr("10.1.2.3:8050");
  struct Cell {
    std::string host;
    Sockaddr local;
    bool ok;
  };
  for (const Cell& c : std::vector<Cell>{
           {"127.0.0.1:8050", v4, true},
           {"127.0.0.1", v4, true},  // the port is not compared
           {"127.0.0.2:8050", v4, false},
           {"[::1]:8050", v6, true},
           {"[0:0::1]:8050", v6, true},  // the same address, spelt otherwise
           {"localhost:8050", v4, true},
           {"LOCALHOST.", v6, true},
           {"localhost", lan, false},  // not a loopback connection
           {"10.1.2.3", lan, true},
           {"db-1:8050", lan, true},  // this machine's own name
           {"metrics.example.com", lan, true},
           {"Metrics.Example.Com.:1", lan, true},
           {"evil.example:8050", v4, false},  // the rebinding attacker's name
           {"evil.example", lan, false},
           {"[::1", v6, false},
           // A dual-stack listener sees IPv4 peers at mapped addresses.
           {"127.0.0.1:8050", Addr("[::ffff:127.0.0.1]:8050"), true},
           {"localhost", Addr("[::ffff:127.0.0.1]:8050"), true},
           {"10.1.2.3", Addr("[::ffff:10.1.2.3]:8050"), true},
       }) {
    Status s = check.Check(true, c.host, c.local);
    EXPECT_EQ(c.ok, s.ok()) << c.host << " on " << c.local.ToString() << ": " << s.ToString();
    if (!c.ok) {
      EXPECT_TRUE(s.IsNotAuthorized());
    }
  }
  EXPECT_NE(std::string::npos,
            check.Check(true, "evil.example", v4).message().find("set_http_allowed_hosts"));
  // No Host header (HTTP/1.0): no browser sent it.
  EXPECT_TRUE(check.Check(false, "", v4).ok());
  EXPECT_TRUE(check.Check(true, "evil.example", Addr("unix:@x")).ok());
}

TEST(HttpHostCheckTest, AStarAllowsEveryHost) {
  HttpHostCheck check({"*"}, "");
  EXPECT_TRUE(check.Check(true, "evil.example", Addr("127.0.0.1:1")).ok());
}

}  // namespace
}  // namespace osprey::transport
