#include "osprey/transport/connection.h"

#include <glog/logging.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>

#include "osprey/transport/negotiation.h"
#include "osprey/wire/connection_header.h"

namespace osprey::transport {

using wire::ErrorStatusPB;
using wire::NegotiatePB;
using wire::RequestHeader;
using wire::ResponseHeader;

namespace {
constexpr int32_t kNegotiationCallId = -33;
constexpr int32_t kConnectionContextCallId = -3;
constexpr int32_t kConnectionErrorCallId = -1;
// Bound the work one readable event may do, so one busy peer cannot starve
// the others on this reactor.
constexpr int kMaxReadsPerEvent = 16;
constexpr size_t kMaxFramesPerWritev = 128;
// Plaintext encrypted at once: big enough for few records per syscall,
// small enough that a large response is not held twice, whole.
constexpr size_t kTlsEncryptBatch = 256 * 1024;
constexpr size_t kTlsReadChunk = 64 * 1024;
// Pieces of a frame below this size are copied together before encryption.
constexpr size_t kTlsGatherBelow = 4096;

}  // namespace

Connection::Connection(Reactor* reactor, Role role, Socket socket, const Sockaddr& remote,
                       std::string user)
    : reactor_(reactor),
      reactor_keepalive_(reactor->shared_from_this()),
      role_(role),
      socket_(std::move(socket)),
      remote_(remote),
      user_(std::move(user)),
      state_(role == Role::kClient ? State::kConnecting : State::kAwaitingConnectionHeader),
      last_activity_(MonoTime::Now()) {
  size_t max = reactor->options().max_frame_size;
  if (role == Role::kClient) {
    response_decoder_ = std::make_unique<wire::ResponseDecoder>(max);
  } else {
    request_decoder_ = std::make_unique<wire::RequestDecoder>(max);
  }
}

Connection::~Connection() {
  if (open_counter_) open_counter_->fetch_sub(1);
}

void Connection::CountIn(std::shared_ptr<std::atomic<int64_t>> counter) {
  open_counter_ = std::move(counter);
  open_counter_->fetch_add(1);
}

std::string Connection::ToString() const {
  return std::string(role_ == Role::kClient ? "client connection to " : "server connection from ") +
         remote_.ToString();
}

Status Connection::Start(bool connect_in_progress) {
  reactor_->AssertCurrentThread();
  uint32_t events = EPOLLIN | (connect_in_progress ? uint32_t{EPOLLOUT} : 0u);
  epollout_ = connect_in_progress;
  OSPREY_RETURN_NOT_OK(reactor_->AddFd(socket_.fd(), events, this));
  std::weak_ptr<Connection> weak = shared_from_this();
  negotiation_timer_ =
      reactor_->ScheduleTimer(MonoTime::Now() + reactor_->options().negotiation_timeout, [weak]() {
        if (auto c = weak.lock()) {
          c->reactor_->AssertCurrentThread();  // timers run on the reactor
          c->negotiation_timer_ = {};
          c->OnNegotiationTimeout();
        }
      });
  if (role_ == Role::kClient && !connect_in_progress) OnConnected();
  return Status::OK();
}

void Connection::OnNegotiationTimeout() {
  if (state_ == State::kOpen || state_ == State::kClosed) return;
  Status s = Status::TimedOut(ToString() + ": negotiation did not finish within " +
                              reactor_->options().negotiation_timeout.ToString());
  LOG(WARNING) << s.ToString();
  Shutdown(s);
}

void Connection::OnConnected() {
  Status s = socket_.GetSocketError();
  if (!s.ok()) {
    Shutdown(Status::NetworkError("connect to " + remote_.ToString() + " failed: " + s.ToString()));
    return;
  }
  state_ = State::kNegotiating;
  const ConnectionOptions& o = reactor_->options();
  client_negotiator_ = std::make_unique<ClientNegotiator>(
      user_, ClientTlsOffer(), o.encryption == RpcEncryption::kRequired, o.tls_client.get());
  QueueFrame(wire::OutboundFrame::FromBytes(wire::ConnectionHeaderBytes()));
  SendNegotiation(client_negotiator_->Start());
}

TlsFeatures Connection::ClientTlsOffer() const {
  const ConnectionOptions& o = reactor_->options();
  TlsFeatures offer;
  offer.tls = o.encryption != RpcEncryption::kDisabled && o.tls_client != nullptr;
  offer.authentication_only = remote_.IsLoopback() && !o.encrypt_loopback;
  return offer;
}

void Connection::SendNegotiation(const NegotiatePB& message) {
  if (role_ == Role::kClient) {
    RequestHeader header;
    header.set_call_id(kNegotiationCallId);
    QueueMessage(&header, message);
  } else {
    ResponseHeader header;
    header.set_call_id(kNegotiationCallId);
    QueueMessage(&header, message);
  }
}

void Connection::HandleEvents(uint32_t events) {
  reactor_->AssertCurrentThread();
  auto self = shared_from_this();  // callbacks below may drop the last other reference
  if (state_ == State::kConnecting) {
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) OnConnected();
    if (state_ == State::kClosed) return;
    UpdateEpollInterest();
    Flush();
    return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ReadAvailable();
  if (state_ != State::kClosed && (events & EPOLLOUT)) Flush();
}

void Connection::UpdateEpollInterest() {
  if (state_ == State::kClosed) return;
  bool want_out = state_ == State::kConnecting || HasUnsentBytes();
  if (want_out == epollout_) return;
  epollout_ = want_out;
  uint32_t events = (state_ == State::kClosingAfterFlush ? 0u : uint32_t{EPOLLIN}) |
                    (want_out ? uint32_t{EPOLLOUT} : 0u);
  Status s = reactor_->ModifyFd(socket_.fd(), events, this);
  if (!s.ok()) Shutdown(s);
}

Status Connection::ReadConnectionHeader() {
  while (conn_header_got_ < wire::kConnectionHeaderSize) {
    size_t n;
    OSPREY_RETURN_NOT_OK(socket_.Read(conn_header_ + conn_header_got_,
                                      wire::kConnectionHeaderSize - conn_header_got_, &n));
    if (n == 0) return Status::OK();
    conn_header_got_ += n;
  }
  OSPREY_RETURN_NOT_OK(
      wire::ValidateConnectionHeader(Slice(conn_header_, wire::kConnectionHeaderSize)));
  const ConnectionOptions& o = reactor_->options();
  ServerTlsPolicy policy;
  policy.available = o.encryption != RpcEncryption::kDisabled && o.tls_server != nullptr;
  policy.required = o.encryption == RpcEncryption::kRequired;
  policy.allow_authentication_only = remote_.IsLoopback() && !o.encrypt_loopback;
  server_negotiator_ = std::make_unique<ServerNegotiator>(policy, o.tls_server.get());
  state_ = State::kNegotiating;
  return Status::OK();
}

void Connection::ReadAvailable() {
  for (int i = 0; i < kMaxReadsPerEvent; ++i) {
    if (state_ == State::kClosed || state_ == State::kClosingAfterFlush) return;
    last_activity_ = reactor_->loop_time();
    if (state_ == State::kAwaitingConnectionHeader) {
      Status s = ReadConnectionHeader();
      if (!s.ok()) {
        if (s.IsCorruption()) LOG(WARNING) << ToString() << ": " << s.ToString();
        Shutdown(s);
        return;
      }
      if (state_ == State::kAwaitingConnectionHeader) return;  // would block
      continue;
    }
    size_t space, n;
    uint8_t* dst;
    if (tls_reading_) {
      if (tls_read_buf_.empty()) tls_read_buf_.resize(kTlsReadChunk);
      dst = tls_read_buf_.data();
      space = tls_read_buf_.size();
    } else {
      dst = role_ == Role::kClient ? response_decoder_->WriteSpace(&space)
                                   : request_decoder_->WriteSpace(&space);
    }
    Status s = socket_.Read(dst, space, &n);
    if (!s.ok()) {
      if (role_ == Role::kServer && server_call_ids_.empty() && state_ == State::kOpen) {
        VLOG(1) << ToString() << ": " << s.ToString();
      } else if (role_ == Role::kServer) {
        LOG(INFO) << ToString() << ": peer went away: " << s.ToString();
      }
      Shutdown(s);
      return;
    }
    if (n == 0) return;
    if (tls_reading_) {
      DecryptAndDecode(Slice(dst, n));
    } else {
      DecodeFrames(n);
    }
    if (n < space) return;  // the kernel had no more for now
  }
}

void Connection::DecodeFrames(size_t n) {
  while (true) {
    if (state_ == State::kClosed || state_ == State::kClosingAfterFlush) return;
    // One frame at a time while negotiating: the TLS handshake may end at
    // any frame, and the bytes after it are records, not frames.
    size_t max_frames = state_ == State::kOpen || tls_reading_ ? SIZE_MAX : 1;
    size_t got;
    if (role_ == Role::kClient) {
      auto& frames = response_frames_;  // reused: its capacity stays
      frames.clear();
      Status ds = response_decoder_->Consume(n, &frames, max_frames);
      got = frames.size();
      for (auto& f : frames) {
        Status fs = HandleResponseFrame(std::move(f));
        if (!fs.ok()) {
          Shutdown(fs);
          return;
        }
        if (state_ == State::kClosed) return;
      }
      if (!ds.ok()) {
        LOG(WARNING) << ToString() << ": bad frame from server: " << ds.ToString();
        Shutdown(Status::NetworkError("bad frame from server: " + ds.message()));
        return;
      }
    } else {
      auto& frames = request_frames_;
      frames.clear();
      Status ds = request_decoder_->Consume(n, &frames, max_frames);
      got = frames.size();
      for (auto& f : frames) {
        Status fs = HandleRequestFrame(std::move(f));
        (void)fs;
        if (state_ == State::kClosed || state_ == State::kClosingAfterFlush) return;
      }
      if (!ds.ok()) {
        SendFatalError(kConnectionErrorCallId, ErrorStatusPB::FATAL_INVALID_RPC_HEADER, ds);
        return;
      }
    }
    n = 0;
    if (tls_switch_pending_) {
      // The handshake just ended: what follows it in the buffer is records.
      tls_switch_pending_ = false;
      tls_reading_ = true;
      std::string rest;
      if (role_ == Role::kClient) {
        response_decoder_->TakeUnparsed(&rest);
      } else {
        request_decoder_->TakeUnparsed(&rest);
      }
      if (!rest.empty()) DecryptAndDecode(rest);
      return;
    }
    if (got == 0 || max_frames == SIZE_MAX) return;
  }
}

void Connection::DecryptAndDecode(Slice records) {
  if (role_ == Role::kClient && state_ != State::kOpen) {
    // Kept until negotiation ends: see the clear error frame below.
    tls_raw_in_.append(reinterpret_cast<const char*>(records.data()), records.size());
  } else if (!tls_raw_in_.empty()) {
    std::string().swap(tls_raw_in_);
  }
  // Plaintext goes straight into the frame decoder's buffer.
  tls_->FeedRecords(records);
  Status ts;
  while (state_ != State::kClosed && state_ != State::kClosingAfterFlush) {
    size_t space, n;
    uint8_t* dst = role_ == Role::kClient ? response_decoder_->WriteSpace(&space)
                                          : request_decoder_->WriteSpace(&space);
    ts = tls_->ReadPlaintext(dst, space, &n);
    if (n > 0) DecodeFrames(n);
    if (!ts.ok() || n == 0) break;
  }
  // Left early (closing): the session must not keep pointing at `records`.
  tls_->FeedRecords(Slice());
  // Whatever OpenSSL had to answer while reading (an alert, say).
  size_t before = tls_wire_out_.size();
  tls_->TakeOutput(&tls_wire_out_);
  if (tls_wire_out_.size() != before && !flush_requested_ && state_ != State::kClosed) {
    flush_requested_ = true;
    reactor_->RequestFlush(this);
  }
  if (ts.ok() || state_ == State::kClosed) return;
  if (ts.IsAborted()) {
    VLOG(1) << ToString() << ": " << ts.ToString();
    Shutdown(Status::NetworkError("peer ended the TLS session (close_notify)"));
    return;
  }
  if (role_ == Role::kClient && state_ != State::kOpen && !tls_raw_in_.empty() &&
      tls_raw_in_[0] == '\0') {
    // A server that rejects this client's certificate learns so only after
    // the client has switched to records, and answers with a clear error
    // frame (whose length starts with 0, never a TLS record type). Read the
    // rest of the connection as clear frames, to report the server's reason.
    tls_reading_ = false;
    std::string raw;
    raw.swap(tls_raw_in_);
    Slice rest(raw);
    while (!rest.empty() && state_ != State::kClosed) {
      size_t space;
      uint8_t* dst = response_decoder_->WriteSpace(&space);
      size_t k = std::min(space, rest.size());
      memcpy(dst, rest.data(), k);
      rest.remove_prefix(k);
      DecodeFrames(k);
    }
    return;
  }
  LOG(WARNING) << ToString() << ": " << ts.ToString();
  Shutdown(ts);
}

// ---------------------------------------------------------------------------
// Client side.

Status Connection::HandleResponseFrame(wire::InboundResponse frame) {
  int32_t id = frame.header.call_id();
  if (state_ != State::kOpen) return HandleClientNegotiation(frame);
  if (id < 0) {
    ErrorStatusPB err;
    if (frame.header.is_error() &&
        err.ParseFromArray(frame.main_message.data(),
                           static_cast<int>(frame.main_message.size()))) {
      return Status::NetworkError("server closed the connection: " + err.message() + " (" +
                                  ErrorStatusPB::RpcErrorCodePB_Name(err.code()) + ")");
    }
    return Status::NetworkError("server sent a frame with invalid call id " + std::to_string(id));
  }
  auto it = client_calls_.find(id);
  if (it == client_calls_.end()) {
    // The call timed out or was cancelled: its late response is dropped.
    VLOG(2) << ToString() << ": dropping response to finished call " << id;
    return Status::OK();
  }
  std::shared_ptr<ClientCall> call = std::move(it->second);
  client_calls_.erase(it);
  call->FinishWithResponse(std::move(frame));
  return Status::OK();
}

Status Connection::HandleClientNegotiation(const wire::InboundResponse& frame) {
  if (frame.header.call_id() != kNegotiationCallId) {
    return Status::NetworkError("server sent call id " + std::to_string(frame.header.call_id()) +
                                " during negotiation");
  }
  const Slice& body = frame.main_message;
  if (frame.header.is_error()) {
    ErrorStatusPB err;
    if (!err.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return Status::NetworkError("server rejected negotiation with an unreadable error");
    }
    return Status::NotAuthorized("server rejected negotiation: " + err.message());
  }
  NegotiatePB pb;
  if (!pb.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Status::NetworkError("server sent a negotiation message that does not parse");
  }
  NegotiationSteps steps;
  OSPREY_RETURN_NOT_OK(client_negotiator_->Handle(pb, &steps));
  std::unique_ptr<TlsSession> session;
  if (steps.tls_handshake_done) session = client_negotiator_->TakeTlsSession();
  ApplyNegotiationSteps(steps, client_negotiator_->agreed(), std::move(session));
  if (steps.done) {
    RequestHeader header;
    header.set_call_id(kConnectionContextCallId);
    QueueMessage(&header, ClientConnectionContext(user_));
    state_ = State::kOpen;
    if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
    negotiation_timer_ = {};
    SendPendingCalls();
  }
  return Status::OK();
}

void Connection::ApplyNegotiationSteps(const NegotiationSteps& steps, const TlsFeatures& agreed,
                                       std::unique_ptr<TlsSession> session) {
  if (steps.tls_handshake_done) {
    tls_ = std::move(session);
    tls_agreed_ = agreed;
  }
  for (size_t i = 0; i < steps.send.size(); ++i) {
    if (static_cast<int>(i) == steps.records_from) StartTlsRecords();
    SendNegotiation(steps.send[i]);
  }
  if (steps.records_from == static_cast<int>(steps.send.size())) StartTlsRecords();
}

void Connection::StartTlsRecords() {
  // What is queued so far (the last handshake token) goes in the clear,
  // ahead of every record.
  for (auto& f : outbound_) {
    iov_scratch_.clear();
    f->AppendIovecs(&iov_scratch_);
    for (const iovec& v : iov_scratch_) {
      tls_wire_out_.append(static_cast<const char*>(v.iov_base), v.iov_len);
    }
  }
  outbound_.clear();
  outbound_bytes_ = 0;
  tls_records_ = true;
  tls_switch_pending_ = true;
}

void Connection::QueueCall(std::shared_ptr<ClientCall> call) {
  reactor_->AssertCurrentThread();
  if (state_ == State::kClosed) {
    call->Finish(close_reason_.ok() ? Status::NetworkError("connection closed") : close_reason_);
    return;
  }
  call->conn_ = this;
  if (state_ == State::kOpen) {
    SendCall(std::move(call));
  } else {
    pending_calls_.push_back(std::move(call));
  }
}

void Connection::SendPendingCalls() {
  std::deque<std::shared_ptr<ClientCall>> pending;
  pending.swap(pending_calls_);
  for (auto& c : pending) {
    if (!c->finished()) SendCall(std::move(c));
  }
}

void Connection::SendCall(std::shared_ptr<ClientCall> call) {
  int32_t id;
  do {
    id = next_call_id_;
    next_call_id_ = next_call_id_ == INT32_MAX ? 0 : next_call_id_ + 1;
  } while (client_calls_.count(id) != 0);
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = call->BuildRequestFrame(id, &frame);
  if (s.ok()) {
    // A request too large to send fails alone, before it is queued: the
    // connection and its other calls go on.
    const ConnectionOptions& o = reactor_->options();
    size_t frame_len = frame->total_size() - 4;  // as the length prefix counts it
    if (frame_len > o.max_frame_size) {
      s = Status::InvalidArgument(call->Describe() + ": request frame of " +
                                  std::to_string(frame_len) +
                                  " bytes exceeds the maximum frame size of " +
                                  std::to_string(o.max_frame_size) + " bytes");
    } else if (frame->total_size() > o.max_outbound_queue_bytes) {
      s = Status::InvalidArgument(call->Describe() + ": request of " +
                                  std::to_string(frame->total_size()) +
                                  " bytes exceeds the outbound queue limit of " +
                                  std::to_string(o.max_outbound_queue_bytes) + " bytes");
    }
  }
  if (!s.ok()) {
    call->Finish(s);
    return;
  }
  call->call_id_ = id;
  client_calls_.emplace(id, std::move(call));
  QueueFrame(std::move(frame));
}

void Connection::ForgetCall(ClientCall* call) {
  reactor_->AssertCurrentThread();
  if (call->call_id_ >= 0) {
    auto it = client_calls_.find(call->call_id_);
    if (it != client_calls_.end() && it->second.get() == call) client_calls_.erase(it);
  }
  // A call still waiting for negotiation stays in pending_calls_ and is
  // skipped there once finished.
  call->conn_ = nullptr;
}

// ---------------------------------------------------------------------------
// Server side.

Status Connection::HandleRequestFrame(wire::InboundRequest frame) {
  int32_t id = frame.header.call_id();
  switch (state_) {
    case State::kNegotiating:
      if (id != kNegotiationCallId) {
        Status s = Status::Corruption("call id " + std::to_string(id) +
                                      " received before negotiation finished");
        SendFatalError(id, ErrorStatusPB::FATAL_INVALID_RPC_HEADER, s);
        return s;
      }
      return HandleServerNegotiation(frame);
    case State::kAwaitingContext: {
      if (id != kConnectionContextCallId) {
        Status s = Status::Corruption("expected the connection context (call id -3), got call id " +
                                      std::to_string(id));
        SendFatalError(id, ErrorStatusPB::FATAL_INVALID_RPC_HEADER, s);
        return s;
      }
      wire::ConnectionContextPB ctx;
      if (!ctx.ParseFromArray(frame.main_message.data(),
                              static_cast<int>(frame.main_message.size()))) {
        Status s = Status::Corruption("connection context does not parse");
        SendFatalError(id, ErrorStatusPB::FATAL_DESERIALIZING_REQUEST, s);
        return s;
      }
      state_ = State::kOpen;
      if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
      negotiation_timer_ = {};
      return Status::OK();
    }
    case State::kOpen:
      break;
    default:
      return Status::OK();
  }
  if (id < 0) {
    Status s = Status::Corruption("invalid call id " + std::to_string(id) + " after negotiation");
    SendFatalError(id, ErrorStatusPB::FATAL_INVALID_RPC_HEADER, s);
    return s;
  }
  if (!frame.header.has_remote_method()) {
    Status s = Status::Corruption("call " + std::to_string(id) + " has no remote_method");
    SendFatalError(id, ErrorStatusPB::FATAL_INVALID_RPC_HEADER, s);
    return s;
  }
  if (server_call_ids_.insert(id).second) {
    server_calls_in_flight_.store(server_call_ids_.size(), std::memory_order_relaxed);
  } else {
    Status s = Status::Corruption("duplicate call id " + std::to_string(id) +
                                  " while a call with that id is in flight");
    SendFatalError(id, ErrorStatusPB::FATAL_INVALID_RPC_HEADER, s);
    return s;
  }
  reactor_->inbound_handler()->HandleInboundCall(shared_from_this(), std::move(frame));
  return Status::OK();
}

Status Connection::HandleServerNegotiation(const wire::InboundRequest& frame) {
  NegotiatePB in;
  const Slice& body = frame.main_message;
  if (!in.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    Status s = Status::Corruption("negotiation message does not parse as NegotiatePB");
    SendFatalError(kNegotiationCallId, ErrorStatusPB::FATAL_UNAUTHORIZED, s);
    return s;
  }
  NegotiationSteps steps;
  Status s = server_negotiator_->Handle(in, &steps);
  if (!s.ok()) {
    SendFatalError(kNegotiationCallId, ErrorStatusPB::FATAL_UNAUTHORIZED, s);
    return s;
  }
  std::unique_ptr<TlsSession> session;
  if (steps.tls_handshake_done) session = server_negotiator_->TakeTlsSession();
  ApplyNegotiationSteps(steps, server_negotiator_->agreed(), std::move(session));
  if (steps.done) {
    user_ = server_negotiator_->user();
    state_ = State::kAwaitingContext;
  }
  return Status::OK();
}

void Connection::QueueResponse(const std::shared_ptr<Connection>& conn, int32_t call_id,
                               std::unique_ptr<wire::OutboundFrame> frame) {
  Reactor* r = conn->reactor_;
  if (r->IsCurrentThread()) {
    DeliverResponse(conn.get(), call_id, std::move(frame));
  } else if (conn->server_calls_in_flight_.load(std::memory_order_relaxed) <= 1 &&
             r->TryRunHere([&] { DeliverResponse(conn.get(), call_id, std::move(frame)); })) {
    // Written from this thread: the reactor slept and need not wake.
  } else {
    // False: the reactor has shut down and the response is dropped.
    conn->reactor_->ScheduleResponse(conn, call_id, std::move(frame));
  }
}

void Connection::DeliverResponse(Connection* conn, int32_t call_id,
                                 std::unique_ptr<wire::OutboundFrame> frame) {
  conn->reactor_->AssertCurrentThread();
  if (conn->state_ == State::kClosed) return;
  conn->server_call_ids_.erase(call_id);
  conn->server_calls_in_flight_.store(conn->server_call_ids_.size(), std::memory_order_relaxed);
  if (conn->state_ == State::kClosingAfterFlush) return;
  conn->QueueFrame(std::move(frame));
}

void Connection::SendFatalError(int32_t call_id, ErrorStatusPB::RpcErrorCodePB code,
                                const Status& why) {
  if (state_ == State::kClosed || state_ == State::kClosingAfterFlush) return;
  LOG(WARNING) << ToString() << ": closing after " << ErrorStatusPB::RpcErrorCodePB_Name(code)
               << ": " << why.ToString();
  ResponseHeader header;
  header.set_call_id(call_id);
  header.set_is_error(true);
  ErrorStatusPB err;
  err.set_message(why.message());
  err.set_code(code);
  QueueMessage(&header, err);
  state_ = State::kClosingAfterFlush;
  close_reason_ = Status::NetworkError(why.message());
  // Whether or not the peer reads the error, the connection goes.
  std::weak_ptr<Connection> weak = shared_from_this();
  reactor_->ScheduleTimer(MonoTime::Now() + MonoDelta::FromSeconds(1), [weak]() {
    if (auto c = weak.lock()) {
      c->reactor_->AssertCurrentThread();  // timers run on the reactor
      c->Shutdown(c->close_reason_);
    }
  });
}

// ---------------------------------------------------------------------------
// Outbound queue.

template <class Header>
void Connection::QueueMessage(Header* header, const google::protobuf::MessageLite& body) {
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = wire::OutboundFrame::Encode(header, body, {}, &frame);
  CHECK(s.ok()) << s.ToString();  // negotiation messages are tiny
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
    LOG(WARNING) << s.ToString();
    Shutdown(s);
    return;
  }
  if (!flush_requested_) {
    flush_requested_ = true;
    reactor_->RequestFlush(this);
  }
}

