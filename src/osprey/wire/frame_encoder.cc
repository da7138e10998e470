#include "osprey/wire/frame_encoder.h"

#include <cstring>
#include <limits>

#include <google/protobuf/io/coded_stream.h>

#include "osprey/wire/rpc_header.pb.h"

namespace osprey::wire {
namespace {

using google::protobuf::io::CodedOutputStream;

uint8_t* WriteVarint32(uint32_t v, uint8_t* p) {
  return CodedOutputStream::WriteVarint32ToArray(v, p);
}

}  // namespace

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
  size_t header_len = header->ByteSizeLong();
  uint64_t total = uint64_t{CodedOutputStream::VarintSize32(static_cast<uint32_t>(header_len))} +
                   header_len + CodedOutputStream::VarintSize32(static_cast<uint32_t>(body_len)) +
                   body_len;
  if (body_len > kMax || total > kMax) {
    return Status::InvalidArgument("frame of " + std::to_string(total) +
                                   " bytes does not fit a 32-bit frame length");
  }
  std::unique_ptr<OutboundFrame> f(new OutboundFrame());
  size_t prefix_len = total - (body_len - main_len) + 4;
  f->prefix_.resize(prefix_len);
  auto* p = reinterpret_cast<uint8_t*>(f->prefix_.data());
  uint32_t t = static_cast<uint32_t>(total);
  p[0] = static_cast<uint8_t>(t >> 24);
  p[1] = static_cast<uint8_t>(t >> 16);
  p[2] = static_cast<uint8_t>(t >> 8);
  p[3] = static_cast<uint8_t>(t);
  p = WriteVarint32(static_cast<uint32_t>(header_len), p + 4);
  p = header->SerializeWithCachedSizesToArray(p);
  p = WriteVarint32(static_cast<uint32_t>(body_len), p);
  *main_dst = p;
  f->sidecars_ = std::move(sidecars);
  f->total_size_ = 4 + total;
  *out = std::move(f);
  return Status::OK();
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

std::unique_ptr<OutboundFrame> OutboundFrame::FromBytes(std::string bytes) {
  std::unique_ptr<OutboundFrame> f(new OutboundFrame());
  f->total_size_ = bytes.size();
  f->prefix_ = std::move(bytes);
  return f;
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
  add(prefix_);
  for (const auto& sc : sidecars_) add(sc);
}

void OutboundFrame::Advance(size_t* n) {
  size_t take = std::min(*n, total_size_ - sent_);
  sent_ += take;
  *n -= take;
}

std::string OutboundFrame::ToString() const {
  std::string s = prefix_;
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
