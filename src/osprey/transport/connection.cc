#include "osprey/transport/connection.h"

#include <glog/logging.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <functional>

#include "osprey/base/log_rate_limiter.h"
#include "osprey/transport/blocking_worker.h"
#include "osprey/transport/http_connection.h"
#include "osprey/transport/negotiation.h"
#include "osprey/transport/transport_metrics.h"
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

// Worker sets (Connection::ParkForWorker) open in this process: two
// descriptors each, so at most an eighth of RLIMIT_NOFILE of them (a
// quarter of the descriptors), lest they starve the sockets. Connections
// past that have none, and their workers wait in their queues.
std::atomic<int64_t> worker_sets_open{0};
int64_t WorkerSetLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur == RLIM_INFINITY) return int64_t{1} << 20;
  return static_cast<int64_t>(rl.rlim_cur / 8);
}

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

Connection::Connection(Reactor* reactor, Role role, Socket socket, const Sockaddr& remote,
                       std::string user, std::string host)
    : reactor_(reactor),
      reactor_keepalive_(reactor->shared_from_this()),
      role_(role),
      socket_(std::move(socket)),
      remote_(remote),
      host_(std::move(host)),
      identity_{std::move(user), "", AuthenticationMethod::kPlain},
      state_(role == Role::kClient ? State::kConnecting : State::kAwaitingConnectionHeader),
      route_(role == Role::kClient),
      last_activity_(MonoTime::Now()) {
  // Raised to max_frame_size when the connection opens (OpenFrameLimit).
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
  if (worker_set_fd_ >= 0) {
    ::close(worker_set_fd_);
    ::close(worker_wake_fd_);
    worker_sets_open.fetch_sub(1);
  }
}

