// The hand-parsed header views must read exactly what protobuf reads.
#include "osprey/wire/header_view.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

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
