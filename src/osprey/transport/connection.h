// Connection: one TCP connection, client or server side: its frame I/O and
// what each frame means. It owns the socket, the incremental frame decoder
// of its inbound side and the queue of frames to send. Around it:
//
//  - negotiation is a ClientNegotiator or ServerNegotiator (negotiator.h):
//    the connection parses negotiation frames, feeds them in, and sends
//    what comes back;
//  - with TLS negotiated (and not TLS_AUTHENTICATION_ONLY), the bytes after
//    the handshake go through a TlsRecordLayer (tls_record_layer.h);
//  - the calls in flight are in a ClientCallTable or ServerCallTable
//    (call_tables.h): a client connection matches responses to its calls by
//    call id; a server connection hands each request frame to the
//    InboundCallHandler.
//
// Owned by its Reactor (shared with server calls that will answer on it).
// Every method runs under that reactor's loop lock (on its thread or a
// thread acting in its place: Reactor::TryRunHere, RunHere), and says so:
// REQUIRES, or reactor_->AssertCurrentThread(). Except, on any thread:
// QueueResponse, NoteAnsweredConnections (the calling thread's own slot),
// closed_any_thread, identity() and user() once negotiation fixed them,
// and the accessors of values fixed at construction (role, remote,
// reactor).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/connection_types.h"
#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"
#include "osprey/transport/call_phase.h"
#include "osprey/transport/call_tables.h"
#include "osprey/transport/client_call.h"
#include "osprey/transport/negotiation.h"
#include "osprey/transport/negotiator.h"
#include "osprey/transport/pre_auth_limits.h"
#include "osprey/transport/reactor.h"
#include "osprey/transport/tls_context.h"
#include "osprey/transport/tls_record_layer.h"
#include "osprey/transport/wake_route.h"
#include "osprey/wire/frame_decoder.h"
#include "osprey/wire/frame_encoder.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::transport {

class Connection : public EventHandler, public std::enable_shared_from_this<Connection> {
 public:
  enum class Role { kClient, kServer };

  // `host`: a client's host name as dialled (ConnectionKey::host).
  // `pre_auth`: a server connection's place among those not yet
  // negotiated (PreAuthLimits), held until it opens or closes.
  Connection(Reactor* reactor, Role role, Socket socket, const Sockaddr& remote, std::string user,
             std::string host = "", PreAuthLimits::Ticket pre_auth = {});
  ~Connection() override;

  Role role() const { return role_; }
  // Unique among the process's connections, never 0: what a call this
  // one's close failed remembers of it (ClientCall::lost_with()), which a
  // freed connection's reused address would not be.
  uint64_t serial() const { return serial_; }
  const Sockaddr& remote() const { return remote_; }
  Reactor* reactor() const { return reactor_; }
  // Client: the user it authenticates as. Server: set when SASL succeeds.
  const std::string& user() const { return identity().user; }
  // Server: who the client proved to be, and how; set when SASL succeeds,
  // before any call is read, and fixed from then on (FixIdentity). Any
  // thread once fixed: a worker reads it for a call of this connection,
  // whose hand-off orders the read after the write; before that, only the
  // reactor's thread or its borrower. Both checked in assertion builds.
  const AuthenticatedIdentity& identity() const OSPREY_NO_THREAD_SAFETY_ANALYSIS {
    DCHECK(identity_fixed_.load(std::memory_order_acquire) || reactor_->IsCurrentThread())
        << "a connection's identity read off its reactor before negotiation fixed it";
    return identity_;
  }

  // Server: counts this connection in `counter` until it is destroyed.
  void CountIn(std::shared_ptr<std::atomic<int64_t>> counter);

  // Registers with the reactor and begins negotiation (the client connects
  // first). Reactor thread.
  Status Start(bool connect_in_progress);

  // Client, reactor thread: sends `call` once negotiation is done.
  void QueueCall(std::shared_ptr<ClientCall> call);
  // Client, reactor thread: the call gave up (deadline, cancel); forget it
  // so that a late response is dropped.
  void ForgetCall(ClientCall* call);
  // Client, reactor thread: where `call`, queued here and not forgotten,
  // is now (its TimedOut message says it). Reads the socket's unread byte
  // count (one ioctl): only when a call times out.
  CallPhase PhaseOf(const ClientCall* call);

