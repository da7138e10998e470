// A connection's outbound side: the frame queue, its writev in batches,
// TLS records, and the bytes queued that the messenger's metrics publish.
#include <glog/logging.h>
#include <limits.h>

#include <algorithm>
#include <atomic>

#include "osprey/transport/connection.h"
#include "osprey/transport/connection_internal.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey::transport {

// ---------------------------------------------------------------------------
// Outbound queue.

template <class Header>
void Connection::QueueMessage(Header* header, const google::protobuf::MessageLite& body) {
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = wire::OutboundFrame::Encode(header, body, {}, &frame);
  CHECK(s.ok()) << s.ToString();  // negotiation messages are tiny
  // Negotiation messages, the context and fatal errors each end their TLS
  // record: a peer may read them through its session and then wait on the
  // socket, as Kudu's server does after the context.
  frame->set_ends_record();
  QueueFrame(std::move(frame));
}

void Connection::QueueFrame(std::unique_ptr<wire::OutboundFrame> frame) {
  if (state_ == State::kClosed) return;
  outbound_bytes_ += frame->total_size();
  outbound_.push_back(std::move(frame));
  if (outbound_bytes_ > reactor_->options().max_outbound_queue_bytes) {
    Status s = Status::NetworkError(ToString() + ": peer is not reading; " +
                                    std::to_string(outbound_bytes_) +
                                    " bytes queued exceed the limit of " +
                                    std::to_string(reactor_->options().max_outbound_queue_bytes));
    LogBadPeer(s.ToString());
    Shutdown(s);
    return;
  }
  if (!flush_requested_) {
    flush_requested_ = true;
    reactor_->RequestFlush(this);
  }
}

bool Connection::FlushRecords() {
  size_t wrote = 0;
  Status s = tls_->Flush(&socket_, &outbound_, &outbound_bytes_, &wrote);
  if (wrote > 0) {
    last_activity_ = reactor_->loop_time();
    if (TransportMetrics* m = reactor_->options().metrics.get()) m->bytes_sent->Increment(wrote);
  }
  if (!s.ok()) {
    ShutdownAfterWriteError(s);
    return false;
  }
  return true;
}

void Connection::ShutdownAfterWriteError(const Status& s) {
  // A peer that closed may have said why first (a negotiation refusal, say):
  // those bytes still wait in our receive buffer. Over a Unix socket the
  // write fails at once, before we would otherwise have read them.
  int err = s.posix_errno();
  if (err == EPIPE || err == ECONNRESET) ReadAvailable();
  if (state_ != State::kClosed) Shutdown(s.CloneAndPrepend(ToString()));
}

void Connection::Flush() {
  reactor_->AssertCurrentThread();
  flush_requested_ = false;
  if (state_ == State::kClosed || state_ == State::kConnecting) return;
  if (tls_ != nullptr) {
    if (!FlushRecords()) return;
  }
  while (!outbound_.empty() && tls_ == nullptr) {
    iov_scratch_.clear();
    size_t frames = 0;
    for (auto& f : outbound_) {
      if (frames++ == kMaxFramesPerWritev || iov_scratch_.size() >= IOV_MAX - 8) break;
      f->AppendIovecs(&iov_scratch_);
    }
    int iovcnt = static_cast<int>(std::min<size_t>(iov_scratch_.size(), IOV_MAX));
    size_t want = 0;
    for (int i = 0; i < iovcnt; ++i) want += iov_scratch_[i].iov_len;
    size_t n;
    Status s = socket_.Writev(iov_scratch_.data(), iovcnt, &n);
    if (!s.ok()) {
      ShutdownAfterWriteError(s);
      return;
    }
    last_activity_ = reactor_->loop_time();
    if (TransportMetrics* m = reactor_->options().metrics.get()) m->bytes_sent->Increment(n);
    size_t left = n;
    while (left > 0 && !outbound_.empty()) {
      outbound_.front()->Advance(&left);
      if (outbound_.front()->done()) {
        outbound_bytes_ -= outbound_.front()->total_size();
        outbound_.pop_front();
      }
    }
    if (n < want) break;  // the socket buffer is full
  }
  if (state_ == State::kClosingAfterFlush && !HasUnsentBytes()) {
    Shutdown(close_reason_);
    return;
  }
  PublishQueuedBytes();
  UpdateEpollInterest();
}

void Connection::PublishQueuedBytes() {
  TransportMetrics* m = reactor_->options().metrics.get();
  if (m == nullptr) return;
  int64_t now =
      state_ == State::kClosed
          ? 0
          : static_cast<int64_t>(outbound_bytes_ + (tls_ != nullptr ? tls_->unsent_bytes() : 0));
  if (now != published_queued_bytes_) {
    m->queued_outbound_bytes.fetch_add(now - published_queued_bytes_, std::memory_order_relaxed);
    published_queued_bytes_ = now;
  }
}

// The headers QueueMessage is used with (connection.cc, connection_client.cc,
// connection_server.cc).
template void Connection::QueueMessage(RequestHeader*, const google::protobuf::MessageLite&);
template void Connection::QueueMessage(ResponseHeader*, const google::protobuf::MessageLite&);

}  // namespace osprey::transport
