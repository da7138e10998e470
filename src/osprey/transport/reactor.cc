#include "osprey/transport/reactor.h"

#include <glog/logging.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <utility>

#include "osprey/base/thread_name.h"
#include "osprey/transport/client_call.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/http_connection.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey::transport {

namespace {
// Every Reactor that exists (Reactor::AbortCallIfAlive).
Mutex live_reactors_mu;
std::unordered_set<const Reactor*>& LiveReactors() {
  static auto* live = new std::unordered_set<const Reactor*>;  // never freed: used until exit
  return *live;
}
// The reactor whose loop this thread runs, if any.
thread_local Reactor* tls_reactor = nullptr;
thread_local const Reactor* tls_borrowed = nullptr;
}  // namespace

bool Reactor::BorrowedHere() const { return tls_borrowed == this; }

bool Reactor::CountDownAfterTurn(CountDownLatch* latch) {
  // A borrower's thread has no tls_reactor: only the reactor's own keeps.
  Reactor* r = tls_reactor;
  if (r == nullptr || !r->options_.caller_reads) return false;
  r->after_turn_.push_back(latch);
  return true;
}

void Reactor::CountDownLatchesAfterTurn() {
  DCHECK(tls_reactor == this);
  if (after_turn_.empty()) return;
  // Counting down may let a caller destroy its latch, never this vector.
  for (CountDownLatch* latch : after_turn_) latch->CountDown();
  after_turn_.clear();
}

bool Reactor::BeginBorrow() {
  if (closing() || !sleeping_.load() || tls_reactor != nullptr || tls_borrowed != nullptr)
    return false;
  if (!loop_mu_.TryLock()) return false;
  if (closing()) {
    loop_mu_.Unlock();
    return false;
  }
  tls_borrowed = this;
  loop_time_ = MonoTime::Now();
  return true;
}

void Reactor::BeginBorrowWaiting() {
  CHECK(tls_reactor == nullptr && tls_borrowed == nullptr)
      << "reactor " << name_ << ": RunHere on a reactor thread or inside TryRunHere";
  loop_mu_.Lock();
  tls_borrowed = this;
  loop_time_ = MonoTime::Now();
}

void Reactor::EndTurn() {
  FlushRequested();
  RestoreReadInterest();
}

void Reactor::EndBorrow() {
  EndTurn();
  // Under the loop lock, which every borrower holds: a plain add.
  if (TransportMetrics* m = options_.metrics.get()) m->reactor_borrows->Increment();
  bool wake = timers_.NextDeadline() < planned_wake_;
  {
    MutexLock l(task_mu_);
    wake |= !inbox_.empty();
  }
  tls_borrowed = nullptr;
  loop_mu_.Unlock();
  // Closed connections stay in the table's closed list for the reactor to free: the
  // events it may be holding from its last epoll_wait can still name them.
  if (wake) Wake();
}

void Reactor::FlushRequested() {
  // One writev per connection however many frames were queued.
  while (!flush_list_.empty()) {
    std::vector<Connection*> to_flush;
    to_flush.swap(flush_list_);
    for (Connection* c : to_flush) c->Flush();
  }
}

bool Reactor::OnAnyReactorThread() { return tls_reactor != nullptr || tls_borrowed != nullptr; }

MonoTime Reactor::LoopTimeOrNow() {
  if (tls_reactor == nullptr) return MonoTime::Now();
  return tls_reactor->loop_time();
}

Reactor::Reactor(std::string name, const ConnectionOptions& options, InboundCallHandler* handler,
                 int index)
    : name_(std::move(name)), options_(options), handler_(handler), reactor_index_(index) {
  MutexLock l(live_reactors_mu);
  LiveReactors().insert(this);
}

Reactor::~Reactor() {
  {
    MutexLock l(live_reactors_mu);
    LiveReactors().erase(this);
  }
  Shutdown();
  // No lease is out: each holds a reference to this reactor.
  EventFd::Adopt(spare_wake_fd_.exchange(-1)).Close();
  wake_fd_.Close();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

Status Reactor::Start() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return Status::NetworkError("epoll_create1", errno);
  wake_fd_ = EventFd::Create();
  if (!wake_fd_) return Status::NetworkError("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake fd
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_.fd(), &ev) != 0) {
    return Status::NetworkError("epoll_ctl(eventfd)", errno);
  }
  EventFd spare = EventFd::Create();
  if (!spare) return Status::NetworkError("eventfd", errno);
  GiveBackWakeFd(std::move(spare));
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void Reactor::Shutdown() {
  MutexLock shutdown_lock(shutdown_mu_);
  if (!thread_.joinable()) return;
  CHECK(!IsCurrentThread()) << "a reactor cannot shut itself down";
  closing_.store(true, std::memory_order_release);
  {
    MutexLock l(task_mu_);
    shutdown_requested_ = true;
  }
  Wake();
  thread_.join();
}