bool Connection::FlushRecords() {
  while (true) {
    if (tls_wire_out_sent_ < tls_wire_out_.size()) {
      iovec v{tls_wire_out_.data() + tls_wire_out_sent_, tls_wire_out_.size() - tls_wire_out_sent_};
      size_t n;
      Status s = socket_.Writev(&v, 1, &n);
      if (!s.ok()) {
        Shutdown(s.CloneAndPrepend(ToString()));
        return false;
      }
      last_activity_ = reactor_->loop_time();
      tls_wire_out_sent_ += n;
      if (tls_wire_out_sent_ < tls_wire_out_.size()) return true;  // the socket buffer is full
      tls_wire_out_.clear();
      tls_wire_out_sent_ = 0;
    }
    if (outbound_.empty()) return true;
    // At most kTlsEncryptBatch bytes per pass, so that a large frame is
    // never held twice, as itself and as records. Small pieces (headers,
    // small messages) are gathered to share records; large ones (bodies,
    // sidecars) are encrypted in place.
    Status s;
    size_t budget = kTlsEncryptBatch;
    tls_plain_out_.clear();
    while (s.ok() && !outbound_.empty() && budget > 0) {
      wire::OutboundFrame* frame = outbound_.front().get();
      iov_scratch_.clear();
      frame->AppendIovecs(&iov_scratch_);
      size_t took = 0;
      for (const iovec& v : iov_scratch_) {
        if (took == budget) break;
        Slice piece(static_cast<const uint8_t*>(v.iov_base), std::min(v.iov_len, budget - took));
        if (piece.size() < kTlsGatherBelow) {
          tls_plain_out_.append(reinterpret_cast<const char*>(piece.data()), piece.size());
        } else {
          if (!tls_plain_out_.empty()) s = tls_->Encrypt(tls_plain_out_, &tls_wire_out_);
          tls_plain_out_.clear();
          if (s.ok()) s = tls_->Encrypt(piece, &tls_wire_out_);
          if (!s.ok()) break;
        }
        took += piece.size();
      }
      budget -= took;
      frame->Advance(&took);
      if (frame->done()) {
        outbound_bytes_ -= frame->total_size();
        outbound_.pop_front();
      }
    }
    if (s.ok() && !tls_plain_out_.empty()) s = tls_->Encrypt(tls_plain_out_, &tls_wire_out_);
    if (!s.ok()) {
      LOG(WARNING) << ToString() << ": " << s.ToString();
      Shutdown(s);
      return false;
    }
  }
}

