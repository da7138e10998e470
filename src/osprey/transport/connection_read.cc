// A connection's inbound side: the connection header (or an HTTP request
// line), reading the socket within its per-event bound, decrypting TLS
// records, and decoding frames for the client or server side.
#include <glog/logging.h>
#include <limits.h>
#include <string.h>

#include <algorithm>
#include <functional>

#include "osprey/base/ip_network.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/connection_internal.h"
#include "osprey/transport/http_connection.h"
#include "osprey/transport/negotiation.h"
#include "osprey/transport/transport_metrics.h"
#include "osprey/wire/connection_header.h"

namespace osprey::transport {

namespace {
// The frame decoder of one role, as TLS sees it.
template <class Decoder>
class DecoderSink : public PlaintextSink {
 public:
  DecoderSink(Decoder* decoder, std::function<bool(size_t)> decode)
      : decoder_(decoder), decode_(std::move(decode)) {}
  uint8_t* WriteSpace(size_t* space) override { return decoder_->WriteSpace(space); }
  bool Wrote(size_t n) override { return decode_(n); }

 private:
  Decoder* const decoder_;
  const std::function<bool(size_t)> decode_;
};
}  // namespace

Status Connection::ReadConnectionHeader() {
  while (conn_header_got_ < wire::kConnectionHeaderSize) {
    size_t n;
    OSPREY_RETURN_NOT_OK(socket_.Read(conn_header_ + conn_header_got_,
                                      wire::kConnectionHeaderSize - conn_header_got_, &n));
    if (n == 0) return Status::OK();
    conn_header_got_ += n;
    if (TransportMetrics* m = reactor_->options().metrics.get()) m->bytes_received->Increment(n);
  }
  OSPREY_RETURN_NOT_OK(
      wire::ValidateConnectionHeader(Slice(conn_header_, wire::kConnectionHeaderSize)));
  const ConnectionOptions& o = reactor_->options();
  ServerTlsPolicy policy;
  policy.available = o.encryption != RpcEncryption::kDisabled && o.tls_server != nullptr;
  policy.required = o.encryption == RpcEncryption::kRequired;
  policy.allow_authentication_only = remote_.IsLoopback() && !o.encrypt_loopback;
  ServerAuthPolicy auth;
  auth.mode = o.authentication;
  auth.kerberos = o.kerberos_server;
  auth.verifiable_certificate = policy.available && o.tls_server->authenticates_by_certificate();
  auth.certificate = auth.verifiable_certificate && o.tls_client_cert_authentication;
  auth.token_verifier = o.token_verifier;
  if (o.trusted_subnets != nullptr && !remote_.is_unix() && !InAnyOf(*o.trusted_subnets, remote_)) {
    auth.untrusted_peer = remote_.host();
  }
  server_negotiator_ = std::make_unique<ServerNegotiator>(policy, o.tls_server.get(), auth);
  state_ = State::kNegotiating;
  return Status::OK();
}

bool Connection::LooksLikeHttp() const {
  // A request line starts with a method: the connection header's first
  // bytes are "GET / H", "HEAD /h" and so on.
  static constexpr const char* kMethods[] = {"GET ",     "HEAD ",  "POST ",  "PUT ",    "DELETE ",
                                             "OPTIONS ", "PATCH ", "TRACE ", "CONNECT "};
  const char* got = reinterpret_cast<const char*>(conn_header_);
  for (const char* m : kMethods) {
    size_t n = std::min(strlen(m), conn_header_got_);
    if (n > 0 && memcmp(got, m, n) == 0) return true;
  }
  return false;
}

void Connection::BecomeHttp() {
  // The socket and what was read go to an HttpConnection on this reactor;
  // this connection closes quietly.
  std::string first(reinterpret_cast<const char*>(conn_header_), conn_header_got_);
  const ConnectionOptions& o = reactor_->options();
  // A slot of the RPC port's HTTP pool, not of the RPC connections (this
  // connection's own count goes when it does, below).
  HttpConnectionPool::Slot slot;
  if (o.http_connections != nullptr) slot = o.http_connections->Take(remote_);
  if (slot.kind() == HttpConnectionPool::Kind::kRefused) {
    // The request's bytes are read first: closing a socket with unread
    // input sends a reset, which may overtake the answer.
    uint8_t drain[16 * 1024];
    size_t got;
    (void)socket_.Read(drain, sizeof(drain), &got);
    HttpResponse busy;
    busy.status = 503;
    busy.body = "too many HTTP connections\n";
    std::string bytes = FormatHttpResponse(busy, /*keep_alive=*/false, /*head_request=*/false);
    iovec v{bytes.data(), bytes.size()};
    size_t ignored;
    (void)socket_.Writev(&v, 1, &ignored);  // best effort: the socket is new and empty
    Shutdown(Status::ServiceUnavailable("too many HTTP connections"));
    return;
  }
  reactor_->RemoveFd(socket_.fd());
  auto http =
      std::make_shared<HttpConnection>(reactor_, std::move(socket_), remote_, std::move(first),
                                       reactor_->http_handler(), std::move(slot));
  Shutdown(Status::Aborted("served as HTTP"));
  reactor_->AdoptHttpConnection(std::move(http));
}

void Connection::ReadAvailable() {
  for (int i = 0; i < kMaxReadsPerEvent; ++i) {
    if (state_ == State::kClosed || state_ == State::kClosingAfterFlush) return;
    last_activity_ = reactor_->loop_time();
    if (state_ == State::kAwaitingConnectionHeader) {
      Status s = ReadConnectionHeader();
      if (!s.ok() && s.IsCorruption() && LooksLikeHttp() && reactor_->http_handler() != nullptr &&
          reactor_->options().http_on_rpc_port) {
        BecomeHttp();
        return;
      }
      if (!s.ok()) {
        if (s.IsCorruption()) LogBadPeer(ToString() + ": " + s.ToString());
        Shutdown(s);
        return;
      }
      if (state_ == State::kAwaitingConnectionHeader) return;  // would block
      continue;
    }
    size_t space, n;
    uint8_t* dst;
    if (tls_reading_) {
      dst = tls_->ReadBuffer(&space);
    } else {
      dst = role_ == Role::kClient ? response_decoder_->WriteSpace(&space)
                                   : request_decoder_->WriteSpace(&space);
    }
    Status s = socket_.Read(dst, space, &n);
    if (!s.ok()) {
      if (role_ == Role::kServer && calls_in_flight() == 0 && state_ == State::kOpen) {
        VLOG(1) << ToString() << ": " << s.ToString();
      } else if (role_ == Role::kServer) {
        // A peer may connect and go in a loop: rate-limited as bad peers.
        LogBadPeer(ToString() + ": peer went away: " + s.ToString());
      }
      Shutdown(s);
      return;
    }
    if (n == 0) return;
    if (TransportMetrics* m = reactor_->options().metrics.get()) m->bytes_received->Increment(n);
    if (role_ == Role::kClient && !heard_from_server_) {
      heard_from_server_ = true;
      if (n >= 5 && memcmp(dst, "HTTP/", 5) == 0) {
        Shutdown(Status::NetworkError(
            "the server answered in HTTP, not KRPC: is this an HTTP-only address "
            "(Messenger::ListenHttp) instead of the RPC port?"));
        return;
      }
    }
    if (tls_reading_) {
      DecryptAndDecode(Slice(dst, n));
    } else {
      DecodeFrames(n);
    }
    if (!ChargePreAuthBytes()) return;
    if (n < space) return;  // the kernel had no more for now
  }
  // Bytes may be left. A worker that read them leaves them to the reactor:
  // bytes that came after the first of a burst woke the reactor, not the
  // worker, which the kernel takes off its set's wait queue as it wakes it
  // (WorkerReadsTest.ABurstLargerThanOneReadIsAllAnswered).
}

bool Connection::ChargePreAuthBytes() {
  if (!pre_auth_.held() || state_ == State::kClosed) return true;
  // What the frame in progress holds, not only what arrived of it: a large
  // frame's whole buffer is taken as soon as its length is read.
  const size_t held = request_decoder_->held_bytes();
  if (pre_auth_.Charge(held)) return true;
  Status s = Status::ServiceUnavailable(
      "connections not yet negotiated would hold more than " +
      std::to_string(reactor_->options().max_unauthenticated_bytes) +
      " bytes (the budget before authentication); closing this one, which holds " +
      std::to_string(held));
  LogBadPeer(ToString() + ": " + s.ToString());
  Shutdown(s);
  return false;
}

void Connection::DecodeFrames(size_t n) {
  while (true) {
    if (state_ == State::kClosed || state_ == State::kClosingAfterFlush) return;
    // One frame at a time while negotiating: the TLS handshake may end at
    // any frame, and the bytes after it are records, not frames; and the
    // frame that opens the connection raises the frame limit for the next.
    size_t max_frames = state_ == State::kOpen ? SIZE_MAX : 1;
    size_t got;
    if (role_ == Role::kClient) {
      auto& frames = response_frames_;  // reused: its capacity stays
      frames.clear();
      Status ds = response_decoder_->Consume(n, &frames, max_frames);
      got = frames.size();
      if (clear_after_tls_ && got > 0) {
        const wire::InboundResponse& f = frames.front();
        Shutdown(ClientClearFrameAfterTls(f.header.call_id(), f.header.is_error(), f.main_message));
        return;
      }
      for (auto& f : frames) {
        Status fs = HandleResponseFrame(std::move(f));
        if (!fs.ok()) {
          Shutdown(fs);
          return;
        }
        if (state_ == State::kClosed) return;
      }
      if (!ds.ok()) {
        LogBadPeer(ToString() + ": bad frame from server: " + ds.ToString());
        Shutdown(Status::NetworkError("bad frame from server: " + ds.message()));
        return;
      }
    } else {
      // However this returns, the calls of these frames that the handler
      // held back go to their queues.
      struct EndOfCalls {
        InboundCallHandler* handler;
        ~EndOfCalls() {
          if (handler != nullptr) handler->EndOfInboundCalls();
        }
      } end_of_calls{reactor_->inbound_handler()};
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
    reactor_->NoteFramesRead(got);
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
  auto decode = [this](size_t n) {
    reactor_->AssertCurrentThread();  // the sink runs inside Decrypt, below
    DecodeFrames(n);
    return state_ != State::kClosed && state_ != State::kClosingAfterFlush;
  };
  Status ts;
  bool answered;
  if (role_ == Role::kClient) {
    DecoderSink<wire::ResponseDecoder> sink(response_decoder_.get(), decode);
    ts = tls_->Decrypt(records, &sink, &answered);
  } else {
    DecoderSink<wire::RequestDecoder> sink(request_decoder_.get(), decode);
    ts = tls_->Decrypt(records, &sink, &answered);
  }
  if (state_ == State::kClosed) return;
  if (answered && !flush_requested_) {
    flush_requested_ = true;
    reactor_->RequestFlush(this);
  }
  if (ts.ok()) return;
  if (ts.IsAborted()) {
    VLOG(1) << ToString() << ": " << ts.ToString();
    Shutdown(Status::NetworkError("peer ended the TLS session (close_notify)"));
    return;
  }
  if (role_ == Role::kClient && state_ != State::kOpen && ts.IsNotAuthorized()) {
    // The server's TLS alert while negotiating: its refusal (say, of this
    // client's certificate), authenticated as a record.
    Shutdown(Status::NotAuthorized("server rejected negotiation: " + ts.message()));
    return;
  }
  if (role_ == Role::kClient && state_ != State::kOpen) {
    std::string raw = tls_->TakeRawInput();
    // A server that rejects this client's certificate learns so only after
    // the client has switched to records, and answers with a clear error
    // frame (whose length starts with 0, never a TLS record type).
    if (!raw.empty() && raw[0] == '\0') {
      DecodeClearErrorFrame(raw);
      return;
    }
  }
  LogBadPeer(ToString() + ": " + ts.ToString());
  Shutdown(ts);
}

void Connection::DecodeClearErrorFrame(const std::string& raw) {
  DCHECK(role_ == Role::kClient);
  // Not open: DecodeFrames takes one frame at a time, so only one is read.
  DCHECK(state_ != State::kOpen);
  tls_reading_ = false;
  clear_after_tls_ = true;
  Slice rest(raw);
  while (!rest.empty() && state_ != State::kClosed) {
    size_t space;
    uint8_t* dst = response_decoder_->WriteSpace(&space);
    size_t k = std::min(space, rest.size());
    memcpy(dst, rest.data(), k);
    rest.remove_prefix(k);
    DecodeFrames(k);
  }
}

}  // namespace osprey::transport
