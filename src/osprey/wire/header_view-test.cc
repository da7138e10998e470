// The hand-parsed header views must read exactly what protobuf reads.
#include "osprey/wire/header_view.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "osprey/wire/frame.h"
#include "osprey/wire/frame_decoder.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::wire {
namespace {

RequestHeader RandomRequestHeader(std::mt19937* rng) {
  std::uniform_int_distribution<int> coin(0, 1);
  RequestHeader h;
  h.set_call_id(static_cast<int32_t>((*rng)()));
  if (coin(*rng)) {
    h.mutable_remote_method()->set_service_name(std::string((*rng)() % 40, 's'));
    h.mutable_remote_method()->set_method_name(std::string((*rng)() % 10, 'm'));
  }
  if (coin(*rng)) h.set_timeout_millis((*rng)());
  for (int i = (*rng)() % 3; i > 0; --i) h.add_required_feature_flags((*rng)() % 5);
  for (int i = (*rng)() % 4; i > 0; --i) h.add_sidecar_offsets((*rng)());
  return h;
}

void ExpectSame(const RequestHeader& pb, const RequestHeaderView& v) {
  EXPECT_EQ(pb.call_id(), v.call_id());
  EXPECT_EQ(pb.has_remote_method(), v.has_remote_method());
  EXPECT_EQ(pb.remote_method().service_name(), v.remote_method().service_name());
  EXPECT_EQ(pb.remote_method().method_name(), v.remote_method().method_name());
  EXPECT_EQ(pb.has_timeout_millis(), v.has_timeout_millis());
  EXPECT_EQ(pb.timeout_millis(), v.timeout_millis());
  ASSERT_EQ(pb.sidecar_offsets_size(), v.sidecar_offsets_size());
  for (int i = 0; i < pb.sidecar_offsets_size(); ++i) {
    EXPECT_EQ(pb.sidecar_offsets(i), v.sidecar_offsets()[i]);
  }
  ASSERT_EQ(static_cast<size_t>(pb.required_feature_flags_size()),
            v.required_feature_flags().size());
}

TEST(HeaderViewTest, RandomRequestHeadersReadAsProtobufReadsThem) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    RequestHeader pb = RandomRequestHeader(&rng);
    std::string bytes = pb.SerializeAsString();
    RequestHeaderView v;
    ASSERT_TRUE(v.ParsePartialFromArray(bytes.data(), static_cast<int>(bytes.size())));
    EXPECT_TRUE(v.IsInitialized());
    ExpectSame(pb, v);
  }
}

TEST(HeaderViewTest, ResponseHeaders) {
  for (int32_t id : {0, 1, -1, -33, INT32_MAX, INT32_MIN}) {
    for (bool err : {false, true}) {
      ResponseHeader pb;
      pb.set_call_id(id);
      pb.set_is_error(err);
      pb.add_sidecar_offsets(5);
      pb.add_sidecar_offsets(9);
      std::string bytes = pb.SerializeAsString();
      ResponseHeaderView v;
      ASSERT_TRUE(v.ParsePartialFromArray(bytes.data(), static_cast<int>(bytes.size())));
      EXPECT_EQ(id, v.call_id());
      EXPECT_EQ(err, v.is_error());
      EXPECT_TRUE(v.has_is_error());
      ASSERT_EQ(2, v.sidecar_offsets_size());
      EXPECT_EQ(9u, v.sidecar_offsets()[1]);
    }
  }
}

TEST(HeaderViewTest, PackedOffsetsAndUnknownFieldsAndLastValueWins) {
  // call_id 1, then an unknown varint field 20, an unknown fixed64 field 21,
  // packed sidecar offsets {3, 300}, and call_id again as 7.
  std::string b = std::string("\x18\x01", 2) + std::string("\xa0\x01\x05", 3) +
                  std::string("\xa9\x01", 2) + std::string(8, '\0') +
                  std::string("\x82\x01\x03\x03\xac\x02", 6) + std::string("\x18\x07", 2);
  RequestHeader pb;
  ASSERT_TRUE(pb.ParseFromString(b));
  RequestHeaderView v;
  ASSERT_TRUE(v.ParsePartialFromArray(b.data(), static_cast<int>(b.size())));
  ExpectSame(pb, v);
  EXPECT_EQ(7, v.call_id());
}

TEST(HeaderViewTest, MissingRequiredFields) {
  RequestHeaderView v;
  std::string none;
  ASSERT_TRUE(v.ParsePartialFromArray(none.data(), 0));
  EXPECT_FALSE(v.IsInitialized());
  EXPECT_EQ("call_id", v.InitializationErrorString());

  // call_id and a remote_method with only a service name.
  std::string b = std::string("\x18\x01\x32\x03\x0a\x01s", 7);
  RequestHeaderView w;
  ASSERT_TRUE(w.ParsePartialFromArray(b.data(), static_cast<int>(b.size())));
  EXPECT_FALSE(w.IsInitialized());
  EXPECT_EQ("remote_method.method_name", w.InitializationErrorString());
}

