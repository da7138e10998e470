// Tests of OutboundFrame (encoding) and FrameDecoder (decoding), against
// frames built by hand from the field numbers of docs/wire-protocol.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "osprey/wire/frame_decoder.h"
#include "osprey/wire/frame_encoder.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::wire {
namespace {

// --- Hand encoding, independent of protobuf and of the code under test ---

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

enum WireType { kVarint = 0, kLengthDelimited = 2 };

std::string Tag(int field, WireType type) { return Varint((uint64_t(field) << 3) | type); }

std::string VarintField(int field, uint64_t v) { return Tag(field, kVarint) + Varint(v); }

std::string BytesField(int field, const std::string& bytes) {
  return Tag(field, kLengthDelimited) + Varint(bytes.size()) + bytes;
}

std::string BigEndian32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// A frame from its parts, with lengths computed honestly.
std::string HandFrame(const std::string& header, const std::string& body) {
  std::string rest = Varint(header.size()) + header + Varint(body.size()) + body;
  return BigEndian32(static_cast<uint32_t>(rest.size())) + rest;
}

std::string Hex(const std::string& s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (!out.empty()) out.push_back(' ');
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string Encode(RequestHeader header, const std::string& main,
                   std::vector<std::string> sidecars = {}) {
  std::unique_ptr<OutboundFrame> f;
  Status s = OutboundFrame::EncodeSerialized(&header, Slice(main), std::move(sidecars), &f);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return f ? f->ToString() : "";
}

RequestHeader AddCallHeader(int32_t call_id) {
  RequestHeader h;
  h.set_call_id(call_id);
  h.mutable_remote_method()->set_service_name("kudu.rpc_test.CalculatorService");
  h.mutable_remote_method()->set_method_name("Add");
  return h;
}

// The 12 body bytes of the spec's AddRequestPB{x = 304089172, y = 1303455736}.
const std::string kAddBody("\x08\xd4\x90\x80\x91\x01\x10\xf8\xcf\xc4\xed\x04", 12);

// --- Worked example (spec section 7) ---

TEST(FrameEncoderTest, SpecWorkedExampleByteForByte) {
  // AddRequestPB { 1 x : uint32; 2 y : uint32 } by hand, to check the body
  // bytes quoted in the spec.
  ASSERT_EQ(VarintField(1, 304089172) + VarintField(2, 1303455736), kAddBody);

  // RequestHeader { 3 call_id; 6 remote_method { 1 service_name; 2 method_name } }.
  std::string remote_method =
      BytesField(1, "kudu.rpc_test.CalculatorService") + BytesField(2, "Add");
  std::string header = VarintField(3, 10) + BytesField(6, remote_method);
  std::string expected = HandFrame(header, kAddBody);

  // Anchor the hand encoder itself with the few bytes worked out on paper:
  // total 56, header 42, call_id tag 0x18 (field 3), remote_method tag 0x32
  // (field 6) of 38 bytes, and body length 0x0c.
  ASSERT_EQ(Hex(expected.substr(0, 9)), "00 00 00 38 2a 18 0a 32 26");
  ASSERT_EQ(expected.size(), 60u);
  ASSERT_EQ(static_cast<uint8_t>(expected[4 + 1 + 42]), 0x0c);

  std::string got = Encode(AddCallHeader(10), kAddBody);
  EXPECT_EQ(Hex(got), Hex(expected));
}

TEST(FrameEncoderTest, EncodeFromMessageMatchesEncodeSerialized) {
  NegotiatePB pb;
  pb.set_step(NegotiatePB::NEGOTIATE);
  pb.add_supported_features(APPLICATION_FEATURE_FLAGS);
  pb.add_authn_types()->mutable_sasl();
  RequestHeader h1, h2;
  h1.set_call_id(-33);
  h2.set_call_id(-33);
  std::unique_ptr<OutboundFrame> a, b;
  ASSERT_TRUE(OutboundFrame::Encode(&h1, pb, {"side"}, &a).ok());
  std::string body = pb.SerializeAsString();
  ASSERT_TRUE(OutboundFrame::EncodeSerialized(&h2, Slice(body), {"side"}, &b).ok());
  EXPECT_EQ(a->ToString(), b->ToString());
  // Encode sets the sidecar offsets in the caller's header.
  ASSERT_EQ(h1.sidecar_offsets_size(), 1);
  EXPECT_EQ(h1.sidecar_offsets(0), body.size());
}

// The hand-written request header is what protobuf writes for the same
// fields, required_feature_flags included (unpacked, in field order).
TEST(FrameEncoderTest, FastRequestHeaderMatchesProtobuf) {
  const std::vector<std::vector<uint32_t>> flag_sets = {{}, {1}, {7, 300, UINT32_MAX}};
  for (uint32_t timeout : {0u, 10000u, UINT32_MAX}) {
    for (const auto& flags : flag_sets) {
      for (int32_t call_id : {0, 5, -3, INT32_MAX}) {
        RequestHeader h = AddCallHeader(call_id);
        if (timeout != 0) h.set_timeout_millis(timeout);
        for (uint32_t f : flags) h.add_required_feature_flags(f);
        std::string method = h.remote_method().SerializeAsString();
        std::unique_ptr<OutboundFrame> fast;
        ASSERT_TRUE(OutboundFrame::EncodeRequest(call_id, Slice(method), timeout, flags,
                                                 Slice(kAddBody), {"car"}, &fast)
                        .ok());
        EXPECT_EQ(Hex(Encode(h, kAddBody, {"car"})), Hex(fast->ToString()))
            << "timeout " << timeout << ", " << flags.size() << " flags, call id " << call_id;
      }
    }
  }
}

// With a request id (exactly-once methods): field 15 after the feature
// flags, as protobuf writes it, and the header view gives its bytes back.
TEST(FrameEncoderTest, FastRequestHeaderWithRequestIdMatchesProtobuf) {
  RequestHeader h = AddCallHeader(9);
  h.set_timeout_millis(2500);
  h.add_required_feature_flags(3);
  RequestIdPB* id = h.mutable_request_id();
  id->set_client_id("0123456789abcdef0123456789abcdef");
  id->set_seq_no(42);
  id->set_first_incomplete_seq_no(40);
  id->set_attempt_no(2);
  std::string method = h.remote_method().SerializeAsString();
  std::string id_pb = id->SerializeAsString();
  std::unique_ptr<OutboundFrame> fast;
  ASSERT_TRUE(OutboundFrame::EncodeRequest(9, Slice(method), 2500, {3}, Slice(id_pb),
                                           Slice(kAddBody), {}, &fast)
                  .ok());
  const std::string bytes = fast->ToString();
  EXPECT_EQ(Hex(Encode(h, kAddBody, {})), Hex(bytes));

  std::string header_bytes = h.SerializeAsString();
  RequestHeaderView view;
  ASSERT_TRUE(view.ParsePartialFromArray(header_bytes.data(), header_bytes.size()));
  ASSERT_TRUE(view.has_request_id());
  EXPECT_EQ(id_pb, std::string(view.request_id_pb()));
}

// Sends `f` through "writev"s of at most `per_write` bytes, as a congested
// socket might take it, and returns the bytes sent; checks the frame's
// count of what remains after each.
std::string SendInPieces(OutboundFrame* f, size_t per_write) {
  std::string sent;
  while (!f->done()) {
    std::vector<iovec> iov;
    f->AppendIovecs(&iov);
    EXPECT_FALSE(iov.empty());
    if (iov.empty()) break;
    size_t n = 0;
    for (const iovec& v : iov) {
      size_t take = std::min(per_write - n, v.iov_len);
      sent.append(static_cast<const char*>(v.iov_base), take);
      n += take;
      if (n == per_write) break;
    }
    size_t left = n;
    f->Advance(&left);
    EXPECT_EQ(left, 0u);
    EXPECT_EQ(f->bytes_remaining(), f->total_size() - sent.size());
  }
  return sent;
}

TEST(FrameEncoderTest, PartialWritesViaIovecs) {
  RequestHeader h = AddCallHeader(7);
  std::unique_ptr<OutboundFrame> f;
  ASSERT_TRUE(
      OutboundFrame::EncodeSerialized(&h, Slice(kAddBody), {"first", "", "third"}, &f).ok());
  const std::string whole = f->ToString();
  EXPECT_EQ(f->total_size(), whole.size());

  EXPECT_EQ(SendInPieces(f.get(), 3), whole);

  // A writev that covered this frame and more leaves the rest for the next.
  size_t extra = 10;
  f->Advance(&extra);
  EXPECT_EQ(extra, 10u);
  std::vector<iovec> iov;
  f->AppendIovecs(&iov);
  EXPECT_TRUE(iov.empty());
}

// A refusal's frame shares its serialized ErrorStatusPB: the bytes on the
// wire are those of a ResponseHeader and body protobuf writes, for any call
// id; a partial write resumes inside the shared bytes; and the frame keeps
// them alive after the one who made them lets go.
TEST(FrameEncoderTest, SharedResponseMatchesProtobufAndSurvivesPartialWrites) {
  ErrorStatusPB err;
  err.set_code(ErrorStatusPB::ERROR_SERVER_TOO_BUSY);
  err.set_message(std::string(300, 'x'));  // past the inline prefix
  for (int32_t call_id : {0, 5, 300, INT32_MAX}) {
    auto shared = std::make_shared<const std::string>(err.SerializeAsString());
    std::unique_ptr<OutboundFrame> f;
    ASSERT_TRUE(OutboundFrame::EncodeSharedResponse(call_id, true, shared, &f).ok());
    ResponseHeader h;
    h.set_call_id(call_id);
    h.set_is_error(true);
    std::unique_ptr<OutboundFrame> expected;
    ASSERT_TRUE(OutboundFrame::Encode(&h, err, {}, &expected).ok());
    const std::string whole = expected->ToString();
    EXPECT_EQ(Hex(whole), Hex(f->ToString())) << "call id " << call_id;
    EXPECT_EQ(f->total_size(), whole.size());
    shared.reset();  // the frame's reference is the last
    // 7 bytes a writev: one crosses from the prefix into the shared body.
    EXPECT_EQ(SendInPieces(f.get(), 7), whole) << "call id " << call_id;
  }
}

// --- Decoding ---

template <class Header>
Status FeedAll(FrameDecoder<Header>* d, const std::string& bytes,
               std::vector<InboundFrame<Header>>* out) {
  return d->Feed(Slice(bytes), out);
}

TEST(FrameDecoderTest, DecodesSpecWorkedExample) {
  RequestFrameDecoder d;
  std::vector<InboundRequestFrame> frames;
  ASSERT_TRUE(FeedAll(&d, Encode(AddCallHeader(10), kAddBody), &frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].header.call_id(), 10);
  EXPECT_EQ(frames[0].header.remote_method().service_name(), "kudu.rpc_test.CalculatorService");
  EXPECT_EQ(frames[0].header.remote_method().method_name(), "Add");
  EXPECT_FALSE(frames[0].header.has_timeout_millis());
  EXPECT_EQ(frames[0].main_message.ToString(), kAddBody);
  EXPECT_TRUE(frames[0].sidecars.empty());
  EXPECT_EQ(d.buffered_bytes(), 0u);
}

struct RoundTripCase {
  const char* name;
  std::string main;
  std::vector<std::string> sidecars;
};

class FrameRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(FrameRoundTripTest, RequestAndResponse) {
  const RoundTripCase& c = GetParam();

  RequestHeader req = AddCallHeader(42);
  req.set_timeout_millis(1500);
  req.add_required_feature_flags(1);
  req.mutable_request_id()->set_client_id("client");
  req.mutable_request_id()->set_seq_no(5);
  req.mutable_request_id()->set_first_incomplete_seq_no(3);
  req.mutable_request_id()->set_attempt_no(1);
  std::unique_ptr<OutboundFrame> out;
  ASSERT_TRUE(OutboundFrame::EncodeSerialized(&req, Slice(c.main), c.sidecars, &out).ok());

  RequestFrameDecoder rd;
  std::vector<InboundRequestFrame> reqs;
  ASSERT_TRUE(rd.Feed(Slice(out->ToString()), &reqs).ok());
  ASSERT_EQ(reqs.size(), 1u);
  // The decoded header is what was sent, sidecar offsets included.
  EXPECT_EQ(reqs[0].header.SerializeAsString(), req.SerializeAsString());
  EXPECT_EQ(reqs[0].main_message.ToString(), c.main);
  ASSERT_EQ(reqs[0].sidecars.size(), c.sidecars.size());
  for (size_t i = 0; i < c.sidecars.size(); ++i) {
    EXPECT_EQ(reqs[0].sidecars[i].ToString(), c.sidecars[i]) << "sidecar " << i;
  }

  ResponseHeader resp;
  resp.set_call_id(42);
  resp.set_is_error(true);
  ASSERT_TRUE(OutboundFrame::EncodeSerialized(&resp, Slice(c.main), c.sidecars, &out).ok());
  ResponseFrameDecoder pd;
  std::vector<InboundResponseFrame> resps;
  ASSERT_TRUE(pd.Feed(Slice(out->ToString()), &resps).ok());
  ASSERT_EQ(resps.size(), 1u);
  EXPECT_EQ(resps[0].header.call_id(), 42);
  EXPECT_TRUE(resps[0].header.is_error());
  EXPECT_EQ(resps[0].main_message.ToString(), c.main);
  ASSERT_EQ(resps[0].sidecars.size(), c.sidecars.size());
  for (size_t i = 0; i < c.sidecars.size(); ++i) {
    EXPECT_EQ(resps[0].sidecars[i].ToString(), c.sidecars[i]) << "sidecar " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Bodies, FrameRoundTripTest,
    ::testing::Values(RoundTripCase{"NoSidecars", kAddBody, {}}, RoundTripCase{"EmptyBody", "", {}},
                      RoundTripCase{"OneSidecar", kAddBody, {"sidecar"}},
                      RoundTripCase{"ThreeSidecars", "main", {"a", "bb", std::string(300, 'c')}},
                      RoundTripCase{"EmptySidecars", "main", {"", "x", ""}},
                      RoundTripCase{"OnlyEmptySidecars", "", {"", ""}},
                      RoundTripCase{"BinarySidecar", "m", {std::string("\0\xff\0", 3)}}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) { return info.param.name; });

// The pre-auth budget charges what a connection's frame in progress holds
// (Connection::ChargePreAuthBytes): a frame larger than the read chunk
// holds a buffer of its whole size from the moment its length is read, and
// a frame within the chunk only the bytes that came.
TEST(FrameDecoderTest, ALargeFrameHoldsItsWholeSizeFromItsLength) {
  RequestFrameDecoder d(/*max_frame_size=*/1 << 20, /*chunk_size=*/64 * 1024);
  std::vector<InboundRequestFrame> frames;
  const uint32_t kBody = (1 << 20) - 16;
  ASSERT_TRUE(d.Feed(Slice(BigEndian32(kBody) + std::string(10, 'x')), &frames).ok());
  EXPECT_TRUE(frames.empty());
  EXPECT_EQ(d.buffered_bytes(), 14u);
  EXPECT_EQ(d.held_bytes(), size_t{kBody} + 4);

  RequestFrameDecoder small(/*max_frame_size=*/1 << 20, /*chunk_size=*/64 * 1024);
  ASSERT_TRUE(small.Feed(Slice(BigEndian32(1000) + std::string(10, 'x')), &frames).ok());
  EXPECT_EQ(small.buffered_bytes(), 14u);
  EXPECT_EQ(small.held_bytes(), 14u);
}

TEST(FrameDecoderTest, ByteAtATime) {
  std::string stream;
  for (int i = 0; i < 5; ++i) {
    stream += Encode(AddCallHeader(i), kAddBody,
                     i % 2 ? std::vector<std::string>{"s", ""} : std::vector<std::string>{});
  }
  // Through Feed...
  {
    RequestFrameDecoder d;
    std::vector<InboundRequestFrame> frames;
    for (char c : stream) ASSERT_TRUE(d.Feed(Slice(&c, 1), &frames).ok());
    ASSERT_EQ(frames.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(frames[i].header.call_id(), i);
      EXPECT_EQ(frames[i].main_message.ToString(), kAddBody);
      EXPECT_EQ(frames[i].sidecars.size(), i % 2 ? 2u : 0u);
    }
    EXPECT_EQ(d.buffered_bytes(), 0u);
  }
  // ...and through WriteSpace/Consume, as a reactor reads.
  {
    RequestFrameDecoder d(kDefaultMaxFrameSize, /*chunk_size=*/16);
    std::vector<InboundRequestFrame> frames;
    for (size_t i = 0; i < stream.size(); ++i) {
      size_t space = 0;
      uint8_t* dst = d.WriteSpace(&space);
      ASSERT_GE(space, 1u);
      *dst = static_cast<uint8_t>(stream[i]);
      ASSERT_TRUE(d.Consume(1, &frames).ok());
      // Frames already returned stay valid while more bytes come in.
      if (!frames.empty()) {
        ASSERT_EQ(frames[0].main_message.ToString(), kAddBody);
      }
    }
    ASSERT_EQ(frames.size(), 5u);
    EXPECT_EQ(frames[4].header.call_id(), 4);
  }
}

TEST(FrameDecoderTest, ThousandFramesInOneBuffer) {
  std::string stream;
  for (int i = 0; i < 1000; ++i) {
    RequestHeader h = AddCallHeader(i);
    std::string body = "body-" + std::to_string(i);
    stream += Encode(
        h, body,
        i % 10 == 0 ? std::vector<std::string>{std::to_string(i)} : std::vector<std::string>{});
  }
  std::vector<InboundRequestFrame> frames;
  {
    RequestFrameDecoder d;
    ASSERT_TRUE(d.Feed(Slice(stream), &frames).ok());
    EXPECT_EQ(d.buffered_bytes(), 0u);
  }
  // The decoder is gone: the frames keep their bytes alive themselves.
  ASSERT_EQ(frames.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(frames[i].header.call_id(), i);
    ASSERT_EQ(frames[i].main_message.ToString(), "body-" + std::to_string(i));
    if (i % 10 == 0) {
      ASSERT_EQ(frames[i].sidecars.size(), 1u);
      ASSERT_EQ(frames[i].sidecars[0].ToString(), std::to_string(i));
    }
  }
}

// Negotiation's view: frames one at a time, and whatever follows the last
// one taken (TLS records, say) handed back untouched.
TEST(FrameDecoderTest, OneFrameAtATimeThenTheRestUnparsed) {
  std::string stream = Encode(AddCallHeader(-33), "first", {}) +
                       Encode(AddCallHeader(-33), "second", {}) + "\x17\x03\x03 not a frame";
  RequestFrameDecoder d;
  size_t space;
  uint8_t* dst = d.WriteSpace(&space);
  ASSERT_GE(space, stream.size());
  memcpy(dst, stream.data(), stream.size());
  std::vector<InboundRequestFrame> frames;
  ASSERT_TRUE(d.Consume(stream.size(), &frames, 1).ok());
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ("first", frames[0].main_message.ToString());
  ASSERT_TRUE(d.Consume(0, &frames, 1).ok());
  ASSERT_EQ(2u, frames.size());
  EXPECT_EQ("second", frames[1].main_message.ToString());
  std::string rest;
  d.TakeUnparsed(&rest);
  EXPECT_EQ("\x17\x03\x03 not a frame", rest);
  EXPECT_EQ(0u, d.buffered_bytes());
  // The decoder goes on with whatever is fed next.
  ASSERT_TRUE(d.Feed(Encode(AddCallHeader(7), "third", {}), &frames).ok());
  ASSERT_EQ(3u, frames.size());
  EXPECT_EQ(7, frames[2].header.call_id());
}

TEST(FrameDecoderTest, LargeFrameInRandomPieces) {
  // A 1 MiB frame (much larger than the 64 KiB read chunk) between small
  // ones, read in random-sized pieces the way a socket delivers it.
  std::mt19937 rng(12345);  // fixed seed: deterministic
  std::string big_main(100 * 1024, 'm');
  std::vector<std::string> big_sidecars;
  for (int i = 0; i < 4; ++i) {
    std::string sc(231 * 1024, '\0');
    for (char& ch : sc) ch = static_cast<char>(rng());
    big_sidecars.push_back(sc);
  }
  big_sidecars.push_back("");  // an empty last sidecar, too

  std::string stream = Encode(AddCallHeader(1), "before");
  stream += Encode(AddCallHeader(2), big_main, big_sidecars);
  ASSERT_GT(stream.size(), 1024u * 1024u);
  stream += Encode(AddCallHeader(3), "after");

  for (bool use_feed : {false, true}) {
    SCOPED_TRACE(use_feed ? "Feed" : "WriteSpace/Consume");
    RequestFrameDecoder d(/*max_frame_size=*/2 * 1024 * 1024, /*chunk_size=*/64 * 1024);
    std::vector<InboundRequestFrame> frames;
    std::uniform_int_distribution<size_t> piece(1, 100 * 1024);
    size_t pos = 0;
    while (pos < stream.size()) {
      size_t n = std::min(piece(rng), stream.size() - pos);
      if (use_feed) {
        ASSERT_TRUE(d.Feed(Slice(stream.data() + pos, n), &frames).ok());
      } else {
        size_t space = 0;
        uint8_t* dst = d.WriteSpace(&space);
        ASSERT_GT(space, 0u);
        n = std::min(n, space);
        std::memcpy(dst, stream.data() + pos, n);
        ASSERT_TRUE(d.Consume(n, &frames).ok());
      }
      pos += n;
    }
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0].main_message.ToString(), "before");
    EXPECT_EQ(frames[1].header.call_id(), 2);
    EXPECT_EQ(frames[1].main_message.ToString(), big_main);
    ASSERT_EQ(frames[1].sidecars.size(), big_sidecars.size());
    for (size_t i = 0; i < big_sidecars.size(); ++i) {
      EXPECT_TRUE(frames[1].sidecars[i] == Slice(big_sidecars[i])) << "sidecar " << i;
    }
    EXPECT_EQ(frames[2].main_message.ToString(), "after");
    EXPECT_EQ(d.buffered_bytes(), 0u);
  }
}

// Large frames, sent and received one after another, reuse the process
// pool's buffers instead of allocating (and freeing) theirs every call.
TEST(FrameDecoderTest, LargeFramesReuseThePoolsBuffers) {
  BufferPool* pool = BufferPool::Default();
  const std::string big(256 * 1024, 'x');
  uint64_t before = pool->allocations();
  {
    // Held at once, 20 frames need 20 buffers: the pool had 16 at most.
    std::vector<std::unique_ptr<OutboundFrame>> held(20);
    for (auto& f : held) {
      RequestHeader h = AddCallHeader(1);
      ASSERT_TRUE(OutboundFrame::EncodeSerialized(&h, Slice(big), {}, &f).ok());
    }
    EXPECT_GE(pool->allocations() - before, 4u);
  }
  EXPECT_GT(pool->kept_buffers(), 0u);
  std::string stream;
  before = pool->allocations();
  for (int i = 0; i < 20; ++i) stream = Encode(AddCallHeader(i), big);
  EXPECT_EQ(pool->allocations() - before, 0u);

  RequestFrameDecoder d(/*max_frame_size=*/1024 * 1024);
  {
    std::vector<InboundRequestFrame> held;
    before = pool->allocations();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(d.Feed(Slice(stream), &held).ok());
    ASSERT_EQ(held.size(), 20u);
    EXPECT_GE(pool->allocations() - before, 4u);
  }
  before = pool->allocations();
  for (int i = 0; i < 20; ++i) {
    std::vector<InboundRequestFrame> frames;
    ASSERT_TRUE(d.Feed(Slice(stream), &frames).ok());
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].main_message.size(), big.size());
  }  // each frame, and so its buffer, is dropped before the next arrives
  EXPECT_EQ(pool->allocations() - before, 0u);
}

