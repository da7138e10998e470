// WakeRoute: who is woken when a connection's socket becomes readable, as
// one explicit state machine. Pure (no socket, no system call): Connection
// holds one and moves it in one function, Connection::MoveRoute (park.cc),
// the only caller of Apply, which applies every action a transition
// returns, whatever the event (the reactor's epoll mask, the reactor's
// read interest, a write to the waiter's eventfd, closing the worker's
// set); the code that fires an event does nothing else with the route.
// Every cell of the table is tested (wake_route-test.cc), and a random
// walk checks the invariants below after each step.
//
// Two words, each with one meaning throughout the transport:
//  - "park": a thread other than the reactor (a blocking caller, a
//    worker) waits on the connection's socket itself (Connection::Park).
//    Calls waiting for negotiation to end are "held" (ClientCallTable).
//  - "read interest": EPOLLIN for the socket in the reactor's epoll set. A
//    dormant connection requests it (Reactor::RequestReadInterest) and the
//    reactor restores it (RestoreReadInterest).
// The route says who is woken when the socket turns readable; whoever
// holds the loop lock reads it (in kParkedByWorker the reactor may still
// be woken first and read the request; see Connection::ParkForWorker).
//
// Routes:
//  - kReactor: the reactor's epoll set reads the socket.
//  - kDormant: a client connection a blocking caller left with no call
//    awaited; the reactor watches only for the peer's close (EPOLLRDHUP),
//    so the next blocking call parks it without an epoll_ctl.
//  - kDormantReadInterestRequested: a call was sent on a dormant
//    connection; the reactor restores its read interest before it sleeps
//    or its borrower leaves (Reactor::RequestReadInterest), unless a
//    caller parks it first.
//  - kParkedByCaller: a client's blocking caller polls the socket itself
//    (Reactor::ParkForCaller); no EPOLLIN in the reactor's set.
//  - kParkedByWorker: a server's worker waits on the connection's own
//    epoll set (Reactor::ParkForWorker); the reactor's set keeps EPOLLIN,
//    behind the worker's in the socket's wait queue.
//  - kClosedWithWaiter: closed while parked: the waiter, woken by its
//    eventfd, still holds it until it unparks.
//  - kClosed: closed, no waiter: the worker's set can go.
//
// Events: which code fires each, on which thread, and when. Each is fired
// through Connection::MoveRoute, under the connection's reactor's loop
// lock (the reactor's thread, or a thread acting in its place: the analysis
// checks it, REQUIRES). MoveRoute DCHECKs the preconditions marked *.
//
//  event               fired by (file: function)    thread, and when
//  ------------------  ---------------------------  ------------------------
//  kCallerParks        park.cc: Connection::Park,   a blocking caller, in the
//                      from Reactor::ParkForCaller  sleeping reactor's place
//                      (park.cc), from              (TryRunHere), after
//                      Messenger::QueueCall         queuing its call and
//                      (messenger.cc)               before writing it (no
//                                                   answer can reach the
//                                                   reactor's EPOLLIN).
//                                                   Client, caller reads on,
//                                                   open*, its call the only
//                                                   one in flight*, a lent
//                                                   eventfd*
//  kWorkerParks        park.cc: Connection::Park,   a worker, in RunHere,
//                      from Connection::            after its handler
//                      ParkForWorker, from          answered the
//                      Reactor::ParkForWorker       connection's last call
//                      (park.cc), from ServicePool  with its queue empty.
//                      ::WaitForNextRequest         Server, a worker set,
//                      (service_pool.cc)            open*, nothing unsent*,
//                                                   no call in flight*, the
//                                                   connection's eventfd*
//  kUnpark             park.cc: Connection::Unpark, the waiter, in RunHere,
//                      from Reactor::               done waiting (its call
//                      ReadParkedAndUnpark          ended, it read a request,
//                      (WaitAsReader,               its queue woke it, or
//                      WaitForRequest, Unpark)      the connection closed).
//                                                   Parked (Unpark does
//                                                   nothing otherwise)
//  kCallSent           connection_client.cc:        the reactor or its
//                      Connection::SendCall         borrower, each call
//                                                   queued. Client
//  kRestoreReadInterest  park.cc: Connection::      the reactor or its
//                      RestoreReadInterest, from    borrower, at the end of
//                      Reactor::RestoreReadInterest its turn (EndTurn), for
//                      (park.cc), from              each connection whose
//                      Reactor::EndTurn             kCallSent asked for it;
//                      (reactor.cc)                 it may have parked or
//                                                   closed since (not freed)
//  kClose              connection.cc:               the reactor or its
//                      Connection::Shutdown         borrower, once per
//                                                   connection; closed*, its
//                                                   socket out of the
//                                                   reactor's set*
//
// Actions, each carried out by MoveRoute alone: sync_epoll by
// SyncEpollEvents (failing, it undoes a park, which has no waiter yet, and
// shuts the connection down; never from Shutdown, as a closed route syncs
// nothing), request_read_interest by Reactor::RequestReadInterest,
// wake_waiter by writing the waiter's EventFdRef (which MoveRoute holds
// exactly while the route is parked*), close_worker_set by
// Connection::CloseWorkerSet (never while parked*).
//
// Invariants, which wake_route-test.cc checks after every step of random
// walks: a dormant route is a client's; a caller parks only a client and a
// worker only a server; the waiter's eventfd is written only by the event
// that closes a parked connection (while the waiter still holds it); once
// closed with no waiter, the worker's set has been closed; and the
// reactor's set never reads a socket a caller polls.
//
// Not thread-safe: its Connection's reactor loop lock guards it.
#pragma once

