// PreAuthLimits: the bounds on what connections not yet negotiated hold,
// cell by cell.
#include "osprey/transport/pre_auth_limits.h"

#include <gtest/gtest.h>

#include <vector>

namespace osprey::transport {
namespace {

Sockaddr At(const std::string& s) {
  Sockaddr a;
  EXPECT_TRUE(Sockaddr::Parse(s, &a).ok()) << s;
  return a;
}

std::shared_ptr<PreAuthLimits> Limits(size_t total, size_t per_address, size_t bytes) {
  return std::make_shared<PreAuthLimits>(PreAuthLimits::Options{total, per_address, bytes});
}

TEST(PreAuthLimitsTest, OneAddressGetsNoMoreThanItsShareAndOthersStillGetIn) {
  auto limits = Limits(10, 3, 1000);
  std::vector<PreAuthLimits::Ticket> held;
  std::string why;
  for (int i = 0; i < 3; ++i) {
    held.push_back(limits->Admit(At("127.0.0.2:" + std::to_string(1000 + i)), &why));
    ASSERT_TRUE(held.back().held());
  }
  // The same address, another port: refused, saying why.
  PreAuthLimits::Ticket t = limits->Admit(At("127.0.0.2:2000"), &why);
  EXPECT_FALSE(t.held());
  EXPECT_NE(std::string::npos, why.find("from 127.0.0.2")) << why;
  // Another address: admitted.
  t = limits->Admit(At("127.0.0.1:2000"), &why);
  EXPECT_TRUE(t.held());
  EXPECT_EQ(4u, limits->connections());
  EXPECT_EQ(3u, limits->connections_from("127.0.0.2"));
  // One of the three negotiated: its address may have another.
  held[0].Release();
  EXPECT_EQ(2u, limits->connections_from("127.0.0.2"));
  EXPECT_TRUE(limits->Admit(At("127.0.0.2:2001"), &why).held());
}

TEST(PreAuthLimitsTest, TheTotalBoundsEveryAddressTogether) {
  auto limits = Limits(4, 4, 1000);
  std::vector<PreAuthLimits::Ticket> held;
  std::string why;
  for (int i = 0; i < 4; ++i) {
    held.push_back(limits->Admit(At("127.0.0." + std::to_string(i + 1) + ":1"), &why));
    ASSERT_TRUE(held.back().held());
  }
  EXPECT_FALSE(limits->Admit(At("127.0.0.9:1"), &why).held());
  EXPECT_NE(std::string::npos, why.find("4 connections are negotiating")) << why;
  // Unix-socket peers count in the total only.
  held.clear();
  for (int i = 0; i < 4; ++i) {
    held.push_back(limits->Admit(At("unix:@pre-auth-test"), &why));
    ASSERT_TRUE(held.back().held());
  }
  EXPECT_FALSE(limits->Admit(At("unix:@pre-auth-test"), &why).held());
  held.clear();
  EXPECT_EQ(0u, limits->connections());
}

TEST(PreAuthLimitsTest, BytesAreChargedAsTheyChangeAndAChargePastTheBudgetIsRefused) {
  auto limits = Limits(10, 10, 1000);
  std::string why;
  PreAuthLimits::Ticket a = limits->Admit(At("127.0.0.1:1"), &why);
  PreAuthLimits::Ticket b = limits->Admit(At("127.0.0.2:1"), &why);
  EXPECT_TRUE(a.Charge(600));
  EXPECT_TRUE(b.Charge(400));  // exactly the budget
  EXPECT_EQ(1000u, limits->bytes());
  EXPECT_FALSE(b.Charge(401));  // one byte past it: refused, unchanged
  EXPECT_EQ(1000u, limits->bytes());
  EXPECT_TRUE(a.Charge(100));  // a frame was consumed: less
  EXPECT_TRUE(b.Charge(900));
  EXPECT_EQ(1000u, limits->bytes());
  // Opening gives everything back; a released ticket charges nothing.
  a.Release();
  EXPECT_EQ(900u, limits->bytes());
  EXPECT_TRUE(a.Charge(5000));
  EXPECT_EQ(900u, limits->bytes());
  {
    PreAuthLimits::Ticket moved = std::move(b);
    EXPECT_FALSE(b.held());
    EXPECT_EQ(900u, limits->bytes());
  }
  EXPECT_EQ(0u, limits->bytes());
  EXPECT_EQ(0u, limits->connections());
}

}  // namespace
}  // namespace osprey::transport