void Reactor::Wake() { wake_fd_.Signal(); }

bool Reactor::Schedule(Task task) {
  return Post([&](Inbox& in) { in.tasks.push_back(std::move(task)); });
}

bool Reactor::ScheduleCall(std::shared_ptr<ClientCall>&& call) {
  return Post([&](Inbox& in) { in.calls.push_back(std::move(call)); });
}

bool Reactor::ScheduleResponse(std::shared_ptr<Connection> conn, int32_t call_id,
                               std::unique_ptr<wire::OutboundFrame> frame) {
  return Post([&](Inbox& in) {
    in.responses.push_back(Inbox::Response{std::move(conn), call_id, std::move(frame)});
  });
}

template <class F>
bool Reactor::Post(F&& add) {
  bool was_empty;
  {
    MutexLock l(task_mu_);
    if (stopped_) return false;
    was_empty = inbox_.empty();
    add(inbox_);
  }
  // Only a reactor that is in (or about to enter) epoll_wait needs the
  // eventfd: a running one drains the queue before it sleeps again. The
  // reactor publishes `sleeping_` before it last checks the queue, and we
  // read it after our push, so one of us always sees the other (both
  // sequentially consistent).
  if (was_empty && sleeping_.load() && !IsCurrentThread()) Wake();
  return true;
}

void Reactor::AbortCallIfAlive(Reactor* reactor, std::shared_ptr<ClientCall> call,
                               const Status& why) {
  // Held while AbortCall schedules the abort: the reactor cannot go meanwhile.
  MutexLock l(live_reactors_mu);
  if (LiveReactors().count(reactor) != 0) reactor->AbortCall(std::move(call), why);
}

void Reactor::AbortCall(std::shared_ptr<ClientCall> call, const Status& why) {
  Schedule([call = std::move(call), why]() {
    if (call->finished()) return;
    call->AssertOnReactor();
    if (call->conn_ != nullptr) call->conn_->ForgetCall(call.get());
    call->Finish(why);
  });
}

namespace {
Status EpollControl(int epoll_fd, int op, int fd, uint32_t events, EventHandler* handler,
                    const char* what) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  if (::epoll_ctl(epoll_fd, op, fd, &ev) != 0) return Status::NetworkError(what, errno);
  return Status::OK();
}
}  // namespace

Status Reactor::AddFd(int fd, uint32_t events, EventHandler* handler) {
  AssertCurrentThread();
  return EpollControl(epoll_fd_, EPOLL_CTL_ADD, fd, events, handler, "epoll_ctl(ADD)");
}

Status Reactor::ModifyFd(int fd, uint32_t events, EventHandler* handler) {
  AssertCurrentThread();
  if (TransportMetrics* m = options_.metrics.get()) m->epoll_changes->Increment();
  return EpollControl(epoll_fd_, EPOLL_CTL_MOD, fd, events, handler, "epoll_ctl(MOD)");
}

Status Reactor::ReplaceFd(int fd, uint32_t events, EventHandler* handler) {
  AssertCurrentThread();
  if (TransportMetrics* m = options_.metrics.get()) m->epoll_changes->Increment();
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr) != 0) {
    return Status::NetworkError("epoll_ctl(DEL, ADD)", errno);
  }
  return EpollControl(epoll_fd_, EPOLL_CTL_ADD, fd, events, handler, "epoll_ctl(DEL, ADD)");
}

