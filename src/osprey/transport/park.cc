// The park in one file: who is woken when a connection's socket turns
// readable (its wake route, whose table and rules are wake_route.h's), and
// the threads that wait on the socket in the reactor's place. Three sides:
//  - the connection's: MoveRoute, the one function that applies what a
//    transition of the route returns, whatever the event, with the entry
//    points of the events fired here (Park, Unpark, RestoreReadInterest;
//    SendCall and Shutdown fire theirs elsewhere); the reactor's epoll
//    mask for the socket; the worker's own epoll set;
//  - the reactor's (methods of Reactor, reactor.h): the eventfds it lends
//    blocking callers (WakeFdLease), parking a connection for a caller or
//    a worker, their wait on it (PollParked), reading it in the reactor's
//    place and unparking, and the read interest dormant connections ask
//    for;
//  - the blocking caller's: CallerWait (caller_wait.h), its wait and how
//    it is woken.
// reactor.cc keeps the loop, borrowing and the calls' assignment.
#include <glog/logging.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

#include "osprey/transport/caller_wait.h"
#include "osprey/transport/client_call.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/connection_internal.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey::transport {

namespace connection_internal {
std::atomic<int64_t> worker_sets_open{0};
int64_t WorkerSetLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur == RLIM_INFINITY) return int64_t{1} << 20;
  return static_cast<int64_t>(rl.rlim_cur / 8);
}
}  // namespace connection_internal

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

bool Connection::MoveRoute(WakeRoute::Event event, EventFdRef waiter) {
  using Event = WakeRoute::Event;
  reactor_->AssertCurrentThread();
  const bool parks = event == Event::kCallerParks || event == Event::kWorkerParks;
  // The preconditions wake_route.h's table states for each event.
  DCHECK_EQ(parks, static_cast<bool>(waiter))
      << ToString() << ": " << WakeRoute::Name(event)
      << ": a park, and only a park, brings its waiter's eventfd";
  DCHECK(!parks || (state_ == State::kOpen && (event == Event::kCallerParks || !HasUnsentBytes()) &&
                    calls_in_flight() == (role_ == Role::kClient ? 1u : 0u)))
      << ToString() << ": parked while not open and quiet";
  DCHECK(event != Event::kClose || (state_ == State::kClosed && !socket_.is_open()))
      << ToString() << ": the route closed before the socket";
  const WakeRoute::Route from = route_.route();
  // A client unparked with no call left awaited goes dormant.
  const bool calls_awaited = event != Event::kUnpark || calls_in_flight() > 0;
  const WakeRoute::Actions a = route_.Apply(event, calls_awaited);
  DCHECK(a.legal) << ToString() << ": " << WakeRoute::Name(event) << " from route "
                  << WakeRoute::Name(from);
  // The waiter's eventfd is held exactly while the route is parked, from
  // the park to the unpark: the waiter may give it back (a caller's lease)
  // from then on, so nothing here writes it after.
  if (!route_.parked()) {
    parked_wake_fd_ = {};
  } else if (parks && a.legal) {
    parked_wake_fd_ = waiter;
  }
  DCHECK_EQ(static_cast<bool>(parked_wake_fd_), route_.parked())
      << ToString() << ": route " << WakeRoute::Name(route_.route());

  // Every action the transition returns, whatever the event.
  if (a.wake_waiter) {
    // Its waiter polls a socket just closed, which tells poll nothing:
    // wake it. The eventfd stays the waiter's until it unparks, which
    // needs the loop lock held here.
    DCHECK(parked_wake_fd_) << ToString() << ": closed while parked, with no waiter's eventfd";
    parked_wake_fd_.Signal();
  }
  if (a.close_worker_set) CloseWorkerSet();
  if (a.request_read_interest) reactor_->RequestReadInterest(this);
  if (a.sync_epoll) {
    // Never on the way to a closed route: Shutdown, which moves there, is
    // not entered again from here.
    DCHECK(!route_.closed()) << ToString();
    Status s = SyncEpollEvents();
    if (!s.ok()) {
      // A park the reactor's set did not follow has no waiter yet: undone
      // first (the set still has the mask from before the park, so the
      // undo makes no system call), so that the close wakes no one.
      if (parks) MoveRoute(Event::kUnpark);
      Shutdown(s);
      return false;
    }
  }
  return true;
}

void Connection::RestoreReadInterest() {
  reactor_->AssertCurrentThread();
  MoveRoute(WakeRoute::Event::kRestoreReadInterest);
}

bool Connection::Park(EventFdRef wake_fd) {
  reactor_->AssertCurrentThread();
  // A client's caller waits for its own call's answer; a server's worker
  // for the next request of a connection with nothing else in flight.
  // With TLS too: every read decrypts all the complete records it got
  // (TlsRecordLayer::Decrypt), so no plaintext waits anywhere but on the
  // socket, which is what the waiter polls.
  // A caller parks with its request not yet written (ParkForCaller writes
  // it next); a worker with nothing unsent.
  const bool client = role_ == Role::kClient;
  bool quiet = calls_in_flight() == (client ? 1u : 0u);
  if (!quiet || state_ != State::kOpen || route_.parked() || (!client && HasUnsentBytes()))
    return false;
  return MoveRoute(client ? WakeRoute::Event::kCallerParks : WakeRoute::Event::kWorkerParks,
                   wake_fd);
}

