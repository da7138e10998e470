// Connection's lifecycle: construction, start, connect, the negotiation
// timeout, the events the reactor hands it, introspection (/connections,
// /rpcz, idleness) and Shutdown. The other concerns are in files of their
// own: park.cc (who reads the socket: the wake route), connection_read.cc
// (reading and decoding, TLS included), connection_write.cc (the outbound
// queue), connection_client.cc (client calls and negotiation),
// connection_server.cc (server dispatch and negotiation).
#include "osprey/transport/connection.h"

#include <glog/logging.h>
#include <sys/epoll.h>

#include <algorithm>
#include <atomic>

#include "osprey/base/log_escape.h"
#include "osprey/base/log_rate_limiter.h"
#include "osprey/transport/connection_internal.h"
#include "osprey/transport/negotiation.h"
#include "osprey/transport/transport_metrics.h"
#include "osprey/wire/connection_header.h"

namespace osprey::transport {

namespace connection_internal {
void LogBadPeer(const std::string& line) {
  std::string suffix;
  if (LogRateLimiter::BadPeers()->Allow(MonoTime::Now(), &suffix)) {
    // Bad-peer lines quote what the peer sent (a SASL mechanism, a frame's
    // text): escaped, so that no peer can end the line and forge another.
    LOG(WARNING) << EscapeForLog(line) << suffix;
  }
}
}  // namespace connection_internal

namespace {
uint64_t NextSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

Connection::Connection(Reactor* reactor, Role role, Socket socket, const Sockaddr& remote,
                       std::string user, std::string host, PreAuthLimits::Ticket pre_auth)
    : reactor_(reactor),
      reactor_keepalive_(reactor->shared_from_this()),
      role_(role),
      serial_(NextSerial()),
      socket_(std::move(socket)),
      remote_(remote),
      host_(std::move(host)),
      identity_{std::move(user), "", AuthenticationMethod::kPlain},
      state_(role == Role::kClient ? State::kConnecting : State::kAwaitingConnectionHeader),
      route_(role == Role::kClient),
      pre_auth_(std::move(pre_auth)),
      last_activity_(MonoTime::Now()) {
  // Raised to max_frame_size when the connection opens (RaiseFrameLimit).
  size_t max =
      std::min(reactor->options().max_negotiation_frame_size, reactor->options().max_frame_size);
  if (role == Role::kClient) {
    response_decoder_ = std::make_unique<wire::ResponseDecoder>(max);
  } else {
    request_decoder_ = std::make_unique<wire::RequestDecoder>(max);
  }
}

Connection::~Connection() {
  if (open_counter_) open_counter_->fetch_sub(1);
  // No worker waits on them: a waiter holds a reference to this connection.
  CloseWorkerSet();
}

void Connection::RaiseFrameLimit() {
  DCHECK(state_ == State::kOpen);
  size_t max = reactor_->options().max_frame_size;
  if (response_decoder_) response_decoder_->set_max_frame_size(max);
  if (request_decoder_) request_decoder_->set_max_frame_size(max);
}

void Connection::FixIdentity(AuthenticatedIdentity identity) {
  DCHECK(!identity_fixed_.load(std::memory_order_relaxed))
      << ToString() << ": identity fixed twice";
  identity_ = std::move(identity);
  identity_fixed_.store(true, std::memory_order_release);
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
  registered_events_ = events;
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
  LogBadPeer(s.ToString());
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
  ClientAuthPolicy auth;
  auth.mode = o.authentication;
  auth.kerberos = o.kerberos_client;
  auth.service_name = o.sasl_proto_name;
  auth.host = host_;
  auth.certificate = o.encryption != RpcEncryption::kDisabled && o.tls_client != nullptr &&
                     o.tls_client->authenticates_by_certificate() &&
                     o.tls_client_cert_authentication;
  auth.token = o.authn_token;
  auth.verifies_server = o.tls_client != nullptr && o.tls_client->verifies_peer();
  auth.presents_certificate = o.tls_client != nullptr && o.tls_client->presents_certificate();
  client_negotiator_ = std::make_unique<ClientNegotiator>(identity_.user, ClientTlsOffer(),
                                                          o.encryption == RpcEncryption::kRequired,
                                                          o.tls_client.get(), std::move(auth));
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
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) ReadAvailable();
  if (state_ != State::kClosed && (events & EPOLLOUT)) Flush();
}

bool Connection::IdleSince(MonoTime cutoff) const {
  reactor_->AssertCurrentThread();
  return state_ == State::kOpen && calls_in_flight() == 0 && !HasUnsentBytes() &&
         last_activity_ < cutoff;
}

void Connection::CollectCalls(MonoTime now, size_t limit, std::vector<CallInfo>* out,
                              size_t* total) const {
  reactor_->AssertCurrentThread();
  if (state_ == State::kClosed) return;
  if (role_ == Role::kServer) {
    server_calls_.ForEachTrace([&](const InboundCallTrace& t) {
      ++*total;
      if (out->size() >= limit) return;
      CallInfo& c = out->emplace_back();
      c.inbound = true;
      const std::string* method = t.method.load(std::memory_order_acquire);
      c.method = method != nullptr ? *method : "(not routed yet)";
      c.remote = remote_;
      c.user = identity().user;  // a lambda: the analysis does not see the lock held
      c.principal = identity().principal;
      c.elapsed = now - t.received;
      c.state = t.running.load(std::memory_order_relaxed) ? "running" : "queued";
    });
    return;
  }
  client_calls_.ForEach([&](const ClientCall& call, bool sent) {
    if (call.finished()) return;
    ++*total;
    if (out->size() >= limit) return;
    CallInfo& c = out->emplace_back();
    c.method = call.Describe();
    c.remote = remote_;
    c.user = identity().user;
    c.elapsed = now - call.started();
    c.state = sent ? "awaiting response" : "awaiting negotiation";
  });
}

ConnectionInfo Connection::Info() const {
  reactor_->AssertCurrentThread();
  ConnectionInfo info;
  info.remote = remote_;
  info.inbound = role_ == Role::kServer;
  info.user = identity_.user;
  info.principal = identity_.principal;
  info.authentication = identity_.method;
  info.negotiated = state_ == State::kOpen;
  if (info.negotiated) info.security = security_;
  info.calls_in_flight = calls_in_flight();
  info.outbound_queued_bytes = outbound_bytes_ + (tls_ != nullptr ? tls_->unsent_bytes() : 0);
  info.wake_route = std::string(WakeRoute::Name(route_.route()));
  return info;
}

bool Connection::IsNegotiating() const {
  return state_ == State::kNegotiating || state_ == State::kAwaitingContext ||
         (state_ == State::kAwaitingConnectionHeader && conn_header_got_ > 0);
}

void Connection::EnterOpen() {
  state_ = State::kOpen;
  RaiseFrameLimit();
  if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
  negotiation_timer_ = {};
  if (TransportMetrics* m = reactor_->options().metrics.get()) {
    const bool inbound = role_ == Role::kServer;
    m->CountNegotiated(inbound, security_);
    m->CountAuthenticated(inbound, identity_.method);
  }
}

void Connection::Shutdown(const Status& why) {
  reactor_->AssertCurrentThread();
  if (state_ == State::kClosed) return;
  auto self = shared_from_this();
  if (TransportMetrics* m = reactor_->options().metrics.get()) {
    // Unless the messenger is shutting down.
    if (IsNegotiating() && !why.IsAborted()) {
      m->CountNegotiationFailure(TransportMetrics::Classify(why));
    }
  }
  // Nothing was sent on a connection that never connected: its calls may
  // go to their names' next addresses.
  const bool never_connected = role_ == Role::kClient && state_ == State::kConnecting;
  state_ = State::kClosed;
  closed_.store(true, std::memory_order_release);
  close_reason_ = why;
  pre_auth_.Release();
  if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
  negotiation_timer_ = {};
  if (socket_.is_open()) {
    if (tls_ != nullptr) tls_->CloseNotify(&socket_);  // a clean end of the TLS session
    reactor_->RemoveFd(socket_.fd());
    socket_.Close();
  }
  // Wakes a parked waiter, or closes the worker's set (MoveRoute).
  MoveRoute(WakeRoute::Event::kClose);
  outbound_.clear();
  outbound_bytes_ = 0;
  PublishQueuedBytes();

  Status call_status = why;
  if (!(why.IsNetworkError() || why.IsAborted() || why.IsNotAuthorized())) {
    call_status = Status::NetworkError(why.message());
  }
  // Name the connection once: some reasons already start with it.
  const std::string where = ToString();
  if (call_status.message().rfind(where, 0) != 0) call_status = call_status.CloneAndPrepend(where);
  for (auto& c : client_calls_.TakeAll()) {
    c->AssertOnReactor();
    c->lost_with_ = never_connected ? 0 : serial_;
    if (never_connected && c->TakeFallback()) {
      VLOG(1) << c->Describe() << ": " << call_status.ToString() << "; trying "
              << c->destination().remote.ToString();
      // Queued anew from the reactor's next iteration, not from inside this
      // connection's close.
      c->ReleaseTransportState();
      if (reactor_->ScheduleCall(std::move(c))) continue;
    }
    c->Finish(call_status);
  }
  if (role_ == Role::kServer && server_calls_.size() > 0 &&
      reactor_->inbound_handler() != nullptr) {
    reactor_->inbound_handler()->ConnectionClosed(this);
  }
  server_calls_.Clear();
  reactor_->RemoveConnection(this);
}

}  // namespace osprey::transport