// Many large frames held at once, then dropped together: the pool keeps
// only what its bounds allow and frees the rest.
TEST(FrameDecoderTest, ManyLargeFramesDroppedLeaveThePoolWithinItsBounds) {
  BufferPool* pool = BufferPool::Default();
  const std::string big(1024 * 1024, 'y');
  const std::string frame = Encode(AddCallHeader(1), big);
  RequestFrameDecoder d(/*max_frame_size=*/2 * 1024 * 1024);
  {
    std::vector<InboundRequestFrame> frames;
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(d.Feed(Slice(frame), &frames).ok());
    ASSERT_EQ(frames.size(), 100u);  // 100 MiB held, more than the pool keeps
  }
  EXPECT_LE(pool->kept_buffers(), pool->options().max_buffers);
  EXPECT_LE(pool->kept_bytes(), pool->options().max_bytes);
  EXPECT_GT(pool->kept_buffers(), 0u);
}

TEST(FrameDecoderTest, FrameOfExactlyMaxSizeIsAccepted) {
  constexpr size_t kMax = 1024;
  RequestHeader h;
  h.set_call_id(1);
  // header_len(1) + header(2) + body_len(2) + body = kMax.
  std::string frame = Encode(h, std::string(kMax - 5, 'b'));
  ASSERT_EQ(frame.size(), 4 + kMax);
  RequestFrameDecoder d(kMax);
  std::vector<InboundRequestFrame> frames;
  ASSERT_TRUE(d.Feed(Slice(frame), &frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].main_message.size(), kMax - 5);
}

