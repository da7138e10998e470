// The Authorization header of the pages' Kerberos login, cell by cell.
// Tickets themselves are checked against a real KDC in tests/kerberos-test.cc
// (KerberosHttpTest).
#include "osprey/transport/http_negotiate.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace osprey::transport {
namespace {

TEST(HttpNegotiateTest, TakesTheTokenOfANegotiateHeaderInAnyCase) {
  struct Cell {
    const char* header;
    const char* token;
  };
  for (const Cell& c : std::vector<Cell>{{"Negotiate Zm9vYmFy", "foobar"},
                                         {"negotiate Zm9vYmFy", "foobar"},
                                         {"NEGOTIATE   Zm9v", "foo"},
                                         {"Negotiate YQ==", "a"}}) {
    std::string token;
    Status s = ParseNegotiateHeader(c.header, &token);
    ASSERT_TRUE(s.ok()) << c.header << ": " << s.ToString();
    EXPECT_EQ(c.token, token) << c.header;
  }
}

TEST(HttpNegotiateTest, RefusesOtherSchemesAndTokensThatAreNotBase64) {
  struct Cell {
    const char* header;
    const char* why;
  };
  for (const Cell& c : std::vector<Cell>{{"Basic YWxpY2U6c2VjcmV0", "not 'Negotiate <token>'"},
                                         {"Negotiate", "not 'Negotiate <token>'"},
                                         {"NegotiateZm9v", "not 'Negotiate <token>'"},
                                         {"Negotiate ", "not base64"},
                                         {"Negotiate Zm9v!", "not base64"},
                                         {"Negotiate Zm9v ", "not base64"},
                                         {"Negotiate Zm9", "not base64"},
                                         {"Bearer eyJhbGciOiJub25lIn0", "not 'Negotiate <token>'"},
                                         {"", "not 'Negotiate <token>'"}}) {
    std::string token;
    Status s = ParseNegotiateHeader(c.header, &token);
    ASSERT_FALSE(s.ok()) << c.header;
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find(c.why)) << c.header << ": " << s.ToString();
  }
}

// Who may read the pages once logged in: by the principal's local name
// (its first component when krb5.conf has no auth_to_local rule for it).
TEST(HttpNegotiateTest, OnlyTheListedUsersReadThePagesWhenThereIsAList) {
  EXPECT_TRUE(CheckHttpReader(nullptr, "mallory@EXAMPLE.COM").ok()) << "no list: anyone";
  const std::set<std::string> readers{"alice", "ops"};
  EXPECT_TRUE(CheckHttpReader(&readers, "alice@EXAMPLE.COM").ok());
  EXPECT_TRUE(CheckHttpReader(&readers, "alice/admin@EXAMPLE.COM").ok());
  EXPECT_TRUE(CheckHttpReader(&readers, "ops/db-1.example.com@EXAMPLE.COM").ok());
  Status s = CheckHttpReader(&readers, "bob/admin@EXAMPLE.COM");
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_EQ(
      "user 'bob' (Kerberos principal bob/admin@EXAMPLE.COM) may not read these pages: "
      "they are for alice, ops (MessengerBuilder::set_http_readers)",
      s.message());
  // A user name is not a prefix: "alic" and "alice2" are others.
  EXPECT_FALSE(CheckHttpReader(&readers, "alice2@EXAMPLE.COM").ok());
  EXPECT_FALSE(CheckHttpReader(&readers, "alic@EXAMPLE.COM").ok());
}

}  // namespace
}  // namespace osprey::transport