void Connection::RaiseFrameLimit() {
  DCHECK(state_ == State::kOpen);
  size_t max = reactor_->options().max_frame_size;
  if (response_decoder_) response_decoder_->set_max_frame_size(max);
  if (request_decoder_) request_decoder_->set_max_frame_size(max);
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

namespace {
// What a peer causes at will (a bad header, a refused negotiation, a
// silent or unreading peer) is logged through one limiter, a count per
// interval: no peer can fill the server's log.
void LogBadPeer(const std::string& line) {
  std::string suffix;
  if (LogRateLimiter::BadPeers()->Allow(MonoTime::Now(), &suffix)) {
    LOG(WARNING) << line << suffix;
  }
}
}  // namespace

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

uint32_t Connection::EpollEvents() const {
  bool reading = state_ != State::kClosingAfterFlush;
  // A worker's set shares the socket with the reactor's (ParkForWorker).
  bool want_in = reading && route_.EpollIn();
  // A client connection out of EPOLLIN still learns that the server closed
  // it (a FIN alone). Parked or dormant, the mask is the same, so that
  // going from one to the other makes no system call.
  bool want_rdhup = reading && !want_in && role_ == Role::kClient;
  return (want_in ? uint32_t{EPOLLIN} : 0u) | (want_rdhup ? uint32_t{EPOLLRDHUP} : 0u) |
         (epollout_ ? uint32_t{EPOLLOUT} : 0u);
}

Status Connection::SyncEpollEvents() {
  uint32_t want = EpollEvents();
  if (want == registered_events_) return Status::OK();
  if (worker_set_fd_ >= 0) {
    OSPREY_RETURN_NOT_OK(reactor_->ReplaceFd(socket_.fd(), want | EPOLLEXCLUSIVE, this));
  } else {
    OSPREY_RETURN_NOT_OK(reactor_->ModifyFd(socket_.fd(), want, this));
  }
  registered_events_ = want;
  return Status::OK();
}

void Connection::UpdateEpollInterest() {
  if (state_ == State::kClosed) return;
  bool want_out = state_ == State::kConnecting || HasUnsentBytes();
  if (want_out == epollout_) return;
  epollout_ = want_out;
  Status s = SyncEpollEvents();
  if (!s.ok()) Shutdown(s);
}

WakeRoute::Actions Connection::MoveRoute(WakeRoute::Event event, bool calls_awaited) {
  const WakeRoute::Route from = route_.route();
  WakeRoute::Actions a = route_.Apply(event, calls_awaited);
  DCHECK(a.legal) << ToString() << ": " << WakeRoute::Name(event) << " from route "
                  << WakeRoute::Name(from);
  return a;
}

void Connection::RestoreReadInterest() {
  reactor_->AssertCurrentThread();
  if (!MoveRoute(WakeRoute::Event::kReadInterestDue).sync_epoll) return;
  Status s = SyncEpollEvents();
  if (!s.ok()) Shutdown(s);
}

bool Connection::Park(int wake_fd) {
  reactor_->AssertCurrentThread();
  // A client's caller waits for its own call's answer; a server's worker
  // for the next request of a connection with nothing else in flight.
  // With TLS too: every read decrypts all the complete records it got
  // (TlsRecordLayer::Decrypt), so no plaintext waits anywhere but on the
  // socket, which is what the waiter polls.
  bool quiet = calls_in_flight() == (role_ == Role::kClient ? 1u : 0u);
  if (!quiet || state_ != State::kOpen || route_.parked() || HasUnsentBytes()) return false;
  WakeRoute::Actions a = MoveRoute(role_ == Role::kClient ? WakeRoute::Event::kCallerParks
                                                          : WakeRoute::Event::kWorkerParks);
  parked_wake_fd_ = wake_fd;
  Status s = a.sync_epoll ? SyncEpollEvents() : Status::OK();
  if (!s.ok()) {
    MoveRoute(WakeRoute::Event::kUnpark);  // no waiter yet: nothing to wake
    Shutdown(s);
    return false;
  }
  return true;
}

void Connection::Unpark() {
  reactor_->AssertCurrentThread();
  if (!route_.parked()) return;
  WakeRoute::Actions a = MoveRoute(WakeRoute::Event::kUnpark, calls_in_flight() > 0);
  if (a.close_worker_set) {
    CloseWorkerSet();  // closed: its waiter, here, was its last user
    return;
  }
  if (!a.sync_epoll) return;
  Status s = SyncEpollEvents();
  if (!s.ok()) Shutdown(s);
}

bool Connection::ParkForWorker() {
  reactor_->AssertCurrentThread();
  DCHECK(role_ == Role::kServer);
  return worker_set_fd_ >= 0 && Park(worker_wake_fd_);
}

Status Connection::MakeWorkerSet() {
  // Made when the connection opens rather than when a worker first waits,
  // so that an open server connection always holds the same descriptors.
  if (worker_sets_open.fetch_add(1) >= WorkerSetLimit()) {
    worker_sets_open.fetch_sub(1);
    VLOG(1) << ToString() << ": worker sets at their limit; workers wait in their queues";
    return Status::OK();
  }
  int set = ::epoll_create1(EPOLL_CLOEXEC);
  int wake = set < 0 ? -1 : ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    // Out of descriptors, most likely: workers wait in their queues.
    LOG_EVERY_N(WARNING, 100) << ToString() << ": no worker can wait on this connection: "
                              << (set < 0 ? "epoll_create1: " : "eventfd: ") << strerror(errno);
    if (set >= 0) ::close(set);
    worker_sets_open.fetch_sub(1);
    return Status::OK();
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;
  ev.data.fd = socket_.fd();
  int err = 0;
  if (::epoll_ctl(set, EPOLL_CTL_ADD, socket_.fd(), &ev) != 0) err = errno;
  ev.events = EPOLLIN;
  ev.data.fd = wake;
  if (err == 0 && ::epoll_ctl(set, EPOLL_CTL_ADD, wake, &ev) != 0) err = errno;
  if (err != 0) {
    LOG_EVERY_N(WARNING, 100) << ToString()
                              << ": no worker can wait on this connection: epoll_ctl: "
                              << strerror(err);
    ::close(set);
    ::close(wake);
    worker_sets_open.fetch_sub(1);
    return Status::OK();
  }
  worker_set_fd_ = set;
  worker_wake_fd_ = wake;
  // Exclusive waiters wake in the order they were added: the reactor's
  // registration goes behind the worker's set.
  return reactor_->ReplaceFd(socket_.fd(), registered_events_ | EPOLLEXCLUSIVE, this);
}

void Connection::CloseWorkerSet() {
  if (worker_set_fd_ < 0) return;
  ::close(worker_set_fd_);
  ::close(worker_wake_fd_);
  worker_set_fd_ = worker_wake_fd_ = -1;
  worker_sets_open.fetch_sub(1);
}

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
  // Counted as HTTP, not in the RPC connections' slots (this connection's
  // own count goes when it does, below).
  if (o.http_connections != nullptr &&
      o.http_connections->load() >= static_cast<int64_t>(o.max_http_connections)) {
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
                                       reactor_->http_handler(), o.http_connections);
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
    if (n < space) return;  // the kernel had no more for now
  }
  // Bytes may be left. A worker that read them leaves them to the reactor:
  // bytes that came after the first of a burst woke the reactor, not the
  // worker, which the kernel takes off its set's wait queue as it wakes it
  // (WorkerReadsTest.ABurstLargerThanOneReadIsAllAnswered).
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
    identity_.method = client_negotiator_->method();
    RequestHeader header;
    header.set_call_id(kConnectionContextCallId);
    QueueMessage(&header, context);
    state_ = State::kOpen;
    RaiseFrameLimit();
    if (tls_ != nullptr) tls_->set_keep_raw_input(false);
    if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
    negotiation_timer_ = {};
    if (TransportMetrics* m = reactor_->options().metrics.get()) {
      m->CountNegotiated(/*inbound=*/false, security_);
      m->CountAuthenticated(/*inbound=*/false, identity_.method);
    }
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
  // Until negotiation ends, the server may answer in the clear.
  tls_->set_keep_raw_input(role_ == Role::kClient);
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
    client_calls_.Park(std::move(call));
  }
}

