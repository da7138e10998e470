#include "osprey/transport/wake_route.h"

#include <glog/logging.h>

namespace osprey::transport {

namespace {
using Route = WakeRoute::Route;
using Event = WakeRoute::Event;
}  // namespace

WakeRoute::Actions WakeRoute::Apply(Event event, bool calls_awaited) {
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
        to = Route::kDormantReadRequested;
        a.request_read_interest = true;
      }
      break;
    case Event::kReadInterestDue:
      // Entries of the reactor's list may be stale (the connection parked,
      // or closed, since): only a pending request does anything.
      if (from == Route::kDormantReadRequested) to = Route::kReactor;
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

void WakeRoute::Enter(Route to) {
  DCHECK(to != Route::kClosedWithWaiter || route_ == Route::kClosedWithWaiter ||
         route_ == Route::kParkedByCaller || route_ == Route::kParkedByWorker)
      << "closed with a waiter, from " << Name(route_);
  DCHECK(to != Route::kClosed || route_ != Route::kParkedByCaller)
      << "closed without waking the parked caller";
  DCHECK(to != Route::kClosed || route_ != Route::kParkedByWorker)
      << "closed without waking the parked worker";
  DCHECK(!(to == Route::kDormant || to == Route::kDormantReadRequested) || client_)
      << "a server connection never goes dormant";
  route_ = to;
}

std::string_view WakeRoute::Name(Route route) {
  switch (route) {
    case Route::kReactor:
      return "reactor";
    case Route::kDormant:
      return "dormant";
    case Route::kDormantReadRequested:
      return "dormant, read asked for";
    case Route::kParkedByCaller:
      return "parked by caller";
    case Route::kParkedByWorker:
      return "parked by worker";
    case Route::kClosedWithWaiter:
      return "closed with waiter";
    case Route::kClosed:
      return "closed";
  }
  return "?";
}

std::string_view WakeRoute::Name(Event event) {
  switch (event) {
    case Event::kCallerParks:
      return "caller parks";
    case Event::kWorkerParks:
      return "worker parks";
    case Event::kUnpark:
      return "unpark";
    case Event::kCallSent:
      return "call sent";
    case Event::kReadInterestDue:
      return "read interest due";
    case Event::kClose:
      return "close";
  }
  return "?";
}

}  // namespace osprey::transport
