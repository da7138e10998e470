// A client connection's own work: responses matched to calls, the client
// side of negotiation (Kerberos and TLS included), and sending calls.
#include <glog/logging.h>
#include <sys/ioctl.h>

#include <algorithm>

#include "osprey/transport/blocking_worker.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/connection_internal.h"
#include "osprey/transport/negotiation.h"

namespace osprey::transport {

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
  if (frame.header.is_error() && !retired_) {
    ErrorStatusPB err;
    if (err.ParseFromArray(frame.main_message.data(),
                           static_cast<int>(frame.main_message.size())) &&
        err.code() == ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN) {
      retired_ = true;
    }
  }
  std::shared_ptr<ClientCall> call = client_calls_.TakeSent(id);
  if (call == nullptr) {
    // The call timed out or was cancelled: its late response is dropped.
    VLOG(2) << ToString() << ": dropping response to finished call " << id;
    return Status::OK();
  }
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
  if (Status ps = ParseNegotiate(body, &pb); !ps.ok()) {
    return Status::NetworkError("server sent a bad negotiation message: " + ps.message());
  }
  NegotiationSteps steps;
  OSPREY_RETURN_NOT_OK(client_negotiator_->Handle(pb, &steps));
  return ApplyClientSteps(steps);
}

void Connection::StartKerberos() {
  std::shared_ptr<GssapiSaslClient> gssapi = client_negotiator_->TakeKerberosStart();
  std::weak_ptr<Connection> weak = shared_from_this();
  std::weak_ptr<Reactor> reactor = reactor_keepalive_;
  auto start = [weak, reactor, gssapi]() {
    std::string token;
    Status started = gssapi->Start(&token);
    if (auto r = reactor.lock()) {
      r->Schedule([weak, gssapi, started, token = std::move(token)]() mutable {
        if (auto c = weak.lock()) {
          c->reactor_->AssertCurrentThread();  // tasks run on the reactor
          c->KerberosStarted(std::move(gssapi), started, std::move(token));
        }
      });
    }
  };
  BlockingWorker* worker = reactor_->options().blocking_worker.get();
  if (worker == nullptr) {
    start();  // its result still comes back as a task
  } else if (!worker->Submit(start)) {
    Shutdown(Status::ServiceUnavailable(
        ToString() + ": too many Kerberos negotiations wait for the KDC; try again later"));
  }
}

void Connection::KerberosStarted(std::shared_ptr<GssapiSaslClient> gssapi, const Status& started,
                                 std::string token) {
  if (state_ != State::kNegotiating) return;  // closed (timed out) meanwhile
  NegotiationSteps steps;
  Status s =
      client_negotiator_->KerberosStarted(std::move(gssapi), started, std::move(token), &steps);
  if (s.ok()) s = ApplyClientSteps(steps);
  if (!s.ok()) {
    Shutdown(s);
    return;
  }
  Flush();
}

Status Connection::ApplyClientSteps(const NegotiationSteps& steps) {
  std::unique_ptr<TlsSession> session;
  if (steps.tls_handshake_done) session = client_negotiator_->TakeTlsSession();
  ApplyNegotiationSteps(steps, client_negotiator_->agreed(), std::move(session));
  if (steps.start_kerberos) StartKerberos();
  if (steps.done) {
    wire::ConnectionContextPB context;
    OSPREY_RETURN_NOT_OK(client_negotiator_->ConnectionContext(&context));
    AuthenticatedIdentity identity = identity_;
    identity.method = client_negotiator_->method();
    FixIdentity(std::move(identity));
    RequestHeader header;
    header.set_call_id(kConnectionContextCallId);
    QueueMessage(&header, context);
    EnterOpen();
    if (tls_ != nullptr) tls_->set_keep_raw_input(false);
    SendPendingCalls();
  }
  return Status::OK();
}