// Issue 40, finding 2: at most kMaxSidecars offsets and kMaxFeatureFlags
// flags, packed or not, in requests and responses; one more is refused
// with the limit named, and the parser stores no entry past it.
TEST(HeaderViewTest, SidecarAndFeatureFlagCountsAreBounded) {
  for (bool packed : {true, false}) {
    SCOPED_TRACE(packed ? "packed" : "unpacked");
    auto request = [&](size_t sidecars, size_t flags) {
      RequestHeader pb;
      pb.set_call_id(1);
      for (size_t i = 0; i < sidecars; ++i) pb.add_sidecar_offsets(0);
      for (size_t i = 0; i < flags; ++i) pb.add_required_feature_flags(1);
      std::string bytes = pb.SerializeAsString();
      if (!packed) return bytes;  // proto2 repeated scalars serialize unpacked
      // Repacked by hand: tag 16/2 and 11/2 with every value in one run.
      std::string out = "\x18\x01";
      auto run = [&](std::string tag, size_t n, char v) {
        if (n == 0) return;
        std::string values(n, v);
        std::string len;
        for (size_t x = n;; x >>= 7) {
          len.push_back(static_cast<char>((x & 0x7f) | (x >= 0x80 ? 0x80 : 0)));
          if (x < 0x80) break;
        }
        out += tag + len + values;
      };
      run(std::string("\x82\x01", 2), sidecars, '\0');
      run("\x5a", flags, '\1');
      return out;
    };
    RequestHeaderView ok;
    std::string at_limit = request(kMaxSidecars, kMaxFeatureFlags);
    ASSERT_TRUE(ok.ParsePartialFromArray(at_limit.data(), at_limit.size()));
    EXPECT_EQ(kMaxSidecars, ok.sidecar_offsets().size());
    EXPECT_EQ(kMaxFeatureFlags, ok.required_feature_flags().size());

    RequestHeaderView too_many_sidecars;
    std::string bytes = request(kMaxSidecars + 1, 0);
    EXPECT_FALSE(too_many_sidecars.ParsePartialFromArray(bytes.data(), bytes.size()));
    EXPECT_EQ("more than 10000 sidecars", too_many_sidecars.limit_exceeded());
    EXPECT_EQ(kMaxSidecars, too_many_sidecars.sidecar_offsets().size());

    RequestHeaderView too_many_flags;
    bytes = request(0, kMaxFeatureFlags + 1);
    EXPECT_FALSE(too_many_flags.ParsePartialFromArray(bytes.data(), bytes.size()));
    EXPECT_EQ("more than 64 required feature flags", too_many_flags.limit_exceeded());
  }
  ResponseHeader pb;
  pb.set_call_id(1);
  for (size_t i = 0; i <= kMaxSidecars; ++i) pb.add_sidecar_offsets(0);
  std::string bytes = pb.SerializeAsString();
  ResponseHeaderView v;
  EXPECT_FALSE(v.ParsePartialFromArray(bytes.data(), bytes.size()));
  EXPECT_EQ("more than 10000 sidecars", v.limit_exceeded());

  // Through the decoders, views and protobuf classes alike.
  std::string frame_body = std::string(1, '\0');  // empty body
  std::string frame = bytes;
  auto varint = [](size_t x) {
    std::string s;
    for (;; x >>= 7) {
      s.push_back(static_cast<char>((x & 0x7f) | (x >= 0x80 ? 0x80 : 0)));
      if (x < 0x80) break;
    }
    return s;
  };
  std::string rest = varint(bytes.size()) + bytes + frame_body;
  std::string len(4, '\0');
  for (int i = 0; i < 4; ++i) len[i] = static_cast<char>(rest.size() >> (24 - 8 * i));
  std::vector<InboundResponse> views;
  Status s = ResponseDecoder().Feed(len + rest, &views);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(std::string::npos, s.message().find("lists more than 10000 sidecars")) << s.ToString();
  std::vector<InboundResponseFrame> pbs;
  s = ResponseFrameDecoder().Feed(len + rest, &pbs);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(std::string::npos, s.message().find("more than 10000 sidecars")) << s.ToString();
}

TEST(HeaderViewTest, MalformedBytesAreRefused) {
  const std::string cases[] = {
      std::string("\x18", 1),                                               // varint missing
      std::string("\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),  // 11-byte varint
      std::string("\x32\x05\x0a", 3),                                       // length past the end
      std::string("\x1b", 1),              // start group (wire type 3)
      std::string("\x00\x01", 2),          // field number 0
      std::string("\x82\x01\x02\xff", 4),  // packed varint cut short
  };
  for (const auto& c : cases) {
    RequestHeaderView v;
    EXPECT_FALSE(v.ParsePartialFromArray(c.data(), static_cast<int>(c.size())))
        << Slice(c).ToDebugString();
    RequestHeader pb;
    EXPECT_FALSE(pb.ParseFromString(c)) << "protobuf accepts " << Slice(c).ToDebugString();
  }
}

}  // namespace
}  // namespace osprey::wire
