#include "osprey/wire/frame_decoder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "osprey/base/buffer_pool.h"

namespace osprey::wire {
namespace {

// The smallest possible frame after its length: a 1-byte header length, a
// 2-byte header (call_id is required), a 1-byte body length.
constexpr size_t kMinTotalLen = 4;

const char* HeaderTypeName(const RequestHeader&) { return "RequestHeader"; }
const char* HeaderTypeName(const ResponseHeader&) { return "ResponseHeader"; }
const char* HeaderTypeName(const RequestHeaderView&) { return RequestHeaderView::TypeName(); }
const char* HeaderTypeName(const ResponseHeaderView&) { return ResponseHeaderView::TypeName(); }

// Why a header view stopped parsing, if a count limit stopped it; the
// protobuf classes (tests and tools only) have no such limit while parsing
// and are checked after.
std::string LimitExceeded(const RequestHeaderView& h) { return h.limit_exceeded(); }
std::string LimitExceeded(const ResponseHeaderView& h) { return h.limit_exceeded(); }
std::string LimitExceeded(const RequestHeader&) { return {}; }
std::string LimitExceeded(const ResponseHeader&) { return {}; }

// The header views take a size_t; protobuf's classes an int, which a
// header_len under kMaxMaxFrameSize always fits.
bool ParseHeader(RequestHeaderView* h, const uint8_t* p, size_t n) {
  return h->ParsePartialFromArray(p, n);
}
bool ParseHeader(ResponseHeaderView* h, const uint8_t* p, size_t n) {
  return h->ParsePartialFromArray(p, n);
}
template <class Pb>
bool ParseHeader(Pb* h, const uint8_t* p, size_t n) {
  return n <= kMaxMaxFrameSize && h->ParsePartialFromArray(p, static_cast<int>(n));
}

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// True when no frame holds `buf` any more, so the decoder may write over
// it. use_count() alone is a relaxed load: it shows the last frame was
// dropped, not that the thread which dropped it (a worker) is ordered
// before our writes. Taking and dropping a reference is an acquire-release
// operation on the same count, which gives that order.
bool SoleOwner(const std::shared_ptr<uint8_t[]>& buf) {
  if (!buf || buf.use_count() != 1) return false;
  std::shared_ptr<uint8_t[]> probe = buf;
  probe.reset();
  return true;
}

}  // namespace

Status ReadVarint32(Slice* in, uint32_t* value) {
  uint64_t result = 0;
  for (size_t i = 0; i < 5; ++i) {
    if (i >= in->size()) return Status::Corruption("truncated varint");
    uint8_t b = (*in)[i];
    result |= uint64_t{static_cast<uint8_t>(b & 0x7f)} << (7 * i);
    if ((b & 0x80) == 0) {
      if (result > UINT32_MAX) return Status::Corruption("varint overflows 32 bits");
      *value = static_cast<uint32_t>(result);
      in->remove_prefix(i + 1);
      return Status::OK();
    }
  }
  return Status::Corruption("varint longer than 5 bytes");
}

template <class Header>
FrameDecoder<Header>::FrameDecoder(size_t max_frame_size, size_t chunk_size)
    : max_frame_size_(max_frame_size), chunk_size_(std::max<size_t>(chunk_size, 16)) {}

template <class Header>
uint8_t* FrameDecoder<Header>::WriteSpace(size_t* len) {
  if (!error_.ok()) {
    // Out of sync: what is buffered will never make a frame. Drop it, or a
    // frame that filled the buffer and failed to parse would leave no room
    // and break the "never empty" promise (a read of 0 bytes looks like EOF).
    // Bytes before start_ may still back returned frames and are kept.
    end_ = start_;
    pending_frame_size_ = 0;
  }
  size_t have = end_ - start_;
  if (have == 0 && SoleOwner(buf_)) {
    // No frame refers to this buffer any more: start over at its beginning.
    start_ = end_ = 0;
    pending_frame_size_ = 0;
  }
  // The whole of the next frame must end up contiguous in one buffer.
  size_t need = pending_frame_size_ != 0 ? pending_frame_size_ : 4;
  if (!buf_ || start_ + need > cap_ || end_ == cap_) {
    size_t new_cap = std::max(chunk_size_, need);
    if (new_cap <= cap_ && SoleOwner(buf_)) {
      std::memmove(buf_.get(), buf_.get() + start_, have);
    } else {
      // From the process's pool: a large frame's buffer, dropped when the
      // worker is done with the call, is reused by the next large frame.
      size_t got;
      auto fresh = BufferPool::Default()->TakeShared(new_cap, &got);
      if (have > 0) std::memcpy(fresh.get(), buf_.get() + start_, have);
      buf_ = std::move(fresh);
      cap_ = got;
    }
    start_ = 0;
    end_ = have;
  }
  *len = cap_ - end_;
  if (pending_frame_size_ > chunk_size_) {
    // A large frame: read only its own bytes into its own buffer, so the
    // next frame starts in a fresh chunk instead of being copied out.
    *len = std::min(*len, start_ + pending_frame_size_ - end_);
  }
  return buf_.get() + end_;
}

template <class Header>
Status FrameDecoder<Header>::Consume(size_t n, std::vector<InboundFrame<Header>>* out,
                                     size_t max_frames) {
  if (!error_.ok()) return error_;
  end_ += n;
  for (size_t taken = 0; taken < max_frames; ++taken) {
    size_t have = end_ - start_;
    if (pending_frame_size_ == 0) {
      if (have < 4) return Status::OK();
      uint32_t total = ReadBigEndian32(buf_.get() + start_);
      if (total < kMinTotalLen) {
        error_ = Status::Corruption("frame length " + std::to_string(total) +
                                    " is too small to hold a header and a body");
        return error_;
      }
      if (total > max_frame_size_) {
        error_ = Status::Corruption("frame length " + std::to_string(total) +
                                    " exceeds the maximum frame size of " +
                                    std::to_string(max_frame_size_) + " bytes");
        return error_;
      }
      pending_frame_size_ = 4 + size_t{total};
    }
    if (have < pending_frame_size_) return Status::OK();
    // Parsed in place: moving a parsed protobuf header costs a swap.
    InboundFrame<Header>& frame = out->emplace_back();
    Status s = ParseFrame(buf_.get() + start_ + 4, pending_frame_size_ - 4, &frame);
    if (!s.ok()) {
      out->pop_back();
      error_ = s;
      return error_;
    }
    frame.storage = buf_;
    start_ += pending_frame_size_;
    if (pending_frame_size_ > chunk_size_ && start_ == end_) {
      // A large frame's own buffer: it goes back to the pool with the
      // frame, instead of staying this connection's read buffer (an idle
      // connection would keep its largest frame's bytes).
      buf_.reset();
      cap_ = start_ = end_ = 0;
    }
    pending_frame_size_ = 0;
  }
  return Status::OK();
}

template <class Header>
void FrameDecoder<Header>::TakeUnparsed(std::string* out) {
  if (end_ > start_) out->append(reinterpret_cast<const char*>(buf_.get() + start_), end_ - start_);
  end_ = start_;
  pending_frame_size_ = 0;
}

template <class Header>
Status FrameDecoder<Header>::Feed(Slice bytes, std::vector<InboundFrame<Header>>* out) {
  while (!bytes.empty()) {
    if (!error_.ok()) return error_;
    size_t space;
    uint8_t* dst = WriteSpace(&space);
    size_t n = std::min(space, bytes.size());
    std::memcpy(dst, bytes.data(), n);
    bytes.remove_prefix(n);
    OSPREY_RETURN_NOT_OK(Consume(n, out));
  }
  return error_;
}

template <class Header>
Status FrameDecoder<Header>::ParseFrame(const uint8_t* data, size_t len,
                                        InboundFrame<Header>* out) const {
  Slice in(data, len);
  uint32_t header_len;
  Status s = ReadVarint32(&in, &header_len);
  if (!s.ok()) return s.CloneAndPrepend("bad header length");
  if (header_len > in.size()) {
    return Status::Corruption("header length " + std::to_string(header_len) + " exceeds the " +
                              std::to_string(in.size()) + " bytes left in the frame");
  }
  if (!ParseHeader(&out->header, in.data(), header_len)) {
    std::string limit = LimitExceeded(out->header);
    if (!limit.empty()) {
      return Status::Corruption(std::string("frame header (") + HeaderTypeName(out->header) +
                                ") lists " + limit);
    }
    return Status::Corruption(std::string("frame header does not parse as ") +
                              HeaderTypeName(out->header));
  }
  if (!out->header.IsInitialized()) {
    return Status::Corruption("frame header lacks required fields: " +
                              out->header.InitializationErrorString());
  }
  in.remove_prefix(header_len);
  uint32_t body_len;
  s = ReadVarint32(&in, &body_len);
  if (!s.ok()) return s.CloneAndPrepend("bad body length");
  if (body_len != in.size()) {
    return Status::Corruption("frame sizes do not add up: body length " + std::to_string(body_len) +
                              " but " + std::to_string(in.size()) + " bytes remain in the frame");
  }
  const auto& offsets = out->header.sidecar_offsets();
  if (static_cast<size_t>(offsets.size()) > kMaxSidecars) {
    return Status::Corruption(std::string("frame header (") + HeaderTypeName(out->header) +
                              ") lists more than " + std::to_string(kMaxSidecars) + " sidecars");
  }
  if (offsets.empty()) {
    out->main_message = in;
    return Status::OK();
  }
  uint32_t prev = 0;
  for (int i = 0; i < static_cast<int>(offsets.size()); ++i) {
    uint32_t off = offsets[i];
    if (off < prev) {
      return Status::Corruption("sidecar offset " + std::to_string(off) + " at index " +
                                std::to_string(i) + " is below the previous offset " +
                                std::to_string(prev));
    }
    if (off > body_len) {
      return Status::Corruption("sidecar offset " + std::to_string(off) + " at index " +
                                std::to_string(i) + " is past the body's end at " +
                                std::to_string(body_len));
    }
    prev = off;
  }
  out->main_message = in.sub(0, offsets[0]);
  out->sidecars.reserve(offsets.size());
  for (int i = 0; i < static_cast<int>(offsets.size()); ++i) {
    uint32_t begin = offsets[i];
    uint32_t end = i + 1 < static_cast<int>(offsets.size()) ? offsets[i + 1] : body_len;
    out->sidecars.push_back(in.sub(begin, end - begin));
  }
  return Status::OK();
}

template class FrameDecoder<RequestHeader>;
template class FrameDecoder<ResponseHeader>;
template class FrameDecoder<RequestHeaderView>;
template class FrameDecoder<ResponseHeaderView>;

}  // namespace osprey::wire