void Connection::ApplyNegotiationSteps(const NegotiationSteps& steps, const TlsFeatures& agreed,
                                       std::unique_ptr<TlsSession> session) {
  if (steps.tls_handshake_done) {
    security_ = agreed.authentication_only ? ConnectionSecurity::kTlsAuthenticationOnly
                                           : ConnectionSecurity::kTlsEncrypted;
  }
  for (size_t i = 0; i < steps.send.size(); ++i) {
    if (static_cast<int>(i) == steps.records_from) StartTlsRecords(std::move(session));
    SendNegotiation(steps.send[i]);
  }
  if (steps.records_from == static_cast<int>(steps.send.size())) {
    StartTlsRecords(std::move(session));
  }
}

void Connection::StartTlsRecords(std::unique_ptr<TlsSession> session) {
  CHECK(session != nullptr) << "records start only after a finished handshake";
  // What is queued so far (the last handshake token) goes in the clear,
  // ahead of every record.
  tls_ = std::make_unique<TlsRecordLayer>(std::move(session), &outbound_);
  outbound_bytes_ = 0;
  // Until negotiation ends, the server may answer in the clear: with one
  // frame, at most the negotiation frame limit and its length.
  tls_->set_keep_raw_input(role_ == Role::kClient,
                           4 + std::min(reactor_->options().max_negotiation_frame_size,
                                        reactor_->options().max_frame_size));
  tls_switch_pending_ = true;
}

void Connection::QueueCall(std::shared_ptr<ClientCall> call) {
  reactor_->AssertCurrentThread();
  if (state_ == State::kClosed) {
    call->Finish(close_reason_.ok() ? Status::NetworkError("connection closed") : close_reason_);
    return;
  }
  call->AssertOnReactor();
  call->conn_ = this;
  if (state_ == State::kOpen) {
    SendCall(std::move(call));
  } else {
    client_calls_.Hold(std::move(call));
  }
}

void Connection::SendPendingCalls() {
  for (auto& c : client_calls_.TakeHeld()) {
    if (!c->finished()) SendCall(std::move(c));
  }
}

void Connection::SendCall(std::shared_ptr<ClientCall> call) {
  int32_t id = client_calls_.NextFreeId();
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
  call->AssertOnReactor();
  call->call_id_ = id;
  client_calls_.AddSent(id, std::move(call));
  QueueFrame(std::move(frame));
  // A dormant connection asks its reactor for its read interest back
  // (MoveRoute).
  MoveRoute(WakeRoute::Event::kCallSent);
}

CallPhase Connection::PhaseOf(const ClientCall* call) {
  reactor_->AssertCurrentThread();
  call->AssertOnReactor();
  CallPhase phase;
  if (state_ == State::kClosed) {
    phase.step = CallPhase::Step::kClosed;
  } else if (call->call_id_ < 0) {
    phase.step =
        state_ == State::kConnecting ? CallPhase::Step::kConnecting : CallPhase::Step::kNegotiating;
  } else {
    phase.unwritten_bytes = outbound_bytes_ + (tls_ != nullptr ? tls_->unsent_bytes() : 0);
    int unread = 0;
    if (::ioctl(socket_.fd(), FIONREAD, &unread) == 0 && unread > 0) {
      phase.unread_bytes = static_cast<size_t>(unread);
      // An answer may have come as the deadline passed; one that waited
      // while no one held the socket's read interest is a stall here. The
      // status says it each time; the log, with the route, now and then.
      LOG_EVERY_N(WARNING, 100) << ToString() << ": " << call->Describe() << " timed out with "
                                << unread << " bytes unread on its socket; wake route "
                                << WakeRoute::Name(route_.route());
    }
  }
  return phase;
}

void Connection::ForgetCall(ClientCall* call) {
  reactor_->AssertCurrentThread();
  call->AssertOnReactor();
  if (call->call_id_ >= 0) client_calls_.ForgetSent(call->call_id_, call);
  // A call still waiting for negotiation stays held and is skipped once
  // finished.
  call->conn_ = nullptr;
}

}  // namespace osprey::transport
