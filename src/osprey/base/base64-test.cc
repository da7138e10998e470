#include "osprey/base/base64.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace osprey {
namespace {

TEST(Base64Test, EncodesAndDecodesTheRfc4648Vectors) {
  const std::vector<std::pair<std::string, std::string>> vectors = {{"", ""},
                                                                    {"f", "Zg=="},
                                                                    {"fo", "Zm8="},
                                                                    {"foo", "Zm9v"},
                                                                    {"foob", "Zm9vYg=="},
                                                                    {"fooba", "Zm9vYmE="},
                                                                    {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(encoded, Base64Encode(plain));
    std::string out = "junk";
    EXPECT_TRUE(Base64Decode(encoded, &out)) << encoded;
    EXPECT_EQ(plain, out);
  }
  std::string every;
  for (int i = 0; i < 256; ++i) every.push_back(static_cast<char>(i));
  for (size_t n = 0; n <= every.size(); n += 37) {
    std::string out;
    ASSERT_TRUE(Base64Decode(Base64Encode(every.substr(0, n)), &out));
    EXPECT_EQ(every.substr(0, n), out);
  }
}

TEST(Base64Test, RefusesAnythingButTheExactForm) {
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm=v", "=Zm9", "Zm9v\n", " Zm9v", "Zm9v ", "Zm-v",
                          "Zm_v", "Zm9v====", "Zm\0v"}) {
    std::string out = "junk";
    EXPECT_FALSE(Base64Decode(bad, &out)) << bad;
    EXPECT_TRUE(out.empty()) << bad;
  }
  std::string out;
  EXPECT_FALSE(Base64Decode(std::string_view("Zm\0v", 4), &out));
}

}  // namespace
}  // namespace osprey