  // Server, any thread: sends the response to `call_id`. Dropped if the
  // connection has closed by then.
  static void QueueResponse(const std::shared_ptr<Connection>& conn, int32_t call_id,
                            std::unique_ptr<wire::OutboundFrame> frame);

  // The calling thread's QueueResponse sets *slot to a connection whose
  // last call in flight it answered itself (in the sleeping reactor's
  // place), from now until called again with null: a worker that may then
  // wait on that connection for its next request (Reactor::ParkForWorker).
  static void NoteAnsweredConnections(std::shared_ptr<Connection>* slot);

  // Reactor thread: the second half of QueueResponse.
  static void DeliverResponse(Connection* conn, int32_t call_id,
                              std::unique_ptr<wire::OutboundFrame> frame);

  // Reactor thread: closes the socket and fails every pending call with
  // `why` (exactly once each). Idempotent.
  void Shutdown(const Status& why);
  bool is_shut_down() const {
    reactor_->AssertCurrentThread();
    return state_ == State::kClosed;
  }
  // Client, reactor thread: the server said it is shutting down
  // (FATAL_SERVER_SHUTTING_DOWN); new calls, retries included, go on a new
  // connection, while the calls in flight here get their answers.
  bool retired() const {
    reactor_->AssertCurrentThread();
    return retired_;
  }
  // Any thread: whether the connection has closed. A server call queued for
  // a closed connection cannot be answered, so it need not run.
  bool closed_any_thread() const { return closed_.load(std::memory_order_acquire); }

  // Reactor thread.
  void HandleEvents(uint32_t epoll_events) override;
  void Flush();
  bool IdleSince(MonoTime cutoff) const;
  ConnectionInfo Info() const;
  // Appends the calls in flight on this connection (traced server calls,
  // every client call) until `out` holds `limit`; *total counts them all.
  void CollectCalls(MonoTime now, size_t limit, std::vector<CallInfo>* out, size_t* total) const;
  // The one count of calls in flight: a client's sent and unanswered, a
  // server's read and unanswered. Workers, off the loop lock, read
  // server_calls_in_flight_ instead, which the server table keeps equal.
  size_t calls_in_flight() const {
    reactor_->AssertCurrentThread();
    return role_ == Role::kClient ? client_calls_.sent() : server_calls_.size();
  }

  // Under the loop lock. On a clear open connection with
  // nothing left to write, a thread that would otherwise sleep until the
  // reactor wakes it waits on the socket itself: a client's blocking
  // caller whose call is the only one the connection awaits
  // (Reactor::WaitAsReader), a server's worker when no call of the
  // connection is in flight (Reactor::WaitForRequest). Park, for a
  // client, takes EPOLLIN away from the reactor; a server's socket keeps
  // it, behind the worker's own set (ParkForWorker). False, doing nothing,
  // if the connection is not in that state; Unpark ends it. `wake_fd`: the
  // waiter's eventfd, which Shutdown writes, since closing a socket does
  // not wake its poller; held from Park to Unpark, and the waiter keeps it
  // open until it unparked (its WakeFdLease, or this connection's own).
  bool Park(EventFdRef wake_fd);
  void Unpark();
  // Server: Park for a worker, which waits in epoll_wait on a set of this
  // connection's own (worker_set_fd()) holding the socket and an eventfd
  // (worker_wake_fd()), both made when the connection opens (so an open
  // server connection holds three descriptors; at most an eighth of
  // RLIMIT_NOFILE such sets in a process, past which a connection has none
  // and its workers wait in their queues) and closed with it. The
  // socket stays in the reactor's set with EPOLLIN: both sets hold it with
  // EPOLLEXCLUSIVE, the worker's first in the socket's wait queue, so a
  // request wakes the waiting worker alone, and the reactor when no worker
  // waits (as while the handler runs: a second request is read then).
  // Parking and unparking thus make no system call. Were the kernel to
  // wake the reactor first, it would read the request and the service
  // queue would wake the worker: slower, never wrong.
  bool ParkForWorker();
  int worker_set_fd() const {
    reactor_->AssertCurrentThread();
    return worker_set_fd_;
  }
  EventFdRef worker_wake_fd() const {
    reactor_->AssertCurrentThread();
    return worker_wake_fd_.ref();
  }
  // A client connection whose caller unparked it with no call left awaited
  // stays out of EPOLLIN ("dormant", watching only for the peer's close):
  // the next blocking call parks it again without two epoll_ctl calls.
  // Sending a call on it asks the reactor (Reactor::RequestReadInterest)
  // to give EPOLLIN back before it sleeps, unless a caller parked it first.
  void RestoreReadInterest();
  bool parked() const {
    reactor_->AssertCurrentThread();
    return route_.parked();
  }
  // Whether the socket took every byte queued (ParkForCaller: its request
  // went out whole).
  bool all_sent() const {
    reactor_->AssertCurrentThread();
    return !HasUnsentBytes();
  }
  // The socket a parked connection's caller polls; -1 once closed.
  int fd() const {
    reactor_->AssertCurrentThread();
    return socket_.fd();
  }

