// A server connection's own work: request frames to the InboundCallHandler,
// the server side of negotiation, responses from any thread, and fatal
// errors.

#include <atomic>

#include "osprey/transport/connection.h"
#include "osprey/transport/connection_internal.h"
#include "osprey/transport/negotiation.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey::transport {

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
      if (Status s = ParseConnectionContext(frame.main_message, &ctx); !s.ok()) {
        SendFatalError(id, ErrorStatusPB::FATAL_DESERIALIZING_REQUEST, s);
        return s;
      }
      Status s = server_negotiator_->CheckConnectionContext(ctx);
      if (!s.ok()) {
        SendFatalError(id, ErrorStatusPB::FATAL_UNAUTHORIZED, s);
        return s;
      }
      pre_auth_.Release();  // authenticated: no longer bounded as a stranger
      EnterOpen();
      if (reactor_->options().worker_reads) OSPREY_RETURN_NOT_OK(MakeWorkerSet());
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
  InboundCallTrace* trace;
  if (!server_calls_.Add(id, reactor_->options().track_calls, reactor_->loop_time(), &trace)) {
    Status s = Status::Corruption("duplicate call id " + std::to_string(id) +
                                  " while a call with that id is in flight");
    SendFatalError(id, ErrorStatusPB::FATAL_INVALID_RPC_HEADER, s);
    return s;
  }
  reactor_->inbound_handler()->HandleInboundCall(shared_from_this(), std::move(frame), trace);
  return Status::OK();
}

Status Connection::HandleServerNegotiation(const wire::InboundRequest& frame) {
  NegotiatePB in;
  if (Status s = ParseNegotiate(frame.main_message, &in); !s.ok()) {
    SendFatalError(kNegotiationCallId, ErrorStatusPB::FATAL_UNAUTHORIZED, s);
    return s;
  }
  NegotiationSteps steps;
  Status s = server_negotiator_->Handle(in, &steps);
  if (!s.ok()) {
    std::string alert = server_negotiator_->TakeAlertForRecords();
    if (!alert.empty() && outbound_.empty()) {
      // The client reads records by now: it gets OpenSSL's alert, a record
      // it can authenticate, instead of a clear frame it must refuse.
      LogBadPeer(ToString() + ": closing with a TLS alert: " + s.ToString());
      iovec v{alert.data(), alert.size()};
      size_t ignored;
      (void)socket_.Writev(&v, 1, &ignored);  // a few bytes into an empty send buffer
      CloseAfterFatalError(s);
      return s;
    }
    SendFatalError(kNegotiationCallId,
                   server_negotiator_->token_refused()
                       ? ErrorStatusPB::FATAL_INVALID_AUTHENTICATION_TOKEN
                       : ErrorStatusPB::FATAL_UNAUTHORIZED,
                   s);
    return s;
  }
  std::unique_ptr<TlsSession> session;
  if (steps.tls_handshake_done) session = server_negotiator_->TakeTlsSession();
  ApplyNegotiationSteps(steps, server_negotiator_->agreed(), std::move(session));
  if (steps.done) {
    FixIdentity(server_negotiator_->identity());
    state_ = State::kAwaitingContext;
  }
  return Status::OK();
}

namespace {
thread_local std::shared_ptr<Connection>* tls_answered = nullptr;
}  // namespace

void Connection::NoteAnsweredConnections(std::shared_ptr<Connection>* slot) { tls_answered = slot; }

void Connection::QueueResponse(const std::shared_ptr<Connection>& conn, int32_t call_id,
                               std::unique_ptr<wire::OutboundFrame> frame) {
  Reactor* r = conn->reactor_;
  if (r->IsCurrentThread()) {
    DeliverResponse(conn.get(), call_id, std::move(frame));
  } else if (conn->server_calls_in_flight_.load(std::memory_order_relaxed) <= 1 &&
             r->TryRunHere([&] {
               conn->reactor_->AssertCurrentThread();
               DeliverResponse(conn.get(), call_id, std::move(frame));
               if (tls_answered != nullptr && conn->calls_in_flight() == 0) *tls_answered = conn;
             })) {
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
  conn->server_calls_.Remove(call_id);
  if (conn->state_ == State::kClosingAfterFlush) return;
  conn->QueueFrame(std::move(frame));
}

void Connection::SendFatalError(int32_t call_id, ErrorStatusPB::RpcErrorCodePB code,
                                const Status& why) {
  if (state_ == State::kClosed || state_ == State::kClosingAfterFlush) return;
  LogBadPeer(ToString() + ": closing after " + ErrorStatusPB::RpcErrorCodePB_Name(code) + ": " +
             why.ToString());
  ResponseHeader header;
  header.set_call_id(call_id);
  header.set_is_error(true);
  ErrorStatusPB err;
  err.set_message(why.message());
  err.set_code(code);
  QueueMessage(&header, err);
  CloseAfterFatalError(why);
}

void Connection::CloseAfterFatalError(const Status& why) {
  // A refused negotiation is a failed one: Shutdown, which counts those,
  // will see kClosingAfterFlush.
  if (TransportMetrics* m = reactor_->options().metrics.get(); m != nullptr && IsNegotiating()) {
    m->CountNegotiationFailure(TransportMetrics::Classify(why));
  }
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

}  // namespace osprey::transport