void Connection::Flush() {
  reactor_->AssertCurrentThread();
  flush_requested_ = false;
  if (state_ == State::kClosed || state_ == State::kConnecting) return;
  if (tls_records_ && !FlushRecords()) return;
  while (!outbound_.empty() && !tls_records_) {
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
      Shutdown(s.CloneAndPrepend(ToString()));
      return;
    }
    last_activity_ = reactor_->loop_time();
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
  UpdateEpollInterest();
}

bool Connection::IdleSince(MonoTime cutoff) const {
  reactor_->AssertCurrentThread();
  return state_ == State::kOpen && client_calls_.empty() && server_call_ids_.empty() &&
         !HasUnsentBytes() && last_activity_ < cutoff;
}

ConnectionInfo Connection::Info() const {
  reactor_->AssertCurrentThread();
  ConnectionInfo info;
  info.remote = remote_;
  info.inbound = role_ == Role::kServer;
  info.user = user_;
  info.negotiated = state_ == State::kOpen;
  if (info.negotiated) {
    info.security = tls_ == nullptr                   ? ConnectionSecurity::kClear
                    : tls_agreed_.authentication_only ? ConnectionSecurity::kTlsAuthenticationOnly
                                                      : ConnectionSecurity::kTlsEncrypted;
  }
  info.calls_in_flight = calls_in_flight();
  info.outbound_queued_bytes = outbound_bytes_ + (tls_wire_out_.size() - tls_wire_out_sent_);
  return info;
}

