// Reactor: one thread running one epoll set. It owns the connections
// assigned to it and does their socket I/O, unless another thread does it
// in its place holding its loop lock (TryRunHere, a parked connection's
// caller or worker), runs tasks that other threads Schedule() onto it (the
// whole queue drained once per loop), and fires timers (call deadlines,
// negotiation and idle timeouts). Its methods are in reactor.cc but for
// its part in the park (lending eventfds to blocking callers, parking a
// connection for a caller or a worker, their wait, unparking, the read
// interest of dormant connections), which is in park.cc beside the wake
// route it carries out.
//
// Any thread may call Schedule(), ScheduleCall(), ScheduleResponse(),
// AbortCall(), AbortCallIfAlive(), TryRunHere(), Shutdown(), closing(),
// IsCurrentThread(), OnAnyReactorThread() and LoopTimeOrNow(); a thread
// that is not a reactor's and holds no loop lock calls RunHere(),
// ParkForWorker(), WaitForRequest(), WaitAsReader() and Unpark(), which
// take the loop lock themselves where they need it. Every other method
// runs only on the reactor's thread, or on a thread acting in its place
// (TryRunHere, RunHere: it holds the loop lock meanwhile), and says so to
// the analysis: OSPREY_REQUIRES(loop_mu_), or AssertCurrentThread(), which also
// checks it in assertion builds.
#pragma once

#include <glog/logging.h>
#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "osprey/base/adaptive_spin.h"
#include "osprey/base/connection_types.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/cpu_load.h"
#include "osprey/base/event_fd.h"
#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/base/task.h"
#include "osprey/transport/connection_options.h"
#include "osprey/transport/connection_table.h"
#include "osprey/transport/timer_id.h"
#include "osprey/transport/timer_queue.h"
#include "osprey/transport/transport_metrics.h"
#include "osprey/wire/frame_encoder.h"

namespace osprey::transport {

class ClientCall;
struct CallInfo;
class Connection;
class HttpConnection;
class HttpHandler;
class InboundCallHandler;

// Something with a file descriptor in the reactor's epoll set.
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void HandleEvents(uint32_t epoll_events) = 0;
};

class Reactor;

// An eventfd a reactor lends one blocking caller that reads its own answer
// (Reactor::ParkForCaller). Whoever finishes the caller's call on another
// thread writes it (Wake) to end the caller's poll; that may happen after
// the caller stopped polling (its connection was cut and the call is being
// retried), so the lease is held until the caller has seen its call end,
// and only then goes back: the number is never written once the reactor
// may have closed it and a socket taken it. Move-only; any thread; goes
// back when destroyed, which must be while the reactor exists (in a
// ParkedConnection, whose connection keeps it).
class WakeFdLease {
 public:
  WakeFdLease() = default;
  WakeFdLease(Reactor* reactor, EventFd fd) : reactor_(reactor), fd_(std::move(fd)) {}
  WakeFdLease(WakeFdLease&& other) noexcept { *this = std::move(other); }
  WakeFdLease& operator=(WakeFdLease&& other) noexcept;
  WakeFdLease(const WakeFdLease&) = delete;
  WakeFdLease& operator=(const WakeFdLease&) = delete;
  ~WakeFdLease() { GiveBack(); }

  // For the holder's poll and for the connection it parked, which writes
  // it when it closes (Connection::Park): both end before the lease goes
  // back (ParkedConnection).
  EventFdRef ref() const { return fd_.ref(); }
  explicit operator bool() const { return static_cast<bool>(fd_); }
  // Wakes the holder's poll. Only while held: a holder that may be woken
  // by another thread keeps the lease until that thread is done with it.
  void Wake() const;
  // Back to the reactor (Reactor::GiveBackWakeFd); idempotent.
  void GiveBack();

 private:
  Reactor* reactor_ = nullptr;
  EventFd fd_;
};

// A connection a blocking caller or a worker reads itself
// (Connection::Park, Reactor::ParkForCaller, Reactor::ParkForWorker).
// Move-only (a caller's holds its eventfd's lease).
struct ParkedConnection {
  std::shared_ptr<Connection> conn;
  // What the waiter sleeps on: a caller polls the socket; a worker waits
  // in epoll_wait on the connection's own epoll set of the socket and
  // `wake_fd` (`worker_set`; Connection::ParkForWorker says why).
  int fd = -1;
  // The eventfd that wakes the waiter: a client caller's is `lease`'s; a
  // worker's is the connection's (Connection::worker_wake_fd(): its
  // service queue writes it while the worker is registered there as
  // polling, Shutdown while parked; the connection closes it only once
  // unparked, which the worker does after it left the queue's list).
  EventFdRef wake_fd;
  bool worker_set = false;
  // A caller's: held past the unpark, until its call has ended
  // (WakeFdLease). Declared after `conn`, so it goes back first.
  WakeFdLease lease;
  explicit operator bool() const { return conn != nullptr; }
};