void Reactor::RemoveFd(int fd) {
  AssertCurrentThread();
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

TimerId Reactor::ScheduleTimer(MonoTime when, std::function<void()> fn) {
  AssertCurrentThread();
  return timers_.Add(when, std::move(fn));
}

void Reactor::CancelTimer(TimerId id) {
  AssertCurrentThread();
  timers_.Cancel(id);
}

namespace {

// epoll_pwait2 came with glibc 2.35 (and Linux 5.11).
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define OSPREY_HAVE_EPOLL_PWAIT2 1
constexpr bool kHavePreciseWait = true;
#else
constexpr bool kHavePreciseWait = false;
#endif
constexpr int kNoPreciseWait = -2;
// Timers due sooner than this are waited for to the microsecond.
constexpr MonoDelta kPreciseWaitBelow = MonoDelta::FromMilliseconds(10);
// Set once a kernel said it has no epoll_pwait2 (before 5.11): epoll_wait
// from then on.
std::atomic<bool> precise_wait_missing{false};

// epoll_wait for `timeout` to the nanosecond, or kNoPreciseWait where
// epoll_pwait2 is missing (then the caller waits with epoll_wait).
int PreciseEpollWait(int fd, epoll_event* events, int max, MonoDelta timeout) {
#ifdef OSPREY_HAVE_EPOLL_PWAIT2
  if (precise_wait_missing.load(std::memory_order_relaxed)) return kNoPreciseWait;
  const int64_t ns = timeout.ToNanoseconds();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  int n = ::epoll_pwait2(fd, events, max, &ts, nullptr);
  if (n < 0 && errno == ENOSYS) {
    precise_wait_missing.store(true, std::memory_order_relaxed);
    return kNoPreciseWait;
  }
  return n;
#else
  (void)fd, (void)events, (void)max, (void)timeout;
  return kNoPreciseWait;
#endif
}

}  // namespace

int Reactor::WaitMillis(MonoDelta d) {
  if (d <= MonoDelta()) return 0;
  // Round up so the timer has expired when epoll_wait returns.
  return static_cast<int>(std::min<int64_t>((d.ToMicroseconds() + 999) / 1000, 1000));
}

void Reactor::RunTimers() {
  // The iteration's start: a timer that expires while this iteration runs
  // waits for the next one, which follows at once (its timeout is zero).
  MonoTime now = loop_time_;
  timers_.RunExpired(now);
  if (now >= next_idle_check_) {
    CheckIdleConnections();
    next_idle_check_ = now + std::min(MonoDelta::FromSeconds(1),
                                      MonoDelta::FromNanoseconds(std::max<int64_t>(
                                          options_.idle_timeout.ToNanoseconds() / 2, 10000000)));
  }
}

void Reactor::CheckIdleConnections() {
  MonoTime cutoff = MonoTime::Now() - options_.idle_timeout;
  std::vector<std::shared_ptr<Connection>> idle;
  for (auto& conn : conns_.Snapshot()) {
    if (conn->IdleSince(cutoff)) idle.push_back(std::move(conn));
  }
  for (auto& conn : idle) {
    VLOG(1) << name_ << ": closing idle connection to " << conn->remote().ToString();
    conn->Shutdown(Status::NetworkError("connection idle for longer than " +
                                        options_.idle_timeout.ToString()));
  }
}

void Reactor::RunTasks() {
  {
    MutexLock l(task_mu_);
    std::swap(inbox_, draining_);
  }
  // Calls before tasks: a Cancel() task must find its call already assigned.
  for (auto& call : draining_.calls) AssignCall(std::move(call));
  for (auto& r : draining_.responses) {
    Connection::DeliverResponse(r.conn.get(), r.call_id, std::move(r.frame));
  }
  for (auto& t : draining_.tasks) t();
  draining_.clear();
}

void Reactor::RequestFlush(Connection* conn) {
  AssertCurrentThread();
  flush_list_.push_back(conn);
}

void Reactor::Loop() {
  SetCurrentThreadName("osp-reactor-" + std::to_string(reactor_index_));
  thread_id_.store(std::this_thread::get_id());
  tls_reactor = this;
  std::vector<epoll_event> events(256);
  AdaptiveSpin spin;  // this thread's, touched without the loop lock
  loop_mu_.Lock();
  // Two clock reads per iteration: when it starts (loop_time_) and when it
  // ends, which also times the next wait.
  MonoTime now = MonoTime::Now();
  next_idle_check_ = now + MonoDelta::FromSeconds(1);
  while (true) {
    // Until the next timer or idle check, once for both waits below.
    const MonoDelta due = std::min(next_idle_check_, timers_.NextDeadline()) - now;
    int timeout = WaitMillis(due);
    // The wait to the microsecond when epoll_pwait2 exists and the next
    // timer is near: epoll_wait's whole milliseconds, rounded up, would
    // fire a timer due in 300 us (a hedged call's, HedgingPolicy) after a
    // millisecond or more. Longer waits (call deadlines, the idle check)
    // keep epoll_wait, whose rounding costs them nothing that matters.
    const bool precise = kHavePreciseWait && timeout > 0 && due < kPreciseWaitBelow &&
                         due < MonoDelta::FromMilliseconds(timeout);
    bool shutdown = false;
    sleeping_.store(true);
    {
      MutexLock l(task_mu_);
      if (!inbox_.empty()) timeout = 0;
      shutdown = shutdown_requested_;
    }
    if (shutdown) break;
    planned_wake_ = now + (precise ? due : MonoDelta::FromMilliseconds(timeout));
    const bool one_call_at_a_time = frames_read_ <= 1;
    frames_read_ = 0;
    loop_mu_.Unlock();
    // `sleeping_` is published and the loop lock free: a caller woken now
    // finds the reactor asleep and sends its next call itself.
    CountDownLatchesAfterTurn();
    int n = 0;
    // No spin when a timer or a task is due within the millisecond: the
    // loop must not be late for it.
    SpinThenWait(
        spin, timeout,
        [&](int ms) {
          if (ms > 0 && precise &&
              (n = PreciseEpollWait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                                    due)) != kNoPreciseWait) {
            return n;
          }
          return n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), ms);
        },
        /*may_spin=*/timeout != 0 && one_call_at_a_time);
    sleeping_.store(false);
    loop_mu_.Lock();
    loop_time_ = MonoTime::Now();
    if (n < 0 && errno != EINTR) PLOG(FATAL) << name_ << ": epoll_wait";
    for (int i = 0; i < n; ++i) {
      auto* handler = static_cast<EventHandler*>(events[i].data.ptr);
      if (handler == nullptr) {  // the wake fd
        (void)wake_fd_.Drain();
        continue;
      }
      handler->HandleEvents(events[i].events);
    }
    RunTasks();
    RunTimers();
    // Write everything the events, tasks and timers queued.
    EndTurn();
    conns_.ReleaseClosed();
    http_closed_.clear();
    now = MonoTime::Now();
    if (options_.metrics != nullptr) {
      // The iteration's length is how long an event could wait behind the
      // others: the loop's lag.
      options_.metrics->RecordReactorIteration(reactor_index_, now - loop_time_);
    }
  }

  // Shutting down. First run what is queued: responses that workers handed
  // over before the service pools stopped must still go out (CloseAll
  // flushes them). Then close every connection, failing its calls, and run
  // whatever tasks were accepted before the queue closed.
  RunTasks();
  CloseAllConnections(Status::Aborted("messenger " + name_ + " is shutting down"));
  while (true) {
    {
      MutexLock l(task_mu_);
      stopped_ = true;
      if (inbox_.empty()) break;
    }
    RunTasks();
    CloseAllConnections(Status::Aborted("messenger " + name_ + " is shutting down"));
  }
  // Remaining timers belong to finished calls or closed connections.
  timers_.Clear();
  conns_.Clear();
  flush_list_.clear();
  read_interest_list_.clear();
  loop_mu_.Unlock();
  CountDownLatchesAfterTurn();  // the calls the shutdown failed
}

