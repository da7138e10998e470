#include "osprey/wire/connection_header.h"

#include <gtest/gtest.h>

#include <string>

namespace osprey::wire {
namespace {

Status Validate(const std::string& bytes, ConnectionHeaderError* kind) {
  return ValidateConnectionHeader(Slice(bytes), kind);
}

TEST(ConnectionHeaderTest, BytesAreHrpcVersion9) {
  EXPECT_EQ(ConnectionHeaderBytes(), std::string("hrpc\x09\x00\x00", 7));
  EXPECT_EQ(ConnectionHeaderBytes().size(), kConnectionHeaderSize);
}

TEST(ConnectionHeaderTest, Valid) {
  ConnectionHeaderError kind = ConnectionHeaderError::kBadMagic;
  EXPECT_TRUE(Validate(ConnectionHeaderBytes(), &kind).ok());
  EXPECT_EQ(kind, ConnectionHeaderError::kNone);
  // Only the first 7 bytes count: a frame may follow in the same read.
  EXPECT_TRUE(Validate(ConnectionHeaderBytes() + "\x00\x00\x00\x19", nullptr).ok());
  // Service class and auth protocol are unused.
  EXPECT_TRUE(Validate(std::string("hrpc\x09\x01\x02", 7), nullptr).ok());
}

TEST(ConnectionHeaderTest, BadMagic) {
  ConnectionHeaderError kind;
  Status s = Validate(std::string("hrpx\x09\x00\x00", 7), &kind);
  ASSERT_TRUE(s.IsCorruption());
  EXPECT_EQ(kind, ConnectionHeaderError::kBadMagic);
  EXPECT_NE(s.message().find("bad connection header magic 'hrpx'"), std::string::npos)
      << s.ToString();
  // Binary garbage is shown escaped.
  s = Validate(std::string("\x16\x03\x01\x02\x00\x01\x00", 7), &kind);
  EXPECT_EQ(kind, ConnectionHeaderError::kBadMagic);
  EXPECT_NE(s.message().find("\\x16\\x03"), std::string::npos) << s.ToString();
}

TEST(ConnectionHeaderTest, HttpRequestIsNamed) {
  for (const char* req : {"GET / HTTP/1.1\r\n", "POST /rpc HTTP/1.1", "HEAD / HTTP/1.0",
                          "PUT /x HTTP/1.1", "OPTIONS * HTTP/1.1"}) {
    SCOPED_TRACE(req);
    ConnectionHeaderError kind;
    Status s = Validate(req, &kind);
    ASSERT_TRUE(s.IsCorruption());
    EXPECT_EQ(kind, ConnectionHeaderError::kHttpRequest);
    EXPECT_NE(s.message().find("HTTP"), std::string::npos) << s.ToString();
  }
  Status s = Validate("GET / HTTP/1.1", nullptr);
  EXPECT_NE(s.message().find("HTTP client on the RPC port"), std::string::npos) << s.ToString();
}

TEST(ConnectionHeaderTest, WrongVersion) {
  ConnectionHeaderError kind;
  Status s = Validate(std::string("hrpc\x08\x00\x00", 7), &kind);
  ASSERT_TRUE(s.IsCorruption());
  EXPECT_EQ(kind, ConnectionHeaderError::kVersionMismatch);
  EXPECT_NE(s.message().find("unsupported RPC protocol version 8"), std::string::npos)
      << s.ToString();
}

TEST(ConnectionHeaderTest, TooShort) {
  ConnectionHeaderError kind;
  Status s = Validate("hrpc", &kind);
  ASSERT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("too short"), std::string::npos) << s.ToString();
}

TEST(ConnectionHeaderTest, PrefixInvalidLetsServerRejectEarly) {
  const std::string good = ConnectionHeaderBytes();
  for (size_t n = 0; n <= good.size(); ++n) {
    EXPECT_FALSE(ConnectionHeaderPrefixInvalid(Slice(good.data(), n))) << n;
  }
  EXPECT_TRUE(ConnectionHeaderPrefixInvalid(Slice("G")));
  EXPECT_TRUE(ConnectionHeaderPrefixInvalid(Slice("GET")));
  EXPECT_TRUE(ConnectionHeaderPrefixInvalid(Slice("hrpx")));
  EXPECT_TRUE(ConnectionHeaderPrefixInvalid(Slice(std::string("hrpc\x0a", 5))));
}

}  // namespace
}  // namespace osprey::wire