void Connection::SendPendingCalls() {
  for (auto& c : client_calls_.TakeParked()) {
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
  call->call_id_ = id;
  client_calls_.AddSent(id, std::move(call));
  QueueFrame(std::move(frame));
  if (MoveRoute(WakeRoute::Event::kCallSent).request_read_interest) {
    reactor_->RequestReadInterest(this);
  }
}

void Connection::ForgetCall(ClientCall* call) {
  reactor_->AssertCurrentThread();
  if (call->call_id_ >= 0) client_calls_.ForgetSent(call->call_id_, call);
  // A call still waiting for negotiation stays parked and is skipped once
  // finished.
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
      Status s = server_negotiator_->CheckConnectionContext(ctx);
      if (!s.ok()) {
        SendFatalError(id, ErrorStatusPB::FATAL_UNAUTHORIZED, s);
        return s;
      }
      state_ = State::kOpen;
      RaiseFrameLimit();
      if (reactor_->options().worker_reads) OSPREY_RETURN_NOT_OK(MakeWorkerSet());
      if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
      negotiation_timer_ = {};
      if (TransportMetrics* m = reactor_->options().metrics.get()) {
        m->CountNegotiated(/*inbound=*/true, security_);
        m->CountAuthenticated(/*inbound=*/true, identity_.method);
      }
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
    identity_ = server_negotiator_->identity();
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
  bool negotiating = state_ == State::kNegotiating || state_ == State::kAwaitingContext ||
                     state_ == State::kAwaitingConnectionHeader;
  if (TransportMetrics* m = reactor_->options().metrics.get(); m != nullptr && negotiating) {
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
      c.user = identity_.user;
      c.principal = identity_.principal;
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
    c.user = identity_.user;
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

void Connection::Shutdown(const Status& why) {
  reactor_->AssertCurrentThread();
  if (state_ == State::kClosed) return;
  auto self = shared_from_this();
  if (TransportMetrics* m = reactor_->options().metrics.get()) {
    // A negotiation that began (a peer that connects and says nothing is
    // not one) and ended without the messenger shutting down.
    bool negotiating = state_ == State::kNegotiating || state_ == State::kAwaitingContext ||
                       (state_ == State::kAwaitingConnectionHeader && conn_header_got_ > 0);
    if (negotiating && !why.IsAborted()) {
      m->CountNegotiationFailure(TransportMetrics::Classify(why));
    }
  }
  // Nothing was sent on a connection that never connected: its calls may
  // go to their names' next addresses.
  const bool never_connected = role_ == Role::kClient && state_ == State::kConnecting;
  state_ = State::kClosed;
  closed_.store(true, std::memory_order_release);
  close_reason_ = why;
  if (negotiation_timer_) reactor_->CancelTimer(negotiation_timer_);
  negotiation_timer_ = {};
  if (socket_.is_open()) {
    if (tls_ != nullptr) tls_->CloseNotify(&socket_);  // a clean end of the TLS session
    reactor_->RemoveFd(socket_.fd());
    socket_.Close();
  }
  WakeRoute::Actions a = MoveRoute(WakeRoute::Event::kClose);
  if (a.wake_waiter) {
    // Its waiter polls the socket just closed, which tells poll nothing:
    // wake it. The eventfd stays the waiter's until it unparks, which needs
    // the loop lock held here.
    uint64_t one = 1;
    ssize_t n = ::write(parked_wake_fd_, &one, sizeof(one));
    (void)n;
  }
  if (a.close_worker_set) CloseWorkerSet();
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
  server_calls_.Clear();
  reactor_->RemoveConnection(this);
}

}  // namespace osprey::transport