// Owned by its Messenger through a shared_ptr, and shared by every
// Connection it made: a server call answered after its Messenger was
// destroyed finds the reactor stopped (Schedule refuses), not freed.
class Reactor : public std::enable_shared_from_this<Reactor> {
 public:
  // `index`: its number among its messenger's reactors (a metrics label).
  Reactor(std::string name, const ConnectionOptions& options, InboundCallHandler* handler,
          int index = 0);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // Creates the epoll set and starts the thread.
  Status Start();
  // Closes every connection (their pending calls fail), runs what is left in
  // the task queue, and joins the thread. Idempotent; any thread but this
  // reactor's.
  void Shutdown();

  // Any thread. Runs `task` on the reactor thread. Returns false, without
  // running it, if the reactor has shut down: the caller still owns the
  // consequences (fail the call, drop the response).
  bool Schedule(Task task);
  // Typed forms of Schedule for the two hand-offs of every call, which
  // allocate nothing per call: a client call to send (AssignCall on the
  // reactor) and a server response to queue on its connection.
  // ScheduleCall takes `call` only when it returns true.
  bool ScheduleCall(std::shared_ptr<ClientCall>&& call);
  bool ScheduleResponse(std::shared_ptr<Connection> conn, int32_t call_id,
                        std::unique_ptr<wire::OutboundFrame> frame);

  // Any thread: completes `call` with `why` on the reactor (for Cancel) unless
  // it finished first. The caller has set the call's cancel flag, which
  // covers a call this reactor has not received yet.
  void AbortCall(std::shared_ptr<ClientCall> call, const Status& why);
  // AbortCall on `reactor` if it still exists. A call handle (an
  // RpcController's) can outlive its Messenger and so its reactors; a
  // Cancel() racing with the last Messenger reference going must not touch
  // a freed reactor. Every reactor is listed from its construction to the
  // start of its destruction; a reactor made later at the same address
  // would find the call finished (a messenger fails its calls as it goes)
  // and do nothing.
  static void AbortCallIfAlive(Reactor* reactor, std::shared_ptr<ClientCall> call,
                               const Status& why);

  // True on any reactor thread of any Messenger, and on any thread acting
  // in a reactor's place (TryRunHere, RunHere: it holds that reactor's
  // loop lock, and may run a reactor-run service's handler it read):
  // waiting for a reactor there deadlocks, so blocking calls, Listen and
  // the like refuse to.
  static bool OnAnyReactorThread();
  // On a reactor thread, its loop_time(); elsewhere MonoTime::Now(). For
  // stamps where a loop iteration's staleness does not matter, so that
  // calls made from callbacks read no clock.
  static MonoTime LoopTimeOrNow();

  // On this reactor's own thread (not a borrower's) with caller reads on:
  // keeps `latch` to count down once the loop has published that it
  // sleeps, just before its next wait, and returns true; elsewhere returns
  // false and the caller counts down itself. For the latch a blocking
  // caller sleeps on (CallerWait): woken at once, it would often send its
  // next call while the loop still finishes this turn, find it awake, and
  // queue that call to it too, so that back-to-back calls stayed in the
  // reactor's hands, one wake-up more each, instead of the caller reading
  // its own answers (caller-reads-test, ACallQueuedToAnAwakeReactor...).
  static bool CountDownAfterTurn(CountDownLatch* latch);

  // Any thread but this reactor's. If the reactor is asleep in epoll_wait,
  // runs `fn` on the calling thread in the reactor's place (the reactor
  // waits for it if it wakes meanwhile), writes what `fn` queued, and
  // returns true. Otherwise returns false without running `fn`. A hand-off
  // to a sleeping reactor costs a wake-up; this costs none. `fn` must not
  // block.
  template <class F>
  bool TryRunHere(F&& fn) {
    if (!BeginBorrow()) return false;
    fn();
    EndBorrow();
    return true;
  }

  // Any thread but a reactor's, and not inside TryRunHere(): waits for the
  // loop lock (the reactor holds it only while awake, never while it
  // sleeps), then runs `fn` in the reactor's place as TryRunHere() does.
  // `fn` must not block.
  template <class F>
  void RunHere(F&& fn) {
    BeginBorrowWaiting();
    fn();
    EndBorrow();
  }