 private:
  enum class State {
    kConnecting,                // client: TCP connect in progress
    kAwaitingConnectionHeader,  // server
    kNegotiating,               // both: NEGOTIATE, TLS_HANDSHAKE, SASL (the negotiator's steps)
    kAwaitingContext,           // server: connection context expected
    kOpen,
    kClosingAfterFlush,  // server: a fatal error is queued, then close
    kClosed,
  };

  void OnConnected() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Whether the bytes read in place of the connection header begin an HTTP
  // request line.
  bool LooksLikeHttp() const OSPREY_REQUIRES(reactor_->loop_mu_);
  // Hands the socket to an HttpConnection on this reactor.
  void BecomeHttp() OSPREY_REQUIRES(reactor_->loop_mu_);
  // The identity negotiation settled on, from now on read-only: set once,
  // when negotiation ends and before the first call is read.
  void FixIdentity(AuthenticatedIdentity identity) OSPREY_REQUIRES(reactor_->loop_mu_);
  // Tells the messenger's metrics how many bytes wait for this peer.
  void PublishQueuedBytes() OSPREY_REQUIRES(reactor_->loop_mu_);
  void ReadAvailable() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Once open: frames may be max_frame_size long, no longer only
  // max_negotiation_frame_size.
  void RaiseFrameLimit() OSPREY_REQUIRES(reactor_->loop_mu_);
  // The one way into kOpen, for both roles: the negotiation timer goes,
  // frames may be max_frame_size long and the metrics count the
  // negotiation and its authentication.
  void EnterOpen() OSPREY_REQUIRES(reactor_->loop_mu_);
  // A negotiation began (a peer that connects and says nothing has not
  // begun one) and has not ended: what a failure of it is counted by.
  bool IsNegotiating() const OSPREY_REQUIRES(reactor_->loop_mu_);
  // Decodes and handles the frames `n` new bytes in the decoder complete.
  void DecodeFrames(size_t n) OSPREY_REQUIRES(reactor_->loop_mu_);
  // Server, not yet open: charges what the decoder now buffers against the
  // budget of connections not yet negotiated. False: over it, the
  // connection was closed.
  bool ChargePreAuthBytes() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Decrypts TLS records and decodes the frames they complete.
  void DecryptAndDecode(Slice records) OSPREY_REQUIRES(reactor_->loop_mu_);
  Status ReadConnectionHeader() OSPREY_REQUIRES(reactor_->loop_mu_);
  Status HandleResponseFrame(wire::InboundResponse frame) OSPREY_REQUIRES(reactor_->loop_mu_);
  Status HandleRequestFrame(wire::InboundRequest frame) OSPREY_REQUIRES(reactor_->loop_mu_);
  Status HandleClientNegotiation(const wire::InboundResponse& frame)
      OSPREY_REQUIRES(reactor_->loop_mu_);
  Status HandleServerNegotiation(const wire::InboundRequest& frame)
      OSPREY_REQUIRES(reactor_->loop_mu_);
  TlsFeatures ClientTlsOffer() const;
  // Sends what a negotiator asked for, switching to TLS records where it
  // said; `session` is the negotiator's once its handshake is done.
  void ApplyNegotiationSteps(const NegotiationSteps& steps, const TlsFeatures& agreed,
                             std::unique_ptr<TlsSession> session)
      OSPREY_REQUIRES(reactor_->loop_mu_);
  // From here on, bytes queued go out as TLS records of `session`.
  void StartTlsRecords(std::unique_ptr<TlsSession> session) OSPREY_REQUIRES(reactor_->loop_mu_);
  // A client that switched to records got clear bytes instead: reads one
  // clear frame from them, and no more (ClientClearFrameAfterTls).
  void DecodeClearErrorFrame(const std::string& raw) OSPREY_REQUIRES(reactor_->loop_mu_);