void Connection::Unpark() {
  reactor_->AssertCurrentThread();
  if (!route_.parked()) return;
  MoveRoute(WakeRoute::Event::kUnpark);
}

bool Connection::ParkForWorker() {
  reactor_->AssertCurrentThread();
  DCHECK(role_ == Role::kServer);
  return worker_set_fd_ >= 0 && Park(worker_wake_fd_.ref());
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
  EventFd wake = set < 0 ? EventFd() : EventFd::Create();
  if (!wake) {
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
  ev.data.fd = wake.fd();
  if (err == 0 && ::epoll_ctl(set, EPOLL_CTL_ADD, wake.fd(), &ev) != 0) err = errno;
  if (err != 0) {
    LOG_EVERY_N(WARNING, 100) << ToString()
                              << ": no worker can wait on this connection: epoll_ctl: "
                              << strerror(err);
    ::close(set);  // `wake` closes as it goes
    worker_sets_open.fetch_sub(1);
    return Status::OK();
  }
  worker_set_fd_ = set;
  worker_wake_fd_ = std::move(wake);
  // Exclusive waiters wake in the order they were added: the reactor's
  // registration goes behind the worker's set.
  return reactor_->ReplaceFd(socket_.fd(), registered_events_ | EPOLLEXCLUSIVE, this);
}

void Connection::CloseWorkerSet() {
  if (worker_set_fd_ < 0) return;
  DCHECK(!route_.parked()) << ToString() << ": a worker's set closed while it may wait on it";
  ::close(worker_set_fd_);
  worker_set_fd_ = -1;
  worker_wake_fd_.Close();
  worker_sets_open.fetch_sub(1);
}

// --- The reactor's side ---

EventFd Reactor::TakeWakeFd() {
  EventFd spare = EventFd::Adopt(spare_wake_fd_.exchange(-1));
  return spare ? std::move(spare) : EventFd::Create();
}

void Reactor::GiveBackWakeFd(EventFd fd) {
  int none = -1;
  // Kept as the spare, or closed here (`fd` goes out of scope).
  if (spare_wake_fd_.compare_exchange_strong(none, fd.fd())) (void)fd.Release();
}

WakeFdLease& WakeFdLease::operator=(WakeFdLease&& other) noexcept {
  if (this != &other) {
    GiveBack();
    reactor_ = std::exchange(other.reactor_, nullptr);
    fd_ = std::move(other.fd_);
  }
  return *this;
}

void WakeFdLease::Wake() const {
  DCHECK(fd_) << "an eventfd written after its lease went back";
  fd_.Signal();
}

void WakeFdLease::GiveBack() {
  if (!fd_) return;
  std::exchange(reactor_, nullptr)->GiveBackWakeFd(std::move(fd_));
}

ParkedConnection Reactor::ParkForWorker(const std::shared_ptr<Connection>& conn) {
  ParkedConnection parked;
  RunHere([&] {
    AssertCurrentThread();
    if (closing() || !conn->ParkForWorker()) return;
    if (TransportMetrics* m = options_.metrics.get()) m->worker_reads->Increment();
    parked.conn = conn;
    parked.fd = conn->worker_set_fd();
    parked.wake_fd = conn->worker_wake_fd();
    parked.worker_set = true;
  });
  return parked;
}

Reactor::ParkedPoll Reactor::PollParked(const ParkedConnection& parked) {
  // Each waiting thread learns for itself whether its waits are short.
  thread_local AdaptiveSpin spin;
  bool readable = false;
  bool woken = false;
  int n = 0;
  if (parked.worker_set) {
    epoll_event events[2];
    SpinThenWait(spin, -1, [&](int ms) { return n = ::epoll_wait(parked.fd, events, 2, ms); });
    if (n < 0) return errno == EINTR ? ParkedPoll::kWoken : ParkedPoll::kFailed;
    for (int i = 0; i < n; ++i) {
      (events[i].data.fd == parked.wake_fd.fd() ? woken : readable) = true;
    }
  } else {
    pollfd fds[2] = {{parked.fd, POLLIN, 0}, {parked.wake_fd.fd(), POLLIN, 0}};
    SpinThenWait(spin, -1, [&](int ms) { return n = ::poll(fds, 2, ms); });
    if (n < 0) return errno == EINTR ? ParkedPoll::kWoken : ParkedPoll::kFailed;
    woken = (fds[1].revents & POLLIN) != 0;
    readable = fds[0].revents != 0;
  }
  if (woken) {
    (void)parked.wake_fd.Drain();
    if (TransportMetrics* m = options_.metrics.get()) m->parked_wakeups->Increment();
  }
  return readable ? ParkedPoll::kReadable : ParkedPoll::kWoken;
}

void Reactor::ReadParkedAndUnpark(const ParkedConnection& parked, bool readable) {
  Connection* conn = parked.conn.get();
  if (readable && conn->parked() && !conn->is_shut_down()) {
    const size_t before = conn->calls_in_flight();
    conn->HandleEvents(EPOLLIN);
    TransportMetrics* m = options_.metrics.get();
    if (m != nullptr && parked.worker_set && !conn->is_shut_down() &&
        conn->calls_in_flight() > before) {
      m->worker_read_requests->Increment(static_cast<int64_t>(conn->calls_in_flight() - before));
    }
  }
  conn->Unpark();
}

void Reactor::Unpark(const ParkedConnection& parked) {
  RunHere([&] {
    AssertCurrentThread();
    ReadParkedAndUnpark(parked, /*readable=*/false);
  });
}

ParkedConnection Reactor::ParkForCaller(ClientCall* call) {
  AssertCurrentThread();
  call->AssertOnReactor();
  Connection* conn = call->conn_;
  if (!options_.caller_reads || conn == nullptr || call->finished()) return {};
  WakeFdLease lease(this, TakeWakeFd());
  // Parked before the request goes out. A connection whose last answer the
  // reactor read still has EPOLLIN in the reactor's set, and the park takes
  // it away: after the write, a quick answer could wake the reactor first,
  // and the caller's next call, finding it awake, would be queued to it,
  // and the next after that parked again, in turn (seen under load: rounds
  // of CallerReadsTest with half their calls read by the reactor).
  const bool parked_here = lease && conn->Park(lease.ref());
  // The request must be on the wire before the caller sleeps on the answer.
  FlushRequested();
  if (!parked_here) return {};  // the caller waits as any other; the lease goes back unused
  if (call->finished() || conn->is_shut_down() || !conn->all_sent()) {
    // The write failed (the close signalled the eventfd) or the socket took
    // part of it: the reactor writes the rest and reads the answer.
    conn->Unpark();
    (void)lease.ref().Drain();
    return {};
  }
  if (TransportMetrics* m = options_.metrics.get()) m->caller_reads->Increment();
  ParkedConnection parked;
  parked.conn = conn->shared_from_this();
  parked.fd = conn->fd();
  parked.wake_fd = lease.ref();
  parked.lease = std::move(lease);
  return parked;
}

void Reactor::WaitAsReader(const ParkedConnection& parked, const std::atomic<bool>& done) {
  Connection* conn = parked.conn.get();
  bool unparked = false;
  while (!unparked && !done.load()) {
    ParkedPoll polled = PollParked(parked);
    if (polled == ParkedPoll::kFailed) break;  // the reactor reads from here on
    if (done.load()) continue;
    // Readable (or closed, or the number reused after the reactor closed
    // it), or woken by the eventfd alone: the connection's state, under the
    // loop lock, says which. Not polled again before that: a wake with
    // nothing to read is the connection's close, which writes the eventfd
    // after closing the socket, so its number may already name a file of
    // another thread's (a socket just accepted), and a poll on it would
    // hold that file, and its close, until this call ends
    // (WaitAsReaderTest).
    const bool readable = polled == ParkedPoll::kReadable;
    RunHere([&] {
      AssertCurrentThread();
      if (readable && conn->parked() && !conn->is_shut_down()) conn->HandleEvents(EPOLLIN);
      if (done.load() || !conn->parked() || conn->is_shut_down()) {
        ReadParkedAndUnpark(parked, /*readable=*/false);
        unparked = true;
      }
    });
  }
  if (!unparked) Unpark(parked);
}

void Reactor::RequestReadInterest(Connection* conn) {
  AssertCurrentThread();
  read_interest_list_.push_back(conn);
}

void Reactor::RestoreReadInterest() {
  // Connections closed meanwhile are still in the table's closed list:
  // the pointers are good until this loop iteration ends.
  std::vector<Connection*> conns;
  conns.swap(read_interest_list_);
  for (Connection* c : conns) c->RestoreReadInterest();
}

// --- The blocking caller's side ---

void CallerWait::Finish() {
  finished_.store(true);
  // Seen with `polling_` in the order both were stored (sequentially
  // consistent): a caller about to poll sees `finished_`, or we see
  // `polling_` and wake it. Not when Finish runs on the caller's own
  // thread (it read its own answer, Reactor::WaitAsReader): no one sleeps
  // then, and the write would wake the eventfd's next borrower for
  // nothing (docs/perf-results/journal.md, "The self-wake, again").
  const WakeFdLease* lease = polling_.load();
  if (lease != nullptr && !pthread_equal(caller_, pthread_self())) lease->Wake();
  if (!Reactor::CountDownAfterTurn(&done_)) done_.CountDown();
}

void CallerWait::Wait() {
  if (parked_) {
    polling_.store(&parked_.lease);
    parked_.conn->reactor()->WaitAsReader(parked_, finished_);
  }
  done_.Wait();
}

}  // namespace osprey::transport