  // Inside TryRunHere(), right after AssignCall(call) by the caller that
  // will block on `call`: writes what is queued and, if `call` is then the
  // only call its connection awaits, parks the connection for the caller.
  ParkedConnection ParkForCaller(ClientCall* call);
  // The caller of a call whose connection ParkForCaller() parked, holding
  // no lock: until `done` is true, sleeps in poll on the socket and on
  // `parked.wake_fd` and reads the socket in the reactor's place when it is
  // readable, so the answer wakes this thread alone. Unparks before it
  // returns; the eventfd's lease stays with `parked` (WakeFdLease).
  void WaitAsReader(const ParkedConnection& parked, const std::atomic<bool>& done);

  // A worker that answered the last call in flight of `conn`
  // (Connection::NoteAnsweredConnections), after its handler returned: parks
  // the connection for the worker if it is still so.
  ParkedConnection ParkForWorker(const std::shared_ptr<Connection>& conn);
  // That worker, holding no lock: sleeps until the socket is readable or
  // `parked.wake_fd` is written (its service queue writes it when another call
  // needs it), calls `woke()`, then reads the socket in the reactor's
  // place if it is readable (the request goes to the service queue, where
  // the worker takes it next), and unparks.
  template <class F>
  void WaitForRequest(const ParkedConnection& parked, F&& woke) {
    bool readable = PollParked(parked) == ParkedPoll::kReadable;
    woke();
    RunHere([&] {
      AssertCurrentThread();
      ReadParkedAndUnpark(parked, readable);
    });
  }
  // Unparks without waiting (the worker found its queue busy).
  void Unpark(const ParkedConnection& parked);

  // A thread inside TryRunHere() for this reactor (not the reactor's own).
  bool OnBorrowingThread() const { return BorrowedHere(); }
  // The reactor's thread, or a thread inside TryRunHere() for it.
  bool IsCurrentThread() const {
    return std::this_thread::get_id() == thread_id_.load() || BorrowedHere();
  }
  // Checks (in assertion builds) that this is the reactor's thread or its
  // borrower, and tells the analysis what that means: such a thread holds
  // the loop lock, which guards every reactor-thread-only field.
  // Inline, so that in release builds it costs nothing.
  void AssertCurrentThread() const OSPREY_ASSERT_CAPABILITY(loop_mu_) {
    DCHECK(IsCurrentThread()) << "reactor " << name_ << " method called from another thread";
  }
  const std::string& name() const { return name_; }
  const ConnectionOptions& options() const { return options_; }
  InboundCallHandler* inbound_handler() const { return handler_; }
  // True once Shutdown began; new calls are refused from then on.
  bool closing() const { return closing_.load(std::memory_order_acquire); }

  // --- reactor thread only ---
  // Frames its connections decoded, by this thread or a borrower: a
  // reactor spins before sleeping only after an iteration that read at
  // most one (a call at a time). Where each wake-up brings many, a spin
  // saves little per call and takes a CPU from the threads that produce
  // them.
  void NoteFramesRead(size_t n) {
    AssertCurrentThread();
    frames_read_ += n;
  }
  // When this loop iteration began: a clock read once per loop instead of
  // several times per call, for activity stamps and per-call bookkeeping
  // where a loop iteration's staleness does not matter.
  MonoTime loop_time() const {
    AssertCurrentThread();
    return loop_time_;
  }

  Status AddFd(int fd, uint32_t events, EventHandler* handler);
  Status ModifyFd(int fd, uint32_t events, EventHandler* handler);
  // Removes and adds `fd` again: how a registration with EPOLLEXCLUSIVE,
  // which epoll_ctl cannot modify, changes, and how it goes behind another
  // epoll set's in the socket's wait queue.
  Status ReplaceFd(int fd, uint32_t events, EventHandler* handler);
  void RemoveFd(int fd);

  TimerId ScheduleTimer(MonoTime when, std::function<void()> fn);
  void CancelTimer(TimerId id);

