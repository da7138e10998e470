// OutboundFrame: one frame ready to send, as a contiguous prefix (length,
// header, body length and main message) followed by the sidecars, each its
// own iovec so their bytes are never copied (a shared main message, see
// EncodeSharedResponse, is one too, between them). Tracks how much of it a
// partial writev already sent. One thread at a time.
#pragma once

#include <google/protobuf/message_lite.h>
#include <sys/uio.h>

#include <memory>
#include <string>
#include <vector>

#include "osprey/base/buffer_pool.h"
#include "osprey/base/call_block_cache.h"
#include "osprey/base/slice.h"
#include "osprey/base/status.h"

namespace osprey::wire {

class OutboundFrame {
 public:
  // An answer's frame is made on a worker and freed on the reactor that
  // sent it: see CallBlockCache.
  OSPREY_ALLOCATED_FROM_CALL_BLOCK_CACHE(OutboundFrame)

  // Builds a frame. Sets header->sidecar_offsets from `main` and `sidecars`.
  // InvalidArgument if the frame would not fit a 32-bit length.
  template <class Header>
  static Status Encode(Header* header, const google::protobuf::MessageLite& main,
                       std::vector<std::string> sidecars, std::unique_ptr<OutboundFrame>* out);
  // As Encode, with the main message already serialized.
  template <class Header>
  static Status EncodeSerialized(Header* header, Slice main, std::vector<std::string> sidecars,
                                 std::unique_ptr<OutboundFrame>* out);

  // Fast paths for the per-call frames, with the header written by hand:
  // the same bytes protobuf writes for a RequestHeader with call_id,
  // remote_method (given pre-serialized), timeout_millis (0: none) and
  // required_feature_flags (unpacked, as Kudu's proto2 field), or a
  // ResponseHeader with call_id and is_error. Sidecar offsets are added as
  // in Encode().
  static Status EncodeRequest(int32_t call_id, Slice remote_method_pb, uint32_t timeout_millis,
                              const std::vector<uint32_t>& required_feature_flags, Slice main,
                              std::vector<std::string> sidecars,
                              std::unique_ptr<OutboundFrame>* out);
  // With request_id (a serialized RequestIdPB; empty: none), for methods
  // that track results.
  static Status EncodeRequest(int32_t call_id, Slice remote_method_pb, uint32_t timeout_millis,
                              const std::vector<uint32_t>& required_feature_flags,
                              Slice request_id_pb, Slice main, std::vector<std::string> sidecars,
                              std::unique_ptr<OutboundFrame>* out);
  static Status EncodeResponse(int32_t call_id, bool is_error,
                               const google::protobuf::MessageLite& main,
                               std::vector<std::string> sidecars,
                               std::unique_ptr<OutboundFrame>* out);

  // A response whose main message was serialized once and is shared by
  // every frame that sends it (a service queue's refusals, thousands a
  // second under overload): the frame keeps a reference to the bytes and
  // lays out only its length and header, so it stays in the inline prefix
  // and costs no serialization. No sidecars.
  static Status EncodeSharedResponse(int32_t call_id, bool is_error,
                                     std::shared_ptr<const std::string> main,
                                     std::unique_ptr<OutboundFrame>* out);
  // A frame of bytes already laid out, such as the connection header.
  static std::unique_ptr<OutboundFrame> FromBytes(std::string bytes);

  size_t total_size() const { return total_size_; }
  size_t bytes_remaining() const { return total_size_ - sent_; }
  bool done() const { return sent_ == total_size_; }

  // Appends iovecs for the bytes not yet sent.
  void AppendIovecs(std::vector<iovec>* iov) const;
  // Marks up to *n bytes as sent; *n is reduced by what this frame took.
  void Advance(size_t* n);

  // The whole frame as one string: for tests and tools.
  std::string ToString() const;

  // Over TLS, the frame's last byte ends a record: what follows starts a
  // new one. Negotiation messages need it: a Kudu server reads the
  // connection context through its TLS session and then waits for the
  // socket, so call bytes decrypted with the context would never be read.
  void set_ends_record() { ends_record_ = true; }
  bool ends_record() const { return ends_record_; }

 private:
  OutboundFrame() = default;
  // Lays out everything but the main message, whose `main_len` bytes the
  // caller writes at *main_dst. `header` holds the serialized header
  // without sidecar offsets; `offsets_tag` is their field's tag.
  static Status BuildRaw(std::string_view header, uint32_t offsets_tag, size_t main_len,
                         std::vector<std::string> sidecars, std::unique_ptr<OutboundFrame>* out,
                         uint8_t** main_dst);
  // Writes the length, header and body length of a frame whose body is
  // `body_len` bytes, `main_len` of them the main message.
  static Status LayOut(std::string_view header, size_t main_len, uint64_t body_len,
                       std::vector<std::string> sidecars, std::unique_ptr<OutboundFrame>* out,
                       uint8_t** main_dst);
  template <class Header>
  static Status Build(Header* header, size_t main_len, std::vector<std::string> sidecars,
                      std::unique_ptr<OutboundFrame>* out, uint8_t** main_dst);

  // The prefix lives inline when it is small (every per-call frame of a
  // small message), else in a buffer of the process's BufferPool (large
  // frames reuse kept buffers, never zero-filled): one allocation per frame
  // at most, not two. FromBytes() keeps its string.
  uint8_t* AllocatePrefix(size_t n);
  Slice prefix() const;
  static constexpr size_t kInlinePrefix = 128;
  uint8_t inline_prefix_[kInlinePrefix];
  size_t prefix_len_ = 0;  // inline or pooled
  BufferPool::Buffer pooled_prefix_;
  std::string bytes_;  // FromBytes()
  // EncodeSharedResponse's main message, sent between prefix and sidecars.
  std::shared_ptr<const std::string> shared_main_;
  std::vector<std::string> sidecars_;
  size_t total_size_ = 0;
  size_t sent_ = 0;
  bool ends_record_ = false;
};

}  // namespace osprey::wire
