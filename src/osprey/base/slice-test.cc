#include "osprey/base/slice.h"

#include <gtest/gtest.h>

#include <string>

namespace osprey {
namespace {

TEST(SliceTest, ConstructionAndAccess) {
  Slice empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.ToString(), "");

  std::string s("hello");
  Slice a(s);
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(a[1], 'e');
  EXPECT_EQ(a.ToString(), "hello");
  EXPECT_EQ(a.ToStringView(), "hello");
  EXPECT_EQ(static_cast<const void*>(a.cdata()), static_cast<const void*>(s.data()));
  EXPECT_EQ(Slice("hello"), a);
  EXPECT_EQ(Slice(std::string_view("hello")), a);
}

TEST(SliceTest, EmbeddedNulsAreKept) {
  std::string s("\0root\0", 6);
  Slice a(s);
  EXPECT_EQ(a.size(), 6u);
  EXPECT_EQ(a.ToString(), s);
  // The const char* constructor stops at the first NUL, by design.
  EXPECT_EQ(Slice(s.c_str()).size(), 0u);
}

TEST(SliceTest, PrefixTruncateSub) {
  Slice a("abcdef");
  a.remove_prefix(2);
  EXPECT_EQ(a.ToString(), "cdef");
  EXPECT_TRUE(a.starts_with("cd"));
  EXPECT_TRUE(a.starts_with(""));
  EXPECT_FALSE(a.starts_with("cdefg"));
  EXPECT_FALSE(a.starts_with("d"));
  EXPECT_EQ(a.sub(1, 2).ToString(), "de");
  a.truncate(1);
  EXPECT_EQ(a.ToString(), "c");
}

TEST(SliceTest, Equality) {
  EXPECT_EQ(Slice(), Slice(""));
  EXPECT_FALSE(Slice("ab") == Slice("abc"));
  EXPECT_FALSE(Slice("ab") == Slice("ac"));
}

TEST(SliceTest, DebugStringEscapesAndTruncates) {
  std::string s("a\x01\\b\xff", 5);
  EXPECT_EQ(Slice(s).ToDebugString(), "a\\x01\\x5cb\\xff");
  EXPECT_EQ(Slice("abcdef").ToDebugString(3), "abc...");
  EXPECT_EQ(Slice("abc").ToDebugString(3), "abc");
}

}  // namespace
}  // namespace osprey