// --- Malformed input ---

// Feeds `bytes` and expects a Corruption whose message contains `want`;
// then checks that the decoder stays broken.
template <class Header>
void ExpectCorruption(const std::string& bytes, const std::string& want,
                      size_t max_frame_size = kDefaultMaxFrameSize) {
  FrameDecoder<Header> d(max_frame_size);
  std::vector<InboundFrame<Header>> frames;
  Status s = d.Feed(Slice(bytes), &frames);
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(want), std::string::npos) << s.ToString();
  EXPECT_TRUE(frames.empty());

  // Out of sync for good: good bytes afterwards get the same error, by
  // either entry point.
  RequestHeader h;
  h.set_call_id(1);
  std::string good = Encode(h, "ok");
  EXPECT_EQ(d.Feed(Slice(good), &frames), s);
  size_t space = 0;
  uint8_t* dst = d.WriteSpace(&space);
  ASSERT_GT(space, 0u);
  *dst = 0;
  EXPECT_EQ(d.Consume(1, &frames), s);
  EXPECT_TRUE(frames.empty());
}

std::string CallIdHeader(int field = 3) { return VarintField(field, 1); }

TEST(FrameDecoderMalformedTest, ZeroLength) {
  ExpectCorruption<RequestHeader>(BigEndian32(0), "frame length 0 is too small");
  ExpectCorruption<RequestHeader>(BigEndian32(3), "frame length 3 is too small");
}