void Reactor::CloseAllConnections(const Status& why) {
  std::vector<std::shared_ptr<HttpConnection>> http;
  for (auto& [ptr, conn] : http_conns_) http.push_back(conn);
  for (auto& c : http) c->Close(why.ToString());
  http_closed_.clear();
  // Flush what is queued (responses, fatal errors) as far as the kernel
  // takes it without blocking, then close.
  std::vector<std::shared_ptr<Connection>> conns = conns_.Snapshot();
  for (auto& c : conns) c->Flush();
  for (auto& c : conns) c->Shutdown(why);
  conns_.Clear();
  flush_list_.clear();
  read_interest_list_.clear();
}

void Reactor::AssignCall(std::shared_ptr<ClientCall> call) {
  AssertCurrentThread();
  if (call->finished()) return;  // cancelled before it got here
  DCHECK(call->reactor_ == nullptr || call->reactor_ == this);
  call->reactor_ = this;
  call->AssertOnReactor();
  if (closing()) {
    call->Finish(Status::Aborted("messenger " + name_ + " is shutting down"));
    return;
  }
  if (call->cancel_requested()) {
    // Cancel() ran before the call had a reactor to abort it on.
    call->Finish(Status::Aborted(call->Describe() + " cancelled"));
    return;
  }
  MonoTime now = loop_time_;
  if (!call->deadline().IsMax()) {
    if (call->deadline() <= now) {
      call->Finish(Status::TimedOut(call->Describe() + " to " +
                                    call->destination().remote.ToString() +
                                    " timed out before it was sent"));
      return;
    }
    call->timeout_ = call->deadline() - now;
    // A raw pointer keeps the std::function free of allocation; the timer is
    // cancelled whenever the call finishes, so it never outlives the call.
    ClientCall* raw = call.get();
    call->timer_id_ = ScheduleTimer(call->deadline(), [raw]() {
      std::shared_ptr<ClientCall> keep = raw->shared_from_this();
      raw->AssertOnReactor();  // a timer runs on the reactor's thread
      raw->timer_id_ = {};
      if (raw->finished()) return;
      std::string where = raw->conn_ ? raw->conn_->remote().ToString() : "the server";
      std::string phase;
      if (raw->conn_ != nullptr) {
        phase = raw->conn_->PhaseOf(raw).Describe();
        raw->conn_->ForgetCall(raw);
      }
      raw->Finish(Status::TimedOut(raw->Describe() + " to " + where + " timed out after " +
                                   raw->timeout_.ToString() + phase));
    });
  }

  const ConnectionKey& key = call->destination();
  Connection* target = conns_.FindClient(key);
  if (target == nullptr) {
    Socket sock;
    Status s = sock.Init(key.remote);
    if (s.ok()) s = sock.SetNonBlocking(true);
    if (s.ok() && !key.remote.is_unix()) s = sock.SetNoDelay(true);
    if (s.ok() && !key.remote.is_unix()) s = sock.SetTcpKeepalive(options_.tcp_keepalive);
    bool in_progress = false;
    if (s.ok()) s = sock.Connect(key.remote, &in_progress);
    if (!s.ok()) {
      FinishOrTryNextAddress(std::move(call), s);
      return;
    }
    auto conn = std::make_shared<Connection>(this, Connection::Role::kClient, std::move(sock),
                                             key.remote, key.user, key.host);
    target = conn.get();
    if (options_.metrics != nullptr) conn->CountIn(options_.metrics->open_outbound);
    conns_.AddClient(key, conn);
    s = conn->Start(in_progress);
    if (!s.ok()) {
      conn->Shutdown(s);
      FinishOrTryNextAddress(std::move(call), Status::NetworkError(s.ToString()));
      return;
    }
  }
  target->QueueCall(std::move(call));
}

