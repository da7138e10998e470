// FrameDecoder: turns a byte stream, split anywhere, into whole frames.
//
// The caller reads straight into WriteSpace() and then calls Consume(); or
// hands over bytes it already has with Feed(). Frames come out as
// InboundFrame whose slices point into the decoder's read buffers (shared,
// reference counted), so a frame's body is never copied after the read that
// brought it in; a frame larger than the read chunk gets a buffer of its own
// size, taken only after its length passed the max-frame-size check. Read
// buffers come from BufferPool::Default(), so large ones are reused.
//
// After a Corruption error the stream is out of sync: every later call
// returns the same error. One thread at a time (a connection's reactor).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/slice.h"
#include "osprey/base/status.h"
#include "osprey/wire/frame.h"

namespace osprey::wire {

template <class Header>
class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_frame_size = kDefaultMaxFrameSize,
                        size_t chunk_size = 64 * 1024);

  // Room to read into: never empty. Valid until the next call on the decoder.
  uint8_t* WriteSpace(size_t* len);
  // `n` bytes were written at WriteSpace(); appends every frame now whole,
  // at most `max_frames` of them (the rest stay buffered: call again with
  // n = 0). Negotiation takes one frame at a time because the bytes after
  // the TLS handshake are records, not frames.
  Status Consume(size_t n, std::vector<InboundFrame<Header>>* out, size_t max_frames = SIZE_MAX);
  // Copies `bytes` in and appends every frame now whole.
  Status Feed(Slice bytes, std::vector<InboundFrame<Header>>* out);

  // Moves the buffered bytes not yet returned as frames to *out: they
  // belong to another layer (TLS records after the handshake).
  void TakeUnparsed(std::string* out);

  // Bytes received that do not yet make a whole frame.
  size_t buffered_bytes() const { return end_ - start_; }
  // The memory the frame in progress holds: its bytes received, or, for a
  // frame larger than the read chunk, the buffer of its own size taken for
  // it (from the next WriteSpace() on; counted from the moment its length
  // is read). That buffer comes from the pool, whose pages a frame before
  // may have made resident: a peer that sent a large frame's length and
  // then little holds all of it.
  size_t held_bytes() const {
    const size_t received = end_ - start_;
    return pending_frame_size_ > chunk_size_ ? std::max(received, pending_frame_size_) : received;
  }
  size_t max_frame_size() const { return max_frame_size_; }
  // Frames whose length is read from now on are checked against `bytes`
  // (a connection raises it once negotiation is over).
  void set_max_frame_size(size_t bytes) { max_frame_size_ = bytes; }

 private:
  Status ParseFrame(const uint8_t* frame, size_t len, InboundFrame<Header>* out) const;

  size_t max_frame_size_;
  const size_t chunk_size_;
  std::shared_ptr<uint8_t[]> buf_;
  size_t cap_ = 0;
  size_t start_ = 0;  // first byte not yet part of a returned frame
  size_t end_ = 0;    // one past the last byte received
  // 4 + total_len of the frame at start_, once its length was read and
  // checked; 0 before.
  size_t pending_frame_size_ = 0;
  Status error_;
};

using RequestFrameDecoder = FrameDecoder<RequestHeader>;
using ResponseFrameDecoder = FrameDecoder<ResponseHeader>;
// The decoders connections use: headers parsed by hand (header_view.h).
using RequestDecoder = FrameDecoder<RequestHeaderView>;
using ResponseDecoder = FrameDecoder<ResponseHeaderView>;

// Parses a varint32 at the start of `in`; advances `in` past it. Corruption
// if it is longer than 5 bytes, overflows 32 bits or runs off the end.
Status ReadVarint32(Slice* in, uint32_t* value);

}  // namespace osprey::wire
