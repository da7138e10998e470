// Golden bytes: whole connections captured between Apache Kudu's own client
// and server (tests/testdata/kudu-wire, copied from shared/). Every frame must decode to what the
// annotated .txt beside the capture says, and re-encode to the same bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "osprey/wire/connection_header.h"
#include "osprey/wire/frame_decoder.h"
#include "osprey/wire/frame_encoder.h"
#include "osprey/wire/rpc_header.pb.h"
#include "osprey/wire/sasl_plain.h"

namespace osprey::wire {
namespace {

std::string ReadTestFile(const std::string& rel) {
  std::string path = std::string(OSPREY_TESTDATA_DIR) + "/kudu-wire/" + rel;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The byte ranges of the frames in `stream`, found from the 4-byte lengths
// alone, so that re-encoding can be compared with the original bytes.
std::vector<std::string> SplitFrames(const std::string& stream) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos + 4 <= stream.size()) {
    const auto* p = reinterpret_cast<const uint8_t*>(stream.data() + pos);
    size_t len = 4 + ((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) |
                      uint32_t{p[3]});
    EXPECT_LE(pos + len, stream.size());
    out.push_back(stream.substr(pos, len));
    pos += len;
  }
  EXPECT_EQ(pos, stream.size());
  return out;
}

template <class Header>
std::vector<InboundFrame<Header>> DecodeAll(const std::string& stream) {
  FrameDecoder<Header> d;
  std::vector<InboundFrame<Header>> frames;
  Status s = d.Feed(Slice(stream), &frames);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(d.buffered_bytes(), 0u);
  return frames;
}

template <class Header>
std::string Reencode(const InboundFrame<Header>& f) {
  Header h = f.header;
  std::vector<std::string> sidecars;
  for (const Slice& s : f.sidecars) sidecars.push_back(s.ToString());
  std::unique_ptr<OutboundFrame> out;
  Status s = OutboundFrame::EncodeSerialized(&h, f.main_message, std::move(sidecars), &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out ? out->ToString() : "";
}

NegotiatePB ParseNegotiate(Slice body) {
  NegotiatePB pb;
  EXPECT_TRUE(pb.ParseFromArray(body.data(), static_cast<int>(body.size())))
      << body.ToDebugString();
  return pb;
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

// Both captures (plain, and TLS used for authentication only) are frames
// from end to end after the connection header.
TEST_P(GoldenTest, ClientToServerReencodesByteForByte) {
  std::string c2s = ReadTestFile(std::string(GetParam()) + "/c2s.bin");
  ASSERT_GT(c2s.size(), kConnectionHeaderSize);
  EXPECT_TRUE(ValidateConnectionHeader(Slice(c2s)).ok());
  EXPECT_EQ(c2s.substr(0, kConnectionHeaderSize), ConnectionHeaderBytes());
  std::string stream = c2s.substr(kConnectionHeaderSize);
  auto frames = DecodeAll<RequestHeader>(stream);
  auto raw = SplitFrames(stream);
  ASSERT_EQ(frames.size(), raw.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(Reencode(frames[i]), raw[i]) << "frame " << i + 1;
  }
}

TEST_P(GoldenTest, ServerToClientReencodesByteForByte) {
  std::string stream = ReadTestFile(std::string(GetParam()) + "/s2c.bin");
  auto frames = DecodeAll<ResponseHeader>(stream);
  auto raw = SplitFrames(stream);
  ASSERT_EQ(frames.size(), raw.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(Reencode(frames[i]), raw[i]) << "frame " << i + 1;
  }
}

TEST_P(GoldenTest, ByteAtATimeGivesTheSameFrames) {
  std::string stream = ReadTestFile(std::string(GetParam()) + "/c2s.bin").substr(7);
  RequestFrameDecoder d(kDefaultMaxFrameSize, /*chunk_size=*/16);
  std::vector<InboundRequestFrame> frames;
  for (char c : stream) ASSERT_TRUE(d.Feed(Slice(&c, 1), &frames).ok());
  auto whole = DecodeAll<RequestHeader>(stream);
  ASSERT_EQ(frames.size(), whole.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].header.SerializeAsString(), whole[i].header.SerializeAsString());
    EXPECT_EQ(frames[i].main_message, whole[i].main_message);
  }
}

INSTANTIATE_TEST_SUITE_P(Captures, GoldenTest, ::testing::Values("plain", "tls"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// The annotated decoding in plain/client_to_server.txt, field by field.
TEST(GoldenPlainTest, ClientToServerMatchesAnnotation) {
  std::string c2s = ReadTestFile("plain/c2s.bin");
  ASSERT_EQ(c2s.size(), 209u);
  auto frames = DecodeAll<RequestHeader>(c2s.substr(kConnectionHeaderSize));
  ASSERT_EQ(frames.size(), 5u);

  // Frame 1: NEGOTIATE, features APPLICATION_FEATURE_FLAGS, TLS,
  // TLS_AUTHENTICATION_ONLY, authn_types { sasl }, and no SASL mechanisms.
  EXPECT_EQ(frames[0].header.call_id(), -33);
  EXPECT_FALSE(frames[0].header.has_remote_method());
  EXPECT_EQ(frames[0].main_message.size(), 12u);
  NegotiatePB n1 = ParseNegotiate(frames[0].main_message);
  EXPECT_EQ(n1.step(), NegotiatePB::NEGOTIATE);
  ASSERT_EQ(n1.supported_features_size(), 3);
  EXPECT_EQ(n1.supported_features(0), APPLICATION_FEATURE_FLAGS);
  EXPECT_EQ(n1.supported_features(1), TLS);
  EXPECT_EQ(n1.supported_features(2), TLS_AUTHENTICATION_ONLY);
  EXPECT_EQ(n1.sasl_mechanisms_size(), 0);
  ASSERT_EQ(n1.authn_types_size(), 1);
  EXPECT_TRUE(n1.authn_types(0).has_sasl());

  // Frame 2: SASL_INITIATE, PLAIN, token "\0root\0".
  EXPECT_EQ(frames[1].header.call_id(), -33);
  NegotiatePB n2 = ParseNegotiate(frames[1].main_message);
  EXPECT_EQ(n2.step(), NegotiatePB::SASL_INITIATE);
  ASSERT_EQ(n2.sasl_mechanisms_size(), 1);
  EXPECT_EQ(n2.sasl_mechanisms(0).mechanism(), "PLAIN");
  EXPECT_EQ(n2.token(), std::string("\0root\0", 6));
  SaslPlainCredentials creds;
  ASSERT_TRUE(DecodeSaslPlain(Slice(n2.token()), &creds).ok());
  EXPECT_EQ(creds.authzid, "");
  EXPECT_EQ(creds.authcid, "root");
  EXPECT_EQ(creds.password, "");

  // Frame 3: connection context, real_user "root".
  EXPECT_EQ(frames[2].header.call_id(), -3);
  ConnectionContextPB ctx;
  ASSERT_TRUE(ctx.ParseFromArray(frames[2].main_message.data(),
                                 static_cast<int>(frames[2].main_message.size())));
  EXPECT_EQ(ctx.deprecated_user_info().real_user(), "root");
  EXPECT_FALSE(ctx.deprecated_user_info().has_effective_user());

  // Frames 4 and 5: Add calls 0 and 1 with a 10 s timeout; bodies
  // AddRequestPB{x: 0, y: 1000} and {x: 1, y: 1001} (fields 1 and 2).
  const std::string bodies[] = {std::string("\x08\x00\x10\xe8\x07", 5),
                                std::string("\x08\x01\x10\xe9\x07", 5)};
  for (int i = 0; i < 2; ++i) {
    const auto& f = frames[3 + i];
    SCOPED_TRACE("call " + std::to_string(i));
    EXPECT_EQ(f.header.call_id(), i);
    EXPECT_EQ(f.header.remote_method().service_name(), "kudu.rpc_test.CalculatorService");
    EXPECT_EQ(f.header.remote_method().method_name(), "Add");
    EXPECT_EQ(f.header.timeout_millis(), 10000u);
    EXPECT_EQ(f.header.sidecar_offsets_size(), 0);
    EXPECT_EQ(f.main_message.ToString(), bodies[i]);
    EXPECT_TRUE(f.sidecars.empty());
  }
}

// The annotated decoding in plain/server_to_client.txt, field by field.
TEST(GoldenPlainTest, ServerToClientMatchesAnnotation) {
  std::string s2c = ReadTestFile("plain/s2c.bin");
  ASSERT_EQ(s2c.size(), 79u);
  auto frames = DecodeAll<ResponseHeader>(s2c);
  ASSERT_EQ(frames.size(), 4u);

  // Frame 1: NEGOTIATE answer: only APPLICATION_FEATURE_FLAGS (no TLS on
  // this server), mechanism PLAIN, one chosen authn type: sasl.
  EXPECT_EQ(frames[0].header.call_id(), -33);
  EXPECT_FALSE(frames[0].header.is_error());
  NegotiatePB n1 = ParseNegotiate(frames[0].main_message);
  EXPECT_EQ(n1.step(), NegotiatePB::NEGOTIATE);
  ASSERT_EQ(n1.supported_features_size(), 1);
  EXPECT_EQ(n1.supported_features(0), APPLICATION_FEATURE_FLAGS);
  ASSERT_EQ(n1.sasl_mechanisms_size(), 1);
  EXPECT_EQ(n1.sasl_mechanisms(0).mechanism(), "PLAIN");
  ASSERT_EQ(n1.authn_types_size(), 1);
  EXPECT_TRUE(n1.authn_types(0).has_sasl());

  // Frame 2: SASL_SUCCESS.
  EXPECT_EQ(frames[1].header.call_id(), -33);
  NegotiatePB n2 = ParseNegotiate(frames[1].main_message);
  EXPECT_EQ(n2.step(), NegotiatePB::SASL_SUCCESS);
  EXPECT_TRUE(n2.has_step());

  // Frames 3 and 4: AddResponsePB{result: 1000} and {result: 1002}; Kudu sets
  // is_error = false explicitly, which re-encoding must preserve.
  const std::string bodies[] = {std::string("\x08\xe8\x07", 3), std::string("\x08\xea\x07", 3)};
  for (int i = 0; i < 2; ++i) {
    const auto& f = frames[2 + i];
    SCOPED_TRACE("call " + std::to_string(i));
    EXPECT_EQ(f.header.call_id(), i);
    EXPECT_TRUE(f.header.has_is_error());
    EXPECT_FALSE(f.header.is_error());
    EXPECT_EQ(f.main_message.ToString(), bodies[i]);
  }
}

TEST(GoldenPlainTest, NegativeCallIdsAreTenByteVarints) {
  // int32 -33 is sign-extended to 64 bits on the wire: field 3 tag, then
  // df ff ff ff ff ff ff ff ff 01. Our encoder must do the same.
  RequestHeader h;
  h.set_call_id(-33);
  std::unique_ptr<OutboundFrame> out;
  ASSERT_TRUE(OutboundFrame::EncodeSerialized(&h, Slice(""), {}, &out).ok());
  std::string bytes = out->ToString();
  EXPECT_EQ(bytes.substr(4, 12),
            std::string("\x0b\x18\xdf\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12));
}

}  // namespace
}  // namespace osprey::wire