void Reactor::FinishOrTryNextAddress(std::shared_ptr<ClientCall> call, const Status& why) {
  if (!call->TakeFallback()) {
    call->Finish(why);
    return;
  }
  VLOG(1) << call->Describe() << ": " << why.ToString() << "; trying "
          << call->destination().remote.ToString();
  call->ReleaseTransportState();  // its timer: AssignCall sets it again
  AssignCall(std::move(call));
}

void Reactor::AdoptServerConnection(std::shared_ptr<Connection> conn) {
  AssertCurrentThread();
  if (closing()) return;  // dropping it closes the socket
  conns_.AddServer(conn);
  Status s = conn->Start(false);
  if (!s.ok()) conn->Shutdown(s);
}

void Reactor::AdoptHttpConnection(std::shared_ptr<HttpConnection> conn) {
  AssertCurrentThread();
  if (closing()) return;  // dropping it closes the socket
  HttpConnection* raw = conn.get();
  http_conns_.emplace(raw, std::move(conn));
  Status s = raw->Start();
  if (!s.ok()) raw->Close(s.ToString());
}

void Reactor::ReleaseHttpConnection(HttpConnection* conn) {
  AssertCurrentThread();
  auto it = http_conns_.find(conn);
  if (it == http_conns_.end()) return;
  http_closed_.push_back(std::move(it->second));
  http_conns_.erase(it);
}

void Reactor::CollectConnections(size_t limit, std::vector<ConnectionInfo>* out,
                                 size_t* total) const {
  AssertCurrentThread();
  conns_.ForEach([&](const Connection& conn) {
    if (conn.is_shut_down()) return;
    ++*total;
    if (out->size() < limit) out->push_back(conn.Info());
  });
}

void Reactor::CollectCalls(size_t limit, std::vector<CallInfo>* out, size_t* total) const {
  AssertCurrentThread();
  MonoTime now = MonoTime::Now();
  conns_.ForEach([&](const Connection& conn) { conn.CollectCalls(now, limit, out, total); });
}

void Reactor::RemoveConnection(Connection* conn) {
  AssertCurrentThread();
  // Kept alive until the end of this loop iteration: it may be on the
  // stack below us.
  conns_.Remove(conn);
}

}  // namespace osprey::transport
