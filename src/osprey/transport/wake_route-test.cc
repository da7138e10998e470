// WakeRoute, cell by cell: every route a client or a server connection can
// be in, times every event, with the route it leads to and the actions it
// returns; then random walks checked against the invariants.
#include "osprey/transport/wake_route.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace osprey::transport {
namespace {

using Route = WakeRoute::Route;
using Event = WakeRoute::Event;

constexpr Event kEvents[] = {Event::kCallerParks, Event::kWorkerParks,         Event::kUnpark,
                             Event::kCallSent,    Event::kRestoreReadInterest, Event::kClose};

// A route reached the way a connection reaches it.
WakeRoute Reach(bool client, Route route) {
  WakeRoute r(client);
  const Event park = client ? Event::kCallerParks : Event::kWorkerParks;
  switch (route) {
    case Route::kReactor:
      break;
    case Route::kDormant:
      r.Apply(Event::kCallerParks);
      r.Apply(Event::kUnpark, /*calls_awaited=*/false);
      break;
    case Route::kDormantReadInterestRequested:
      r.Apply(Event::kCallerParks);
      r.Apply(Event::kUnpark, /*calls_awaited=*/false);
      r.Apply(Event::kCallSent);
      break;
    case Route::kParkedByCaller:
    case Route::kParkedByWorker:
      r.Apply(park);
      break;
    case Route::kClosedWithWaiter:
      r.Apply(park);
      r.Apply(Event::kClose);
      break;
    case Route::kClosed:
      r.Apply(Event::kClose);
      break;
  }
  EXPECT_EQ(route, r.route()) << WakeRoute::Name(route);
  return r;
}

struct Cell {
  bool client;
  Route from;
  Event event;
  bool calls_awaited;
  bool legal;
  Route to;
  // Actions: s(ync epoll), r(equest read interest), w(ake waiter),
  // c(lose the worker's set).
  const char* actions;
};

constexpr bool C = true, S = false;
constexpr bool kAwaited = true, kNone = false;
constexpr bool kLegal = true, kIllegal = false;

const Cell kCells[] = {
    // Client, from the reactor.
    {C, Route::kReactor, Event::kCallerParks, kAwaited, kLegal, Route::kParkedByCaller, "s"},
    {C, Route::kReactor, Event::kWorkerParks, kAwaited, kIllegal, Route::kReactor, ""},
    {C, Route::kReactor, Event::kUnpark, kAwaited, kIllegal, Route::kReactor, ""},
    {C, Route::kReactor, Event::kCallSent, kAwaited, kLegal, Route::kReactor, ""},
    {C, Route::kReactor, Event::kRestoreReadInterest, kAwaited, kLegal, Route::kReactor, ""},
    {C, Route::kReactor, Event::kClose, kAwaited, kLegal, Route::kClosed, "c"},
    // Client, dormant: parked and dormant have one mask, so no sync.
    {C, Route::kDormant, Event::kCallerParks, kAwaited, kLegal, Route::kParkedByCaller, ""},
    {C, Route::kDormant, Event::kWorkerParks, kAwaited, kIllegal, Route::kDormant, ""},
    {C, Route::kDormant, Event::kUnpark, kAwaited, kIllegal, Route::kDormant, ""},
    {C, Route::kDormant, Event::kCallSent, kAwaited, kLegal, Route::kDormantReadInterestRequested,
     "r"},
    {C, Route::kDormant, Event::kRestoreReadInterest, kAwaited, kLegal, Route::kDormant, ""},
    {C, Route::kDormant, Event::kClose, kAwaited, kLegal, Route::kClosed, "c"},
    // Client, dormant with EPOLLIN asked for.
    {C, Route::kDormantReadInterestRequested, Event::kCallerParks, kAwaited, kLegal,
     Route::kParkedByCaller, ""},
    {C, Route::kDormantReadInterestRequested, Event::kWorkerParks, kAwaited, kIllegal,
     Route::kDormantReadInterestRequested, ""},
    {C, Route::kDormantReadInterestRequested, Event::kUnpark, kAwaited, kIllegal,
     Route::kDormantReadInterestRequested, ""},
    {C, Route::kDormantReadInterestRequested, Event::kCallSent, kAwaited, kLegal,
     Route::kDormantReadInterestRequested, ""},
    {C, Route::kDormantReadInterestRequested, Event::kRestoreReadInterest, kAwaited, kLegal,
     Route::kReactor, "s"},
    {C, Route::kDormantReadInterestRequested, Event::kClose, kAwaited, kLegal, Route::kClosed, "c"},
    // Client, parked by its caller.
    {C, Route::kParkedByCaller, Event::kCallerParks, kAwaited, kIllegal, Route::kParkedByCaller,
     ""},
    {C, Route::kParkedByCaller, Event::kWorkerParks, kAwaited, kIllegal, Route::kParkedByCaller,
     ""},
    {C, Route::kParkedByCaller, Event::kUnpark, kAwaited, kLegal, Route::kReactor, "s"},
    {C, Route::kParkedByCaller, Event::kUnpark, kNone, kLegal, Route::kDormant, ""},
    {C, Route::kParkedByCaller, Event::kCallSent, kAwaited, kLegal, Route::kParkedByCaller, ""},
    {C, Route::kParkedByCaller, Event::kRestoreReadInterest, kAwaited, kLegal,
     Route::kParkedByCaller, ""},
    {C, Route::kParkedByCaller, Event::kClose, kAwaited, kLegal, Route::kClosedWithWaiter, "w"},
    // Client, closed while its caller waited.
    {C, Route::kClosedWithWaiter, Event::kCallerParks, kAwaited, kIllegal, Route::kClosedWithWaiter,
     ""},
    {C, Route::kClosedWithWaiter, Event::kWorkerParks, kAwaited, kIllegal, Route::kClosedWithWaiter,
     ""},
    {C, Route::kClosedWithWaiter, Event::kUnpark, kNone, kLegal, Route::kClosed, "c"},
    {C, Route::kClosedWithWaiter, Event::kCallSent, kAwaited, kLegal, Route::kClosedWithWaiter, ""},
    {C, Route::kClosedWithWaiter, Event::kRestoreReadInterest, kAwaited, kLegal,
     Route::kClosedWithWaiter, ""},
    {C, Route::kClosedWithWaiter, Event::kClose, kAwaited, kLegal, Route::kClosedWithWaiter, ""},
    // Client, closed.
    {C, Route::kClosed, Event::kCallerParks, kAwaited, kIllegal, Route::kClosed, ""},
    {C, Route::kClosed, Event::kWorkerParks, kAwaited, kIllegal, Route::kClosed, ""},
    {C, Route::kClosed, Event::kUnpark, kAwaited, kIllegal, Route::kClosed, ""},
    {C, Route::kClosed, Event::kCallSent, kAwaited, kLegal, Route::kClosed, ""},
    {C, Route::kClosed, Event::kRestoreReadInterest, kAwaited, kLegal, Route::kClosed, ""},
    {C, Route::kClosed, Event::kClose, kAwaited, kLegal, Route::kClosed, ""},
    // Server, from the reactor: a worker's park keeps EPOLLIN, so no sync.
    {S, Route::kReactor, Event::kCallerParks, kAwaited, kIllegal, Route::kReactor, ""},
    {S, Route::kReactor, Event::kWorkerParks, kAwaited, kLegal, Route::kParkedByWorker, ""},
    {S, Route::kReactor, Event::kUnpark, kAwaited, kIllegal, Route::kReactor, ""},
    {S, Route::kReactor, Event::kCallSent, kAwaited, kIllegal, Route::kReactor, ""},
    {S, Route::kReactor, Event::kRestoreReadInterest, kAwaited, kLegal, Route::kReactor, ""},
    {S, Route::kReactor, Event::kClose, kAwaited, kLegal, Route::kClosed, "c"},
    // Server, parked by a worker.
    {S, Route::kParkedByWorker, Event::kCallerParks, kAwaited, kIllegal, Route::kParkedByWorker,
     ""},
    {S, Route::kParkedByWorker, Event::kWorkerParks, kAwaited, kIllegal, Route::kParkedByWorker,
     ""},
    {S, Route::kParkedByWorker, Event::kUnpark, kNone, kLegal, Route::kReactor, ""},
    {S, Route::kParkedByWorker, Event::kCallSent, kAwaited, kIllegal, Route::kParkedByWorker, ""},
    {S, Route::kParkedByWorker, Event::kRestoreReadInterest, kAwaited, kLegal,
     Route::kParkedByWorker, ""},
    {S, Route::kParkedByWorker, Event::kClose, kAwaited, kLegal, Route::kClosedWithWaiter, "w"},
    // Server, closed while its worker waited.
    {S, Route::kClosedWithWaiter, Event::kCallerParks, kAwaited, kIllegal, Route::kClosedWithWaiter,
     ""},
    {S, Route::kClosedWithWaiter, Event::kWorkerParks, kAwaited, kIllegal, Route::kClosedWithWaiter,
     ""},
    {S, Route::kClosedWithWaiter, Event::kUnpark, kAwaited, kLegal, Route::kClosed, "c"},
    {S, Route::kClosedWithWaiter, Event::kCallSent, kAwaited, kIllegal, Route::kClosedWithWaiter,
     ""},
    {S, Route::kClosedWithWaiter, Event::kRestoreReadInterest, kAwaited, kLegal,
     Route::kClosedWithWaiter, ""},
    {S, Route::kClosedWithWaiter, Event::kClose, kAwaited, kLegal, Route::kClosedWithWaiter, ""},
    // Server, closed.
    {S, Route::kClosed, Event::kCallerParks, kAwaited, kIllegal, Route::kClosed, ""},
    {S, Route::kClosed, Event::kWorkerParks, kAwaited, kIllegal, Route::kClosed, ""},
    {S, Route::kClosed, Event::kUnpark, kAwaited, kIllegal, Route::kClosed, ""},
    {S, Route::kClosed, Event::kCallSent, kAwaited, kIllegal, Route::kClosed, ""},
    {S, Route::kClosed, Event::kRestoreReadInterest, kAwaited, kLegal, Route::kClosed, ""},
    {S, Route::kClosed, Event::kClose, kAwaited, kLegal, Route::kClosed, ""},
};

std::string ActionLetters(const WakeRoute::Actions& a) {
  std::string s;
  if (a.sync_epoll) s += 's';
  if (a.request_read_interest) s += 'r';
  if (a.wake_waiter) s += 'w';
  if (a.close_worker_set) s += 'c';
  return s;
}

TEST(WakeRouteTest, EveryCellLeadsWhereTheTableSays) {
  for (const Cell& cell : kCells) {
    WakeRoute r = Reach(cell.client, cell.from);
    WakeRoute::Actions a = r.Apply(cell.event, cell.calls_awaited);
    SCOPED_TRACE(std::string(cell.client ? "client" : "server") + ", " +
                 std::string(WakeRoute::Name(cell.from)) + " + " +
                 std::string(WakeRoute::Name(cell.event)) +
                 (cell.calls_awaited ? " (calls awaited)" : " (none awaited)"));
    EXPECT_EQ(cell.legal, a.legal);
    EXPECT_EQ(WakeRoute::Name(cell.to), WakeRoute::Name(r.route()));
    EXPECT_EQ(cell.actions, ActionLetters(a));
  }
}

// Every reachable (role, route) pair has a row for every event.
TEST(WakeRouteTest, TheTableCoversEveryRouteAndEvent) {
  const std::vector<Route> client_routes = {
      Route::kReactor,        Route::kDormant,          Route::kDormantReadInterestRequested,
      Route::kParkedByCaller, Route::kClosedWithWaiter, Route::kClosed};
  const std::vector<Route> server_routes = {Route::kReactor, Route::kParkedByWorker,
                                            Route::kClosedWithWaiter, Route::kClosed};
  for (bool client : {true, false}) {
    for (Route from : client ? client_routes : server_routes) {
      for (Event e : kEvents) {
        bool found = false;
        for (const Cell& c : kCells) found |= c.client == client && c.from == from && c.event == e;
        EXPECT_TRUE(found) << (client ? "client " : "server ") << WakeRoute::Name(from) << " + "
                           << WakeRoute::Name(e);
      }
    }
  }
}

// Random events, legal or not, on connections of both roles, with the
// invariants checked after each: the route a connection's threads rely on
// can never be left half changed.
TEST(WakeRouteTest, RandomWalksKeepTheInvariants) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 random(seed);
    const bool client = seed % 2 == 0;
    WakeRoute r(client);
    bool waiter = false;             // a thread is parked on the connection
    bool worker_set_open = !client;  // servers make one when they open
    for (int step = 0; step < 500; ++step) {
      const Route before = r.route();
      const Event e = kEvents[random() % std::size(kEvents)];
      const bool awaited = random() % 2 == 0;
      WakeRoute::Actions a = r.Apply(e, awaited);
      SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step) + ": " +
                   std::string(WakeRoute::Name(before)) + " + " + std::string(WakeRoute::Name(e)));
      if (!a.legal) {
        ASSERT_EQ(before, r.route()) << "an illegal event changed the route";
        ASSERT_EQ("", ActionLetters(a));
        continue;
      }
      // The waiter's eventfd is written only while the waiter holds it.
      if (a.wake_waiter) {
        ASSERT_TRUE(waiter);
      }
      if (e == Event::kCallerParks || e == Event::kWorkerParks) waiter = true;
      if (e == Event::kUnpark) waiter = false;
      // A worker set is never closed under its waiter.
      if (a.close_worker_set) {
        ASSERT_FALSE(waiter);
        worker_set_open = false;
      }
      ASSERT_EQ(waiter, r.parked());
      if (r.dormant()) {
        ASSERT_TRUE(client);
      }
      if (r.route() == Route::kParkedByCaller) {
        ASSERT_TRUE(client);
      }
      if (r.route() == Route::kParkedByWorker) {
        ASSERT_FALSE(client);
      }
      if (r.closed() && !r.parked()) {
        ASSERT_FALSE(worker_set_open);
      }
      if (r.route() == Route::kParkedByCaller || r.dormant()) {
        ASSERT_FALSE(r.EpollIn());
      }
      if (WakeRoute::Name(before).find("closed") == 0) {
        ASSERT_TRUE(r.closed()) << "reopened";
      }
      if (r.route() == Route::kClosed) {
        r = WakeRoute(client);  // a new connection
        waiter = false;
        worker_set_open = !client;
      }
    }
  }
}

}  // namespace
}  // namespace osprey::transport
