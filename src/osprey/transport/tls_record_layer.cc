#include "osprey/transport/tls_record_layer.h"

#include <algorithm>

namespace osprey::transport {

namespace {
// Plaintext encrypted at once: big enough for few records per syscall,
// small enough that a large response is not held twice, whole.
constexpr size_t kEncryptBatch = 256 * 1024;
constexpr size_t kReadChunk = 64 * 1024;
// Pieces of a frame below this size are copied together before encryption.
constexpr size_t kGatherBelow = 4096;
}  // namespace

TlsRecordLayer::TlsRecordLayer(std::unique_ptr<TlsSession> session, FrameQueue* clear_prefix)
    : session_(std::move(session)) {
  for (auto& f : *clear_prefix) {
    iov_scratch_.clear();
    f->AppendIovecs(&iov_scratch_);
    for (const iovec& v : iov_scratch_) {
      wire_out_.append(static_cast<const char*>(v.iov_base), v.iov_len);
    }
  }
  clear_prefix->clear();
}

Status TlsRecordLayer::Flush(Socket* socket, FrameQueue* frames, size_t* frame_bytes,
                             size_t* wrote) {
  *wrote = 0;
  while (true) {
    if (wire_out_sent_ < wire_out_.size()) {
      iovec v{wire_out_.data() + wire_out_sent_, wire_out_.size() - wire_out_sent_};
      size_t n;
      OSPREY_RETURN_NOT_OK(socket->Writev(&v, 1, &n));
      *wrote += n;
      wire_out_sent_ += n;
      if (wire_out_sent_ < wire_out_.size()) return Status::OK();  // the socket is full
      wire_out_.clear();
      wire_out_sent_ = 0;
    }
    if (frames->empty()) return Status::OK();
    // Small pieces (headers, small messages) are gathered to share
    // records; large ones (bodies, sidecars) are encrypted in place.
    size_t budget = kEncryptBatch;
    plain_out_.clear();
    while (!frames->empty() && budget > 0) {
      wire::OutboundFrame* frame = frames->front().get();
      iov_scratch_.clear();
      frame->AppendIovecs(&iov_scratch_);
      size_t took = 0;
      for (const iovec& v : iov_scratch_) {
        if (took == budget) break;
        Slice piece(static_cast<const uint8_t*>(v.iov_base), std::min(v.iov_len, budget - took));
        if (piece.size() < kGatherBelow) {
          plain_out_.append(reinterpret_cast<const char*>(piece.data()), piece.size());
        } else {
          if (!plain_out_.empty()) OSPREY_RETURN_NOT_OK(session_->Encrypt(plain_out_, &wire_out_));
          plain_out_.clear();
          OSPREY_RETURN_NOT_OK(session_->Encrypt(piece, &wire_out_));
        }
        took += piece.size();
      }
      budget -= took;
      // Bytes encrypted leave the frames' count as they join the records',
      // so that a frame cut between batches is not counted twice.
      *frame_bytes -= took;
      frame->Advance(&took);
      if (frame->done()) {
        if (frame->ends_record() && !plain_out_.empty()) {
          OSPREY_RETURN_NOT_OK(session_->Encrypt(plain_out_, &wire_out_));
          plain_out_.clear();
        }
        frames->pop_front();
      }
    }
    if (!plain_out_.empty()) OSPREY_RETURN_NOT_OK(session_->Encrypt(plain_out_, &wire_out_));
  }
}

void TlsRecordLayer::CloseNotify(Socket* socket) {
  // Best effort: what is left of the records goes first, and the alert only
  // after the last of them, never behind a record cut short (a peer that
  // does not read gets no goodbye).
  size_t n = 0;
  if (wire_out_sent_ < wire_out_.size()) {
    iovec rest{wire_out_.data() + wire_out_sent_, wire_out_.size() - wire_out_sent_};
    if (socket->Writev(&rest, 1, &n).ok()) wire_out_sent_ += n;
  }
  if (wire_out_sent_ == wire_out_.size()) {
    wire_out_.clear();
    session_->CloseNotify(&wire_out_);
    iovec alert{wire_out_.data(), wire_out_.size()};
    (void)socket->Writev(&alert, 1, &n);
  }
  wire_out_.clear();
  wire_out_sent_ = 0;
}

uint8_t* TlsRecordLayer::ReadBuffer(size_t* size) {
  if (read_buf_.empty()) read_buf_.resize(kReadChunk);
  *size = read_buf_.size();
  return read_buf_.data();
}

Status TlsRecordLayer::Decrypt(Slice records, PlaintextSink* sink, bool* answered) {
  if (keep_raw_input_ && !records.empty()) {
    if (raw_input_.empty() && records[0] != 0) {
      // Records: the server accepted the handshake, and a clear frame can
      // no longer come first. Nothing more needs keeping.
      set_keep_raw_input(false);
    } else if (raw_input_.size() + records.size() > max_raw_input_) {
      // More than one frame of clear bytes: whatever they are, they are
      // not the one error frame a server may send here.
      Status s = Status::NetworkError(
          "server sent " + std::to_string(raw_input_.size() + records.size()) +
          " bytes after the TLS handshake that are neither TLS records nor one frame: more than " +
          std::to_string(max_raw_input_) + " bytes");
      set_keep_raw_input(false);
      return s;
    } else {
      raw_input_.append(reinterpret_cast<const char*>(records.data()), records.size());
    }
  }
  session_->FeedRecords(records);
  Status s;
  while (true) {
    size_t space, n;
    uint8_t* dst = sink->WriteSpace(&space);
    s = session_->ReadPlaintext(dst, space, &n);
    if (n > 0 && !sink->Wrote(n)) break;
    if (!s.ok() || n == 0) break;
  }
  // Left early (the sink stopped): the session must not keep pointing at
  // `records`.
  session_->FeedRecords(Slice());
  size_t before = wire_out_.size();
  session_->TakeOutput(&wire_out_);
  *answered = wire_out_.size() != before;
  return s;
}

void TlsRecordLayer::set_keep_raw_input(bool keep, size_t max_bytes) {
  keep_raw_input_ = keep;
  max_raw_input_ = max_bytes;
  if (!keep && !raw_input_.empty()) std::string().swap(raw_input_);
}

std::string TlsRecordLayer::TakeRawInput() {
  std::string raw;
  raw.swap(raw_input_);
  return raw;
}

}  // namespace osprey::transport
