// Feeds arbitrary bytes to both frame decoders, split into pieces at points
// derived from the input itself, so that the fuzzer explores partial reads
// as well as frame contents. The decoders must never crash, and what they
// return must be self-consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "osprey/wire/frame_decoder.h"

namespace {

// Small enough that the fuzzer reaches "too large" and "larger than the
// chunk" without producing huge inputs.
constexpr size_t kMaxFrameSize = 1024 * 1024;
constexpr size_t kChunkSize = 256;

template <class Header>
void Check(const osprey::wire::InboundFrame<Header>& f) {
  // Every slice must lie inside the frame's storage; touching each byte lets
  // ASan catch one that does not.
  uint8_t sum = 0;
  for (size_t i = 0; i < f.main_message.size(); ++i) sum ^= f.main_message[i];
  for (const auto& sc : f.sidecars) {
    for (size_t i = 0; i < sc.size(); ++i) sum ^= sc[i];
  }
  if (f.sidecars.size() != static_cast<size_t>(f.header.sidecar_offsets_size())) abort();
  if (!f.storage) abort();
  (void)sum;
}

template <class Header>
std::vector<osprey::wire::InboundFrame<Header>> Run(const uint8_t* data, size_t size,
                                                    uint8_t split_seed, bool use_feed) {
  osprey::wire::FrameDecoder<Header> decoder(kMaxFrameSize, kChunkSize);
  std::vector<osprey::wire::InboundFrame<Header>> frames;
  // Piece sizes cycle through 1..(split_seed + 1), so seed 0 is byte at a
  // time and 255 is large reads.
  size_t step = 0;
  size_t pos = 0;
  osprey::Status first_error;
  while (pos < size) {
    size_t want = 1 + (split_seed == 0 ? 0 : (step++ * 7 + split_seed) % (size_t{split_seed} + 1));
    size_t n = want < size - pos ? want : size - pos;
    osprey::Status s;
    if (use_feed) {
      s = decoder.Feed(osprey::Slice(data + pos, n), &frames);
    } else {
      size_t space = 0;
      uint8_t* dst = decoder.WriteSpace(&space);
      if (space == 0) abort();  // documented as never empty
      if (n > space) n = space;
      std::memcpy(dst, data + pos, n);
      s = decoder.Consume(n, &frames);
    }
    pos += n;
    if (!s.ok()) {
      if (!s.IsCorruption()) abort();
      // Sticky: the same error again on any later input.
      if (!first_error.ok() && !(s == first_error)) abort();
      first_error = s;
    }
  }
  for (const auto& f : frames) Check(f);
  return frames;
}

// The hand-parsed header views must accept what protobuf accepts and read
// the same fields (groups and request_id aside, which KRPC never sends).
void CompareRequests(const std::vector<osprey::wire::InboundRequestFrame>& pb,
                     const std::vector<osprey::wire::InboundRequest>& view) {
  size_t n = pb.size() < view.size() ? pb.size() : view.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& a = pb[i].header;
    const auto& b = view[i].header;
    if (a.call_id() != b.call_id() || a.has_remote_method() != b.has_remote_method() ||
        a.remote_method().service_name() != b.remote_method().service_name() ||
        a.remote_method().method_name() != b.remote_method().method_name() ||
        a.timeout_millis() != b.timeout_millis() ||
        a.sidecar_offsets_size() != b.sidecar_offsets_size() ||
        !(pb[i].main_message == view[i].main_message)) {
      abort();
    }
  }
}

void CompareResponses(const std::vector<osprey::wire::InboundResponseFrame>& pb,
                      const std::vector<osprey::wire::InboundResponse>& view) {
  size_t n = pb.size() < view.size() ? pb.size() : view.size();
  for (size_t i = 0; i < n; ++i) {
    if (pb[i].header.call_id() != view[i].header.call_id() ||
        pb[i].header.is_error() != view[i].header.is_error() ||
        pb[i].header.sidecar_offsets_size() != view[i].header.sidecar_offsets_size() ||
        !(pb[i].main_message == view[i].main_message)) {
      abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t split_seed = data[0];
  ++data;
  --size;
  for (bool use_feed : {true, false}) {
    CompareRequests(Run<osprey::wire::RequestHeader>(data, size, split_seed, use_feed),
                    Run<osprey::wire::RequestHeaderView>(data, size, split_seed, use_feed));
    CompareResponses(Run<osprey::wire::ResponseHeader>(data, size, split_seed, use_feed),
                     Run<osprey::wire::ResponseHeaderView>(data, size, split_seed, use_feed));
  }
  return 0;
}