  // Sends a client call over the connection for its destination, connecting first if
  // there is none. The call fails (exactly once) if that is impossible.
  void AssignCall(std::shared_ptr<ClientCall> call);
  // Takes a freshly accepted server-side socket.
  void AdoptServerConnection(std::shared_ptr<Connection> conn);
  // Takes a server connection that turned out to speak HTTP, and forgets
  // it once it closed (kept alive until this loop iteration ends).
  void AdoptHttpConnection(std::shared_ptr<HttpConnection> conn);
  void ReleaseHttpConnection(HttpConnection* conn);
  // Where HTTP requests on the RPC port go; null: they are refused.
  HttpHandler* http_handler() const { return options_.http_handler; }
  // A connection asks to be written at the end of this loop iteration.
  void RequestFlush(Connection* conn);
  // A dormant connection (Connection::RestoreReadInterest) was sent a
  // call: its read interest is restored before this reactor sleeps or its
  // borrower leaves, unless a caller parks it first.
  void RequestReadInterest(Connection* conn);
  // The connection closed: forget it.
  void RemoveConnection(Connection* conn);
  // Appends a snapshot of its open connections, until `out` holds `limit`;
  // *total counts them all.
  void CollectConnections(size_t limit, std::vector<ConnectionInfo>* out, size_t* total) const;
  // Appends the calls in flight on its connections, until `out` holds
  // `limit`; *total counts them all.
  void CollectCalls(size_t limit, std::vector<CallInfo>* out, size_t* total) const;

 private:
  // A connection's state is guarded by its reactor's loop lock too.
  friend class Connection;
  friend class HttpConnection;
  friend class ClientCall;

  void Loop();
  void RunTasks() OSPREY_REQUIRES(loop_mu_);
  void RunTimers() OSPREY_REQUIRES(loop_mu_);
  void CheckIdleConnections() OSPREY_REQUIRES(loop_mu_);
  // epoll_wait's timeout for a wait of `d`: whole milliseconds rounded up
  // (so the timer has expired on return), 0 if due, at most 1000.
  static int WaitMillis(MonoDelta d);
  // A call no connection could be made for: to its next fallback address
  // (ClientCall::set_fallbacks), or finished with `why`.
  void FinishOrTryNextAddress(std::shared_ptr<ClientCall> call, const Status& why)
      OSPREY_REQUIRES(loop_mu_);
  void Wake();
  bool BeginBorrow() OSPREY_TRY_ACQUIRE(true, loop_mu_);
  void BeginBorrowWaiting() OSPREY_ACQUIRE(loop_mu_);
  void EndBorrow() OSPREY_RELEASE(loop_mu_);
  bool BorrowedHere() const;
  void FlushRequested() OSPREY_REQUIRES(loop_mu_);
  // Restores the read interest of the connections that requested it
  // (RequestReadInterest) and are still dormant.
  void RestoreReadInterest() OSPREY_REQUIRES(loop_mu_);
  // Runs `add` on the inbox under the lock; wakes the reactor if needed.
  template <class F>
  bool Post(F&& add);
  void CloseAllConnections(const Status& why) OSPREY_REQUIRES(loop_mu_);
  enum class ParkedPoll { kReadable, kWoken, kFailed };
  // One wait in poll on a parked connection's socket and its eventfd
  // (drained if written). kWoken: the eventfd or a signal woke it.
  // Any thread, holding no lock: options_ does not change once the reactor runs.
  ParkedPoll PollParked(const ParkedConnection& parked);
  // spin.Spin() with options_.spin_before_sleep, counted in the metrics:
  // true if `poll` found what the thread was about to sleep for. The
  // machine-wide checks come first, before the thread's own back-off
  // counts the wait: checked after it, b sync was 0.92x (12 ABBA runs).
  // A template (defined below, for the reactor's loop and the parked
  // waiters of park.cc): no std::function made per wait (AdaptiveSpin
  // still calls its clock, a std::function, once per spin iteration).
  template <class Poll>
  bool SpinBeforeSleep(AdaptiveSpin& spin, Poll&& poll) const;
  // The one spin-then-wait of the reactor, a caller and a worker:
  // `wait(ms)` is their epoll_wait or poll. Spins with wait(0) first
  // unless `may_spin` is false, then sleeps with wait(timeout_ms) unless
  // the spin found what it waited for.
  template <class Wait>
  void SpinThenWait(AdaptiveSpin& spin, int timeout_ms, Wait&& wait, bool may_spin = true) const {
    if (!may_spin || !SpinBeforeSleep(spin, [&] { return wait(0) != 0; })) wait(timeout_ms);
  }
  // The end of every turn at the loop, the reactor's or a borrower's:
  // writes what was queued, and gives dormant connections that were sent
  // a call their EPOLLIN back.
  void EndTurn() OSPREY_REQUIRES(loop_mu_);
  void ReadParkedAndUnpark(const ParkedConnection& parked, bool readable) OSPREY_REQUIRES(loop_mu_);

  const std::string name_;
  const ConnectionOptions options_;
  InboundCallHandler* const handler_;
  const int reactor_index_;

