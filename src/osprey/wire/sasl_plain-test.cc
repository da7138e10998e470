#include "osprey/wire/sasl_plain.h"

#include <gtest/gtest.h>

#include <string>

namespace osprey::wire {
namespace {

TEST(SaslPlainTest, EncodeIsAuthzidNulAuthcidNulPassword) {
  EXPECT_EQ(EncodeSaslPlain({"", "alice", "secret"}), std::string("\0alice\0secret", 13));
  EXPECT_EQ(EncodeSaslPlain({"admin", "bob", ""}), std::string("admin\0bob\0", 10));
}

TEST(SaslPlainTest, RoundTrip) {
  SaslPlainCredentials in{"zid", "user", "p@ss word"};
  SaslPlainCredentials out;
  ASSERT_TRUE(DecodeSaslPlain(Slice(EncodeSaslPlain(in)), &out).ok());
  EXPECT_EQ(out.authzid, in.authzid);
  EXPECT_EQ(out.authcid, in.authcid);
  EXPECT_EQ(out.password, in.password);
}

TEST(SaslPlainTest, KuduClientToken) {
  // What Kudu's client sends: empty authzid, the OS user, empty password.
  SaslPlainCredentials c;
  ASSERT_TRUE(DecodeSaslPlain(Slice(std::string("\0root\0", 6)), &c).ok());
  EXPECT_EQ(c.authzid, "");
  EXPECT_EQ(c.authcid, "root");
  EXPECT_EQ(c.password, "");
}

TEST(SaslPlainTest, LongestPartsAccepted) {
  std::string max(255, 'a');
  SaslPlainCredentials c;
  EXPECT_TRUE(DecodeSaslPlain(Slice(EncodeSaslPlain({max, max, max})), &c).ok());
  EXPECT_EQ(c.password.size(), 255u);
}

void ExpectMalformed(const std::string& token, const std::string& want) {
  SCOPED_TRACE(Slice(token).ToDebugString());
  SaslPlainCredentials c{"untouched", "untouched", "untouched"};
  Status s = DecodeSaslPlain(Slice(token), &c);
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(want), std::string::npos) << s.ToString();
  // Nothing half-decoded leaks out.
  EXPECT_EQ(c.authcid, "untouched");
}

TEST(SaslPlainTest, MalformedTokens) {
  ExpectMalformed("", "found 0 NUL separators");
  ExpectMalformed("root", "found 0 NUL separators");
  ExpectMalformed(std::string("\0root", 5), "found 1 NUL separators");
  ExpectMalformed(std::string("\0root\0pw\0", 9), "found 3 NUL separators");
  ExpectMalformed(std::string("\0\0pw", 4), "empty user name");
  ExpectMalformed(std::string("\0\0", 2), "empty user name");
  ExpectMalformed(EncodeSaslPlain({"", std::string(256, 'u'), ""}), "longer than 255 bytes");
  ExpectMalformed(EncodeSaslPlain({"", "u", std::string(256, 'p')}), "longer than 255 bytes");
  ExpectMalformed(EncodeSaslPlain({std::string(256, 'z'), "u", ""}), "longer than 255 bytes");
}

}  // namespace
}  // namespace osprey::wire