  void SendNegotiation(const wire::NegotiatePB& message) OSPREY_REQUIRES(reactor_->loop_mu_);
  void SendPendingCalls() OSPREY_REQUIRES(reactor_->loop_mu_);
  // After a fatal error was sent (a frame, or a TLS alert): counts a failed
  // negotiation, and closes once the peer had a second to read it.
  void CloseAfterFatalError(const Status& why) OSPREY_REQUIRES(reactor_->loop_mu_);
  void SendCall(std::shared_ptr<ClientCall> call) OSPREY_REQUIRES(reactor_->loop_mu_);
  // A negotiation message, the context or a fatal error: over TLS it ends
  // its record.
  template <class Header>
  void QueueMessage(Header* header, const google::protobuf::MessageLite& body)
      OSPREY_REQUIRES(reactor_->loop_mu_);
  void QueueFrame(std::unique_ptr<wire::OutboundFrame> frame) OSPREY_REQUIRES(reactor_->loop_mu_);
  // Flush() through the TLS record layer; false once the connection is
  // shut down.
  bool FlushRecords() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Reads what the peer sent before the write failed, then closes with `s`.
  void ShutdownAfterWriteError(const Status& s) OSPREY_REQUIRES(reactor_->loop_mu_);
  bool HasUnsentBytes() const OSPREY_REQUIRES(reactor_->loop_mu_) {
    return !outbound_.empty() || (tls_ != nullptr && tls_->unsent_bytes() > 0);
  }
  // Server: answers with a fatal error, then closes once it is sent.
  void SendFatalError(int32_t call_id, wire::ErrorStatusPB::RpcErrorCodePB code, const Status& why)
      OSPREY_REQUIRES(reactor_->loop_mu_);
  void UpdateEpollInterest() OSPREY_REQUIRES(reactor_->loop_mu_);
  // The one way the route moves, whatever the event (wake_route.h's table
  // says which code fires each, and under which preconditions, which this
  // checks in assertion builds): route_.Apply(event), then every action
  // the transition returns: the reactor's epoll mask (SyncEpollEvents),
  // the reactor's read interest (Reactor::RequestReadInterest), the
  // waiter's eventfd (written) and the worker's set (CloseWorkerSet).
  // `waiter`: a park's, the eventfd that wakes the thread that parks, held
  // until it unparks. False if the connection shut down instead (epoll
  // refused the change; a park is undone first, having no waiter yet).
  bool MoveRoute(WakeRoute::Event event, EventFdRef waiter = {})
      OSPREY_REQUIRES(reactor_->loop_mu_);
  // What the reactor's epoll set should watch on the socket now.
  uint32_t EpollEvents() const OSPREY_REQUIRES(reactor_->loop_mu_);
  // Gives epoll EpollEvents() if it has something else.
  Status SyncEpollEvents() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Makes the worker's set (ParkForWorker) and puts the reactor's
  // registration behind it. Without descriptors for it, logs and makes
  // none; an error only if the socket could not be registered again.
  Status MakeWorkerSet() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Once closed, when no worker waits on it.
  void CloseWorkerSet() OSPREY_REQUIRES(reactor_->loop_mu_);
  void OnNegotiationTimeout() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Client: runs the negotiator's Kerberos start on the messenger's
  // BlockingWorker, then KerberosStarted back on this reactor.
  void StartKerberos() OSPREY_REQUIRES(reactor_->loop_mu_);
  void KerberosStarted(std::shared_ptr<GssapiSaslClient> gssapi, const Status& started,
                       std::string token) OSPREY_REQUIRES(reactor_->loop_mu_);
  // What HandleClientNegotiation does with the negotiator's steps.
  Status ApplyClientSteps(const NegotiationSteps& steps) OSPREY_REQUIRES(reactor_->loop_mu_);
  std::string ToString() const;