#include <glog/logging.h>

#include <cstdint>
#include <string_view>

namespace osprey::transport {

class WakeRoute {
 public:
  enum class Route {
    kReactor,
    kDormant,
    kDormantReadInterestRequested,
    kParkedByCaller,
    kParkedByWorker,
    kClosedWithWaiter,
    kClosed,
  };
  enum class Event {
    kCallerParks,          // client: a blocking caller will read the answer
    kWorkerParks,          // server: a worker will wait for the next request
    kUnpark,               // the waiter is done (Unpark)
    kCallSent,             // client: a call went out
    kRestoreReadInterest,  // the reactor's end of iteration (RestoreReadInterest)
    kClose,                // the connection closed (Shutdown)
  };
  // What the connection must do after a transition.
  struct Actions {
    bool legal = true;                   // false: the event is not allowed here; nothing changed
    bool sync_epoll = false;             // give the reactor's set EpollIn()'s mask
    bool request_read_interest = false;  // Reactor::RequestReadInterest
    bool wake_waiter = false;            // write the parked waiter's eventfd
    bool close_worker_set = false;       // close the connection's own epoll set
  };

  explicit WakeRoute(bool client) : client_(client) {}

  Route route() const { return route_; }
  bool client() const { return client_; }
  bool parked() const {
    return route_ == Route::kParkedByCaller || route_ == Route::kParkedByWorker ||
           route_ == Route::kClosedWithWaiter;
  }
  bool dormant() const {
    return route_ == Route::kDormant || route_ == Route::kDormantReadInterestRequested;
  }
  bool closed() const { return route_ == Route::kClosed || route_ == Route::kClosedWithWaiter; }
  // Whether the reactor's set should have EPOLLIN for the socket now.
  bool EpollIn() const { return route_ == Route::kReactor || route_ == Route::kParkedByWorker; }

  // The one way the route changes. `calls_awaited`: for kUnpark, whether
  // the connection still awaits calls (a client left with none goes
  // dormant; a server always goes back to the reactor). An event the table
  // has no cell for changes nothing and returns legal = false (Connection
  // DCHECKs it: such an event is a bug in its caller).
  Actions Apply(Event event, bool calls_awaited = true);

  static std::string_view Name(Route route);
  static std::string_view Name(Event event);

 private:
  // Leaves route_ for `to`, checking (in assertion builds) the route left:
  // only a parked route is left for kClosedWithWaiter, and only that one
  // for kClosed while the worker's set may be open.
  void Enter(Route to);

  bool client_;  // not const: a test reuses a WakeRoute
  Route route_ = Route::kReactor;
};

// Inline, into its one caller (Connection::MoveRoute): the route is moved
// on every call sent.
inline WakeRoute::Actions WakeRoute::Apply(Event event, bool calls_awaited) {
  Actions a;
  const Route from = route_;
  Route to = from;
  auto illegal = [&] {
    a.legal = false;
    return a;
  };
  switch (event) {
    case Event::kCallerParks:
      if (!client_ || (from != Route::kReactor && !dormant())) return illegal();
      to = Route::kParkedByCaller;
      break;
    case Event::kWorkerParks:
      if (client_ || from != Route::kReactor) return illegal();
      to = Route::kParkedByWorker;
      break;
    case Event::kUnpark:
      if (from == Route::kClosedWithWaiter) {
        to = Route::kClosed;
        a.close_worker_set = true;  // its waiter, the last user, is done with it
      } else if (from == Route::kParkedByCaller) {
        // Nothing awaited: nothing will come but a close, which RDHUP reports.
        to = calls_awaited ? Route::kReactor : Route::kDormant;
      } else if (from == Route::kParkedByWorker) {
        to = Route::kReactor;
      } else {
        return illegal();
      }
      break;
    case Event::kCallSent:
      if (!client_) return illegal();
      if (from == Route::kDormant) {  // closed or parked: nothing to ask for
        to = Route::kDormantReadInterestRequested;
        a.request_read_interest = true;
      }
      break;
    case Event::kRestoreReadInterest:
      // Entries of the reactor's list may be stale (the connection parked,
      // or closed, since): only a pending request does anything.
      if (from == Route::kDormantReadInterestRequested) to = Route::kReactor;
      break;
    case Event::kClose:
      if (closed()) break;  // Shutdown is idempotent
      if (parked()) {
        // Closing a socket does not wake its poller: the eventfd does, and
        // stays the waiter's until it unparks.
        to = Route::kClosedWithWaiter;
        a.wake_waiter = true;
      } else {
        to = Route::kClosed;
        a.close_worker_set = true;
      }
      break;
  }
  // The reactor's set changes only where EPOLLIN does (closed: the socket
  // is gone from it).
  const bool in_before = EpollIn();
  Enter(to);
  a.sync_epoll = !closed() && EpollIn() != in_before;
  return a;
}

inline void WakeRoute::Enter(Route to) {
  DCHECK(to != Route::kClosedWithWaiter || route_ == Route::kClosedWithWaiter ||
         route_ == Route::kParkedByCaller || route_ == Route::kParkedByWorker)
      << "closed with a waiter, from " << Name(route_);
  DCHECK(to != Route::kClosed || route_ != Route::kParkedByCaller)
      << "closed without waking the parked caller";
  DCHECK(to != Route::kClosed || route_ != Route::kParkedByWorker)
      << "closed without waking the parked worker";
  DCHECK(!(to == Route::kDormant || to == Route::kDormantReadInterestRequested) || client_)
      << "a server connection never goes dormant";
  route_ = to;
}

}  // namespace osprey::transport