void Connection::Shutdown(const Status& why) {
  reactor_->AssertCurrentThread();
  if (state_ == State::kClosed) return;
  auto self = shared_from_this();
  state_ = State::kClosed;
  closed_.store(true, std::memory_order_release);
  close_reason_ = why;
  if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
  negotiation_timer_ = {};
  if (socket_.is_open()) {
    if (tls_records_) {
      // A clean end of the TLS session, if the socket takes it now.
      tls_wire_out_.erase(0, tls_wire_out_sent_);
      tls_->CloseNotify(&tls_wire_out_);
      iovec v{tls_wire_out_.data(), tls_wire_out_.size()};
      size_t n;
      (void)socket_.Writev(&v, 1, &n);
    }
    reactor_->RemoveFd(socket_.fd());
    socket_.Close();
  }
  outbound_.clear();
  outbound_bytes_ = 0;
  tls_wire_out_.clear();
  tls_wire_out_sent_ = 0;

  Status call_status = why;
  if (!(why.IsNetworkError() || why.IsAborted() || why.IsNotAuthorized())) {
    call_status = Status::NetworkError(why.message());
  }
  // Name the connection once: some reasons already start with it.
  const std::string where = ToString();
  if (call_status.message().rfind(where, 0) != 0) call_status = call_status.CloneAndPrepend(where);
  auto pending = std::move(pending_calls_);
  auto in_flight = std::move(client_calls_);
  pending_calls_.clear();
  client_calls_.clear();
  for (auto& c : pending) c->Finish(call_status);
  for (auto& [id, c] : in_flight) c->Finish(call_status);
  server_call_ids_.clear();
  reactor_->RemoveConnection(this);
}

}  // namespace osprey::transport