TEST(FrameDecoderMalformedTest, LengthTwoToThe31) {
  ExpectCorruption<RequestHeader>(BigEndian32(0x80000000u),
                                  "frame length 2147483648 exceeds the maximum frame size");
  ExpectCorruption<ResponseHeader>(BigEndian32(0xffffffffu), "exceeds the maximum frame size");
}

TEST(FrameDecoderMalformedTest, MaxPlusOneRejectedRightAfterLength) {
  constexpr size_t kMax = 1024;
  RequestFrameDecoder d(kMax);
  std::vector<InboundRequestFrame> frames;
  std::string len = BigEndian32(kMax + 1);
  // Three bytes of the length: nothing to judge yet.
  ASSERT_TRUE(d.Feed(Slice(len.data(), 3), &frames).ok());
  // The fourth completes it: rejected at once, long before 1024 bytes came.
  Status s = d.Feed(Slice(len.data() + 3, 1), &frames);
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("frame length 1025 exceeds the maximum frame size of 1024"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(d.Feed(Slice(std::string(100, 'x')), &frames), s);
}

TEST(FrameDecoderMalformedTest, TenByteVarint) {
  std::string rest(10, '\xff');
  rest += '\x00';
  ExpectCorruption<RequestHeader>(BigEndian32(rest.size()) + rest,
                                  "bad header length: varint longer than 5 bytes");
  // A varint that runs off the end of the frame.
  std::string trunc = "\xff\xff\xff\xff";
  ExpectCorruption<ResponseHeader>(BigEndian32(trunc.size()) + trunc,
                                   "bad header length: truncated varint");
  // A body length varint that is too long.
  std::string header = VarintField(1, 1);
  std::string body_len_bad = Varint(header.size()) + header + std::string(6, '\x80') + "\x01";
  ExpectCorruption<ResponseHeader>(BigEndian32(body_len_bad.size()) + body_len_bad,
                                   "bad body length: varint longer than 5 bytes");
}

TEST(FrameDecoderMalformedTest, HeaderLengthPastFrame) {
  std::string rest = Varint(50) + CallIdHeader() + Varint(0);
  ExpectCorruption<RequestHeader>(BigEndian32(rest.size()) + rest,
                                  "header length 50 exceeds the 3 bytes left in the frame");
}

TEST(FrameDecoderMalformedTest, HeaderDoesNotParse) {
  // Tag 0x1f: field 3 with wire type 7, which does not exist.
  ExpectCorruption<RequestHeader>(HandFrame(std::string("\x1f\x00", 2), ""),
                                  "frame header does not parse as RequestHeader");
  // A length-delimited field longer than the header.
  ExpectCorruption<ResponseHeader>(HandFrame(BytesField(5, "abc").substr(0, 3), ""),
                                   "frame header does not parse as ResponseHeader");
}

TEST(FrameDecoderMalformedTest, HeaderWithoutCallId) {
  // Only timeout_millis (field 10): call_id is required.
  ExpectCorruption<RequestHeader>(HandFrame(VarintField(10, 5), "body"),
                                  "frame header lacks required fields: call_id");
  // is_error alone.
  ExpectCorruption<ResponseHeader>(HandFrame(VarintField(2, 1), "body"),
                                   "frame header lacks required fields: call_id");
  // A RemoteMethodPB without method_name is incomplete too.
  ExpectCorruption<RequestHeader>(
      HandFrame(CallIdHeader() + BytesField(6, BytesField(1, "svc")), ""),
      "remote_method.method_name");
}

TEST(FrameDecoderMalformedTest, BodyLengthDoesNotAddUp) {
  std::string header = CallIdHeader();
  std::string too_big = Varint(header.size()) + header + Varint(5) + "abc";
  ExpectCorruption<RequestHeader>(BigEndian32(too_big.size()) + too_big,
                                  "frame sizes do not add up: body length 5 but 3 bytes remain");
  std::string too_small = Varint(header.size()) + header + Varint(1) + "abc";
  ExpectCorruption<RequestHeader>(BigEndian32(too_small.size()) + too_small,
                                  "frame sizes do not add up: body length 1 but 3 bytes remain");
}

TEST(FrameDecoderMalformedTest, SidecarOffsetsDecreasing) {
  // RequestHeader field 16, ResponseHeader field 3: sidecar_offsets.
  ExpectCorruption<RequestHeader>(
      HandFrame(CallIdHeader() + VarintField(16, 4) + VarintField(16, 2), "abcdef"),
      "sidecar offset 2 at index 1 is below the previous offset 4");
  ExpectCorruption<ResponseHeader>(
      HandFrame(CallIdHeader(1) + VarintField(3, 5) + VarintField(3, 1), "abcdef"),
      "sidecar offset 1 at index 1 is below the previous offset 5");
}

TEST(FrameDecoderMalformedTest, SidecarOffsetPastEnd) {
  ExpectCorruption<RequestHeader>(HandFrame(CallIdHeader() + VarintField(16, 7), "abcdef"),
                                  "sidecar offset 7 at index 0 is past the body's end at 6");
  ExpectCorruption<ResponseHeader>(
      HandFrame(CallIdHeader(1) + VarintField(3, 2) + VarintField(3, 1000), "abcdef"),
      "sidecar offset 1000 at index 1 is past the body's end at 6");
}

TEST(FrameDecoderMalformedTest, SidecarOffsetAtEndIsAnEmptySidecar) {
  // Not malformed: an offset equal to the body length is an empty sidecar.
  RequestFrameDecoder d;
  std::vector<InboundRequestFrame> frames;
  ASSERT_TRUE(
      d.Feed(Slice(HandFrame(CallIdHeader() + VarintField(16, 6), "abcdef")), &frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].main_message.ToString(), "abcdef");
  ASSERT_EQ(frames[0].sidecars.size(), 1u);
  EXPECT_TRUE(frames[0].sidecars[0].empty());
}

TEST(FrameDecoderMalformedTest, WriteSpaceNeverEmptyAfterError) {
  // A bad frame that exactly fills the read chunk: after the error there
  // must still be room to read into (found by frame_decoder_fuzzer).
  constexpr size_t kChunk = 16;
  std::string bad = HandFrame(VarintField(10, 5), std::string(8, 'b'));  // no call_id
  ASSERT_EQ(bad.size(), kChunk);
  RequestFrameDecoder d(kDefaultMaxFrameSize, kChunk);
  std::vector<InboundRequestFrame> frames;
  size_t space = 0;
  uint8_t* dst = d.WriteSpace(&space);
  ASSERT_EQ(space, kChunk);
  std::memcpy(dst, bad.data(), bad.size());
  Status s = d.Consume(bad.size(), &frames);
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  for (int i = 0; i < 3; ++i) {
    dst = d.WriteSpace(&space);
    ASSERT_NE(dst, nullptr);
    ASSERT_GT(space, 0u);
    EXPECT_EQ(d.Consume(std::min<size_t>(space, 4), &frames), s);
  }
}

TEST(FrameDecoderMalformedTest, GoodFramesBeforeTheBadOneAreReturned) {
  RequestHeader h;
  h.set_call_id(1);
  std::string stream = Encode(h, "one") + BigEndian32(0);
  RequestFrameDecoder d;
  std::vector<InboundRequestFrame> frames;
  Status s = d.Feed(Slice(stream), &frames);
  EXPECT_TRUE(s.IsCorruption());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].main_message.ToString(), "one");
}

TEST(ReadVarint32Test, ValuesAndErrors) {
  for (uint32_t v : {0u, 1u, 127u, 128u, 300u, 16383u, 16384u, 0xffffffffu}) {
    std::string bytes = Varint(v) + "rest";
    Slice in(bytes);
    uint32_t got = 0;
    ASSERT_TRUE(ReadVarint32(&in, &got).ok()) << v;
    EXPECT_EQ(got, v);
    EXPECT_EQ(in.ToString(), "rest");
  }
  uint32_t v;
  Slice empty;
  EXPECT_NE(ReadVarint32(&empty, &v).message().find("truncated"), std::string::npos);
  std::string over = Varint(uint64_t{1} << 32);  // 5 bytes, above 32 bits
  Slice in(over);
  Status s = ReadVarint32(&in, &v);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("overflows 32 bits"), std::string::npos) << s.ToString();
  EXPECT_EQ(in.size(), over.size());  // not advanced on error
}

}  // namespace
}  // namespace osprey::wire
