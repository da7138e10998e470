// EscapeForLog: what a peer's text may keep in a log line, and what it
// may not (issue 47, finding 6).
#include "osprey/base/log_escape.h"

#include <gtest/gtest.h>

#include <string>

namespace osprey {
namespace {

TEST(LogEscapeTest, AForgedLogLineStaysOnTheLineItCameIn) {
  const std::string forged = "PLAIN\nE1206 00:00:00.000000 1 auth.cc:42] fake\r\n";
  const std::string escaped = EscapeForLog(forged);
  EXPECT_EQ("PLAIN\\nE1206 00:00:00.000000 1 auth.cc:42] fake\\r\\n", escaped);
  EXPECT_EQ(std::string::npos, escaped.find('\n'));
  EXPECT_EQ(std::string::npos, escaped.find('\r'));
}

TEST(LogEscapeTest, ControlBytesAreEscapedAndPrintableTextIsKept) {
  EXPECT_EQ("", EscapeForLog(""));
  EXPECT_EQ("GSSAPI user@EXAMPLE.COM ~!", EscapeForLog("GSSAPI user@EXAMPLE.COM ~!"));
  EXPECT_EQ("a\\tb", EscapeForLog("a\tb"));
  EXPECT_EQ("\\x00\\x01\\x1b[31m\\x7f", EscapeForLog(std::string("\0\x01\x1b[31m\x7f", 8)));
}

TEST(LogEscapeTest, ValidUtf8IsKeptAndEverythingElseAbove0x7fIsEscaped) {
  EXPECT_EQ("J\xc3\xbcrgen \xe6\x97\xa5 \xf0\x9f\x99\x82",
            EscapeForLog("J\xc3\xbcrgen \xe6\x97\xa5 \xf0\x9f\x99\x82"));
  // A lone CSI (8-bit control), and CSI as UTF-8 (U+009B).
  EXPECT_EQ("\\x9b2J", EscapeForLog("\x9b"
                                    "2J"));
  EXPECT_EQ("\\xc2\\x9b2J", EscapeForLog("\xc2\x9b"
                                         "2J"));
  EXPECT_EQ("\\xc2\\x85", EscapeForLog("\xc2\x85"));  // NEL
  // Line and paragraph separators.
  EXPECT_EQ("a\\xe2\\x80\\xa8b\\xe2\\x80\\xa9", EscapeForLog("a\xe2\x80\xa8"
                                                             "b\xe2\x80\xa9"));
  // Overlong, surrogate, past U+10FFFF, cut short.
  EXPECT_EQ("\\xc0\\xaf", EscapeForLog("\xc0\xaf"));
  EXPECT_EQ("\\xe0\\x80\\xaf", EscapeForLog("\xe0\x80\xaf"));
  EXPECT_EQ("\\xed\\xa0\\x80", EscapeForLog("\xed\xa0\x80"));
  EXPECT_EQ("\\xf4\\x90\\x80\\x80", EscapeForLog("\xf4\x90\x80\x80"));
  EXPECT_EQ("\\xe6\\x97", EscapeForLog("\xe6\x97"));
  EXPECT_EQ("\\xff\\xfe", EscapeForLog("\xff\xfe"));
}

TEST(LogEscapeTest, EscapingTwiceChangesNothing) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "x\\ny \xc3\xbc \xe2\x80\xa8";
  const std::string once = EscapeForLog(all);
  EXPECT_EQ(once, EscapeForLog(once));
  for (char c : once) {
    const auto b = static_cast<unsigned char>(c);
    EXPECT_TRUE(b >= 0x20 && b != 0x7f) << "byte " << int{b} << " kept";
  }
}

}  // namespace
}  // namespace osprey
