#include "osprey/wire/frame_encoder.h"

#include <google/protobuf/io/coded_stream.h>

#include <cstring>
#include <limits>

#include "osprey/wire/rpc_header.pb.h"

namespace osprey::wire {
namespace {

using google::protobuf::io::CodedOutputStream;

uint8_t* WriteVarint32(uint32_t v, uint8_t* p) {
  return CodedOutputStream::WriteVarint32ToArray(v, p);
}

}  // namespace

Status OutboundFrame::LayOut(std::string_view header, size_t main_len, uint64_t body_len,
                             std::vector<std::string> sidecars, std::unique_ptr<OutboundFrame>* out,
                             uint8_t** main_dst) {
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  uint64_t total = uint64_t{CodedOutputStream::VarintSize32(static_cast<uint32_t>(header.size()))} +
                   header.size() +
                   CodedOutputStream::VarintSize32(static_cast<uint32_t>(body_len)) + body_len;
  if (body_len > kMax || total > kMax) {
    return Status::InvalidArgument("frame of " + std::to_string(total) +
                                   " bytes does not fit a 32-bit frame length");
  }
  std::unique_ptr<OutboundFrame> f(new OutboundFrame());
  size_t prefix_len = total - (body_len - main_len) + 4;
  auto* p = f->AllocatePrefix(prefix_len);
  uint32_t t = static_cast<uint32_t>(total);
  p[0] = static_cast<uint8_t>(t >> 24);
  p[1] = static_cast<uint8_t>(t >> 16);
  p[2] = static_cast<uint8_t>(t >> 8);
  p[3] = static_cast<uint8_t>(t);
  p = WriteVarint32(static_cast<uint32_t>(header.size()), p + 4);
  std::memcpy(p, header.data(), header.size());
  p += header.size();
  p = WriteVarint32(static_cast<uint32_t>(body_len), p);
  *main_dst = p;
  f->sidecars_ = std::move(sidecars);
  f->total_size_ = 4 + total;
  *out = std::move(f);
  return Status::OK();
}

template <class Header>
Status OutboundFrame::Build(Header* header, size_t main_len, std::vector<std::string> sidecars,
                            std::unique_ptr<OutboundFrame>* out, uint8_t** main_dst) {
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  header->clear_sidecar_offsets();
  uint64_t body_len = main_len;
  for (const auto& sc : sidecars) {
    if (body_len > kMax) break;
    header->add_sidecar_offsets(static_cast<uint32_t>(body_len));
    body_len += sc.size();
  }
  return LayOut(header->SerializeAsString(), main_len, body_len, std::move(sidecars), out,
                main_dst);
}

template <class Header>
Status OutboundFrame::Encode(Header* header, const google::protobuf::MessageLite& main,
                             std::vector<std::string> sidecars,
                             std::unique_ptr<OutboundFrame>* out) {
  size_t main_len = main.ByteSizeLong();
  uint8_t* dst;
  OSPREY_RETURN_NOT_OK(Build(header, main_len, std::move(sidecars), out, &dst));
  main.SerializeWithCachedSizesToArray(dst);
  return Status::OK();
}

template <class Header>
Status OutboundFrame::EncodeSerialized(Header* header, Slice main,
                                       std::vector<std::string> sidecars,
                                       std::unique_ptr<OutboundFrame>* out) {
  uint8_t* dst;
  OSPREY_RETURN_NOT_OK(Build(header, main.size(), std::move(sidecars), out, &dst));
  if (!main.empty()) std::memcpy(dst, main.data(), main.size());
  return Status::OK();
}

namespace {

// Appends a varint as protobuf writes it: int32 fields sign-extend to 64 bits.
void PutVarint64(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutInt32Field(uint32_t tag, int32_t v, std::string* out) {
  PutVarint64(tag, out);
  PutVarint64(static_cast<uint64_t>(static_cast<int64_t>(v)), out);
}

// Field tags: (number << 3) | wire type.
constexpr uint32_t kRequestCallIdTag = (3 << 3) | 0;
constexpr uint32_t kRequestRemoteMethodTag = (6 << 3) | 2;
constexpr uint32_t kRequestTimeoutTag = (10 << 3) | 0;
constexpr uint32_t kRequestFeatureFlagsTag = (11 << 3) | 0;
constexpr uint32_t kRequestRequestIdTag = (15 << 3) | 2;
constexpr uint32_t kRequestSidecarOffsetsTag = (16 << 3) | 0;
constexpr uint32_t kResponseCallIdTag = (1 << 3) | 0;
constexpr uint32_t kResponseIsErrorTag = (2 << 3) | 0;
constexpr uint32_t kResponseSidecarOffsetsTag = (3 << 3) | 0;

// A ResponseHeader with call_id and is_error, as protobuf writes it: at
// most 13 bytes, which stay in the string's inline buffer.
std::string ResponseHeaderFields(int32_t call_id, bool is_error) {
  std::string header;
  PutInt32Field(kResponseCallIdTag, call_id, &header);
  header.push_back(static_cast<char>(kResponseIsErrorTag));
  header.push_back(is_error ? 1 : 0);
  return header;
}

}  // namespace

Status OutboundFrame::BuildRaw(std::string_view header_fields, uint32_t offsets_tag,
                               size_t main_len, std::vector<std::string> sidecars,
                               std::unique_ptr<OutboundFrame>* out, uint8_t** main_dst) {
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  std::string header_heap;
  uint64_t body_len = main_len;
  if (!sidecars.empty()) {
    header_heap.assign(header_fields);
    for (const auto& sc : sidecars) {
      if (body_len > kMax) break;
      PutVarint64(offsets_tag, &header_heap);
      PutVarint64(body_len, &header_heap);
      body_len += sc.size();
    }
    header_fields = header_heap;
  }
  return LayOut(header_fields, main_len, body_len, std::move(sidecars), out, main_dst);
}

Status OutboundFrame::EncodeRequest(int32_t call_id, Slice remote_method_pb,
                                    uint32_t timeout_millis,
                                    const std::vector<uint32_t>& required_feature_flags, Slice main,
                                    std::vector<std::string> sidecars,
                                    std::unique_ptr<OutboundFrame>* out) {
  return EncodeRequest(call_id, remote_method_pb, timeout_millis, required_feature_flags, Slice(),
                       main, std::move(sidecars), out);
}

Status OutboundFrame::EncodeRequest(int32_t call_id, Slice remote_method_pb,
                                    uint32_t timeout_millis,
                                    const std::vector<uint32_t>& required_feature_flags,
                                    Slice request_id_pb, Slice main,
                                    std::vector<std::string> sidecars,
                                    std::unique_ptr<OutboundFrame>* out) {
  // At most 11 + 1 + 5 + name bytes + 1 + 5, 1 + 5 per feature flag, and
  // 1 + 5 + the request id: on the stack unless the names are unusually
  // long.
  size_t max_len = remote_method_pb.size() + 23 + 6 * required_feature_flags.size() +
                   (request_id_pb.empty() ? 0 : 6 + request_id_pb.size());
  uint8_t stack_buf[256];
  std::unique_ptr<uint8_t[]> heap_buf;
  uint8_t* start = stack_buf;
  if (max_len > sizeof(stack_buf)) {
    heap_buf.reset(new uint8_t[max_len]);
    start = heap_buf.get();
  }
  uint8_t* p = start;
  p = WriteVarint32(kRequestCallIdTag, p);
  p = CodedOutputStream::WriteVarint64ToArray(static_cast<uint64_t>(static_cast<int64_t>(call_id)),
                                              p);
  p = WriteVarint32(kRequestRemoteMethodTag, p);
  p = WriteVarint32(static_cast<uint32_t>(remote_method_pb.size()), p);
  std::memcpy(p, remote_method_pb.data(), remote_method_pb.size());
  p += remote_method_pb.size();
  if (timeout_millis != 0) {
    p = WriteVarint32(kRequestTimeoutTag, p);
    p = WriteVarint32(timeout_millis, p);
  }
  for (uint32_t flag : required_feature_flags) {
    p = WriteVarint32(kRequestFeatureFlagsTag, p);
    p = WriteVarint32(flag, p);
  }
  if (!request_id_pb.empty()) {
    p = WriteVarint32(kRequestRequestIdTag, p);
    p = WriteVarint32(static_cast<uint32_t>(request_id_pb.size()), p);
    std::memcpy(p, request_id_pb.data(), request_id_pb.size());
    p += request_id_pb.size();
  }
  std::string_view header(reinterpret_cast<const char*>(start), static_cast<size_t>(p - start));
  uint8_t* dst;
  OSPREY_RETURN_NOT_OK(
      BuildRaw(header, kRequestSidecarOffsetsTag, main.size(), std::move(sidecars), out, &dst));
  if (!main.empty()) std::memcpy(dst, main.data(), main.size());
  return Status::OK();
}

Status OutboundFrame::EncodeResponse(int32_t call_id, bool is_error,
                                     const google::protobuf::MessageLite& main,
                                     std::vector<std::string> sidecars,
                                     std::unique_ptr<OutboundFrame>* out) {
  const std::string header = ResponseHeaderFields(call_id, is_error);
  size_t main_len = main.ByteSizeLong();
  uint8_t* dst;
  OSPREY_RETURN_NOT_OK(
      BuildRaw(header, kResponseSidecarOffsetsTag, main_len, std::move(sidecars), out, &dst));
  main.SerializeWithCachedSizesToArray(dst);
  return Status::OK();
}

Status OutboundFrame::EncodeSharedResponse(int32_t call_id, bool is_error,
                                           std::shared_ptr<const std::string> main,
                                           std::unique_ptr<OutboundFrame>* out) {
  const std::string header = ResponseHeaderFields(call_id, is_error);
  uint8_t* dst;
  // The main message is not in the prefix: laid out as zero bytes of it.
  OSPREY_RETURN_NOT_OK(LayOut(header, 0, main->size(), {}, out, &dst));
  (*out)->shared_main_ = std::move(main);
  return Status::OK();
}

std::unique_ptr<OutboundFrame> OutboundFrame::FromBytes(std::string bytes) {
  std::unique_ptr<OutboundFrame> f(new OutboundFrame());
  f->total_size_ = bytes.size();
  f->bytes_ = std::move(bytes);
  return f;
}

uint8_t* OutboundFrame::AllocatePrefix(size_t n) {
  prefix_len_ = n;
  if (n <= kInlinePrefix) return inline_prefix_;
  pooled_prefix_ = BufferPool::Default()->Take(n);
  return pooled_prefix_.data();
}

Slice OutboundFrame::prefix() const {
  if (prefix_len_ == 0) return Slice(bytes_);
  return Slice(prefix_len_ <= kInlinePrefix ? inline_prefix_ : pooled_prefix_.data(), prefix_len_);
}

void OutboundFrame::AppendIovecs(std::vector<iovec>* iov) const {
  size_t skip = sent_;
  auto add = [&](const std::string& s) {
    if (skip >= s.size()) {
      skip -= s.size();
      return;
    }
    iov->push_back(iovec{const_cast<char*>(s.data()) + skip, s.size() - skip});
    skip = 0;
  };
  Slice pre = prefix();
  if (skip >= pre.size()) {
    skip -= pre.size();
  } else {
    iov->push_back(iovec{const_cast<uint8_t*>(pre.data()) + skip, pre.size() - skip});
    skip = 0;
  }
  if (shared_main_ != nullptr) add(*shared_main_);
  for (const auto& sc : sidecars_) add(sc);
}

void OutboundFrame::Advance(size_t* n) {
  size_t take = std::min(*n, total_size_ - sent_);
  sent_ += take;
  *n -= take;
}

std::string OutboundFrame::ToString() const {
  std::string s = prefix().ToString();
  if (shared_main_ != nullptr) s += *shared_main_;
  for (const auto& sc : sidecars_) s += sc;
  return s;
}

template Status OutboundFrame::Encode(RequestHeader*, const google::protobuf::MessageLite&,
                                      std::vector<std::string>, std::unique_ptr<OutboundFrame>*);
template Status OutboundFrame::Encode(ResponseHeader*, const google::protobuf::MessageLite&,
                                      std::vector<std::string>, std::unique_ptr<OutboundFrame>*);
template Status OutboundFrame::EncodeSerialized(RequestHeader*, Slice, std::vector<std::string>,
                                                std::unique_ptr<OutboundFrame>*);
template Status OutboundFrame::EncodeSerialized(ResponseHeader*, Slice, std::vector<std::string>,
                                                std::unique_ptr<OutboundFrame>*);

}  // namespace osprey::wire