  Reactor* const reactor_;
  // Keeps the reactor's memory, not its thread: a response queued from a
  // user's thread after the Messenger is gone is refused, not a use after
  // free.
  const std::shared_ptr<Reactor> reactor_keepalive_;
  const Role role_;
  const uint64_t serial_;
  Socket socket_;
  const Sockaddr remote_;
  const std::string host_;
  // Written on the loop only, until FixIdentity(); read-only from then on,
  // when identity() lets any thread read it.
  AuthenticatedIdentity identity_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::atomic<bool> identity_fixed_{false};
  State state_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::atomic<bool> closed_{false};
  bool retired_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  Status close_reason_ OSPREY_GUARDED_BY(reactor_->loop_mu_);

  // Inbound side.
  uint8_t conn_header_[7] OSPREY_GUARDED_BY(reactor_->loop_mu_);
  size_t conn_header_got_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = 0;
  std::unique_ptr<wire::RequestDecoder> request_decoder_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::unique_ptr<wire::ResponseDecoder> response_decoder_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::vector<wire::InboundRequest> request_frames_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::vector<wire::InboundResponse> response_frames_ OSPREY_GUARDED_BY(reactor_->loop_mu_);

  // Outbound side.
  std::deque<std::unique_ptr<wire::OutboundFrame>> outbound_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  size_t outbound_bytes_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = 0;
  bool flush_requested_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  bool epollout_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  // Who reads the socket: the reactor, or a parked waiter (see Park()), or
  // no one while dormant (see RestoreReadInterest()).
  WakeRoute route_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  // What epoll has for the socket, so that only changes make a system call.
  uint32_t registered_events_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = 0;
  // The parked waiter's eventfd (Park), empty whenever the route is not
  // parked: Shutdown writes it only while the waiter still holds it.
  EventFdRef parked_wake_fd_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  // See ParkForWorker(); -1 and empty before the connection opens and
  // once closed.
  int worker_set_fd_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = -1;
  EventFd worker_wake_fd_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::vector<iovec> iov_scratch_ OSPREY_GUARDED_BY(reactor_->loop_mu_);

  // The calls in flight, by role.
  ClientCallTable client_calls_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  // server_calls_.size(), readable from workers: a response written by
  // its worker (Reactor::TryRunHere) pays off only when no other call of
  // the connection could share its writev.
  std::atomic<size_t> server_calls_in_flight_{0};
  ServerCallTable server_calls_ OSPREY_GUARDED_BY(reactor_->loop_mu_){&server_calls_in_flight_};

  // One of these runs the negotiation, by role.
  std::unique_ptr<ClientNegotiator> client_negotiator_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::unique_ptr<ServerNegotiator> server_negotiator_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  // What the handshake agreed, for Info().
  ConnectionSecurity security_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = ConnectionSecurity::kClear;
  // Set once outbound bytes are TLS records.
  std::unique_ptr<TlsRecordLayer> tls_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  bool tls_reading_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;  // inbound bytes are records
  // Client: the server's first bytes were read (and were not HTTP).
  bool heard_from_server_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  // The handshake ended while frames were being decoded: the rest of the
  // decoder's buffer is records.
  bool tls_switch_pending_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  // A client that switched to records and then got clear bytes: it reads
  // one frame of them, and closes.
  bool clear_after_tls_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;

  TimerId negotiation_timer_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  // Held from the acceptor until the connection opens or closes; its
  // charge follows the bytes request_decoder_ buffers (ChargePreAuthBytes).
  PreAuthLimits::Ticket pre_auth_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::shared_ptr<std::atomic<int64_t>> open_counter_;
  MonoTime last_activity_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  int64_t published_queued_bytes_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = 0;
};

}  // namespace osprey::transport