  int epoll_fd_ = -1;
  // The latches CountDownAfterTurn keeps. This reactor's own thread only
  // (CountDownAfterTurn checks it), which counts them down outside the
  // loop lock, so no lock guards them.
  std::vector<CountDownLatch*> after_turn_;
  void CountDownLatchesAfterTurn();

  // Any thread writes it (Wake); the reactor drains it after epoll_wait.
  EventFd wake_fd_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<bool> closing_{false};

  // What other threads hand to the reactor. Swapped whole with `draining_`
  // each loop, so both keep their capacity and a push rarely allocates.
  struct Inbox {
    struct Response {
      std::shared_ptr<Connection> conn;
      int32_t call_id;
      std::unique_ptr<wire::OutboundFrame> frame;
    };
    std::vector<std::shared_ptr<ClientCall>> calls;
    std::vector<Response> responses;
    std::vector<Task> tasks;
    bool empty() const { return calls.empty() && responses.empty() && tasks.empty(); }
    void clear() {
      calls.clear();
      responses.clear();
      tasks.clear();
    }
  };
  Mutex task_mu_;
  Inbox inbox_ OSPREY_GUARDED_BY(task_mu_);
  Inbox draining_ OSPREY_GUARDED_BY(loop_mu_);
  bool shutdown_requested_ OSPREY_GUARDED_BY(task_mu_) = false;
  bool stopped_ OSPREY_GUARDED_BY(task_mu_) = false;
  // True from just before the reactor's last look at the task queue until
  // epoll_wait returns: a Schedule() in that window must write the eventfd.
  std::atomic<bool> sleeping_{true};
  // Held by whichever thread acts as the reactor: the reactor thread except
  // while it waits in epoll_wait, or a thread in TryRunHere().
  Mutex loop_mu_;
  // When the sleeping reactor will wake by itself: a borrower that adds an
  // earlier timer must wake it.
  MonoTime planned_wake_ OSPREY_GUARDED_BY(loop_mu_);
  Mutex shutdown_mu_;  // serializes Shutdown() callers

  // Reactor thread only: guarded by the loop lock, which that thread (or
  // its borrower) holds whenever it touches them.
  TimerQueue timers_ OSPREY_GUARDED_BY(loop_mu_);
  ConnectionTable conns_ OSPREY_GUARDED_BY(loop_mu_);
  std::vector<Connection*> flush_list_ OSPREY_GUARDED_BY(loop_mu_);
  std::vector<Connection*> read_interest_list_ OSPREY_GUARDED_BY(loop_mu_);
  std::unordered_map<HttpConnection*, std::shared_ptr<HttpConnection>> http_conns_
      OSPREY_GUARDED_BY(loop_mu_);
  std::vector<std::shared_ptr<HttpConnection>> http_closed_ OSPREY_GUARDED_BY(loop_mu_);
  MonoTime next_idle_check_ OSPREY_GUARDED_BY(loop_mu_);
  MonoTime loop_time_ OSPREY_GUARDED_BY(loop_mu_) = MonoTime::Now();
  size_t frames_read_ OSPREY_GUARDED_BY(loop_mu_) = 0;  // see NoteFramesRead
  // The eventfd to lend the next parked caller (WakeFdLease), or -1: one,
  // made at Start, which is what a reactor needs while one caller at a
  // time waits on it; more callers at once get one made for them, closed
  // when they give it back. So an idle reactor holds exactly one. One
  // word, taken and given back by these two alone, from any thread (a
  // lease goes back after its caller's call ended, without the loop lock).
  // Holds an EventFd's released number (EventFd::Release, Adopt).
  std::atomic<int> spare_wake_fd_{-1};
  // Empty if the process is out of descriptors.
  EventFd TakeWakeFd();
  void GiveBackWakeFd(EventFd fd);
  friend class WakeFdLease;
};

template <class Poll>
inline bool Reactor::SpinBeforeSleep(AdaptiveSpin& spin, Poll&& poll) const {
  if (options_.spin_before_sleep <= MonoDelta() || !CpuLoad::RoomToSpin()) return false;
  CpuLoad::SpinSlot slot;
  if (!slot.taken()) return false;
  AdaptiveSpin::Result r = spin.Spin(options_.spin_before_sleep, poll);
  if (r == AdaptiveSpin::Result::kSkipped) return false;
  if (TransportMetrics* m = options_.metrics.get()) {
    (r == AdaptiveSpin::Result::kFound ? m->spins_found : m->spins_missed)->Increment();
  }
  return r == AdaptiveSpin::Result::kFound;
}

}  // namespace osprey::transport
