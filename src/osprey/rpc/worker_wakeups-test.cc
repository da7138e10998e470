// WorkerWakeups cell by cell: for workers sleeping, running, polling and
// coming back from polling, whether a just-queued call wakes a sleeper,
// appoints a watchdog, or writes a poller's eventfd. ServiceQueue's own
// tests (service_queue-test.cc) run the same policy with real threads.
#include "osprey/rpc/worker_wakeups.h"

#include <gtest/gtest.h>

#include <vector>

#include "osprey/base/event_fd.h"

namespace osprey {
namespace {

constexpr int64_t kFast = WorkerWakeups::kFastHandlerNanos - 1;
constexpr int64_t kSlow = WorkerWakeups::kFastHandlerNanos;

// The workers before a call is queued.
struct Workers {
  int sleeping;
  int running;
  int pending;    // sleepers already signalled, not yet awake (slow calls queued)
  bool watchdog;  // a watchdog was appointed (one more pending wake-up)
  int coming;     // back from polling, not yet in Take()
  int pollers;    // polling their sockets
};

struct Pool {
  WorkerWakeups w;
  std::vector<EventFd> fds;  // the pollers' eventfds, newest last
};

void Reach(const Workers& s, Pool* out) {
  WorkerWakeups& w = out->w;
  for (int i = 0; i < s.sleeping; ++i) w.Sleeping();
  for (int i = 0; i < s.running; ++i) w.RunStarted();
  for (int i = 0; i < s.pending; ++i) {
    ASSERT_TRUE(w.ShouldWakeWorker(1000, kSlow));
  }
  // A fast call beside a running worker appoints the watchdog.
  if (s.watchdog) {
    ASSERT_TRUE(w.ShouldWakeWorker(1, kFast));
  }
  for (int i = 0; i < s.coming + s.pollers; ++i) {
    out->fds.push_back(EventFd::Create());
    w.AddPoller(out->fds.back().ref());
  }
  // The first `coming` pollers woke (their sockets spoke).
  for (int i = 0; i < s.coming; ++i) w.EndPoll(out->fds[i].ref());
}

struct WakeCell {
  const char* what;
  Workers workers;
  size_t queued;  // calls queued, the new one included
  int64_t run_ns;
  bool wake;      // a sleeper is signalled
  bool appoints;  // and the woken sleeper watches rather than works
  bool poller;    // else the newest poller's eventfd is written
};

const WakeCell kWakeCells[] = {
    {"a sleeper, nothing running", {1, 0, 0, false, 0, 0}, 1, kSlow, true, false, false},
    {"nobody asleep, nobody polling", {0, 1, 0, false, 0, 0}, 1, kSlow, false, false, false},
    {"the sleeper is already signalled", {1, 1, 1, false, 0, 0}, 2, kSlow, false, false, false},
    {"two sleepers, one signalled", {2, 1, 1, false, 0, 0}, 2, kSlow, true, false, false},
    {"left to the worker coming back", {1, 0, 0, false, 1, 0}, 1, kSlow, false, false, false},
    {"more than the coming worker takes", {1, 0, 0, false, 1, 0}, 2, kSlow, true, false, false},
    {"slow beside a running worker", {1, 1, 0, false, 0, 0}, 1, kSlow, true, false, false},
    {"fast beside a running worker: watchdog", {1, 1, 0, false, 0, 0}, 1, kFast, true, true, false},
    {"fast, a watchdog already", {2, 1, 0, true, 0, 0}, 2, kFast, false, false, false},
    {"fast, 4 per runner", {2, 1, 0, true, 0, 0}, 4, kFast, false, false, false},
    // The watchdog appointed before has not woken yet: the first sleeper to
    // wake takes that role, the second works.
    {"fast, past 4 per runner", {2, 1, 0, true, 0, 0}, 5, kFast, true, true, false},
    {"fast, nothing running", {1, 0, 0, false, 0, 0}, 1, kFast, true, false, false},
    {"no sleeper: a poller", {0, 1, 0, false, 0, 1}, 1, kSlow, false, false, true},
    {"no sleeper free: a poller", {1, 1, 1, false, 0, 1}, 2, kSlow, false, false, true},
    {"a sleeper is woken, not the poller", {1, 1, 0, false, 0, 1}, 1, kSlow, true, false, false},
    {"left to the worker coming back, not the poller",
     {0, 1, 0, false, 1, 1},
     1,
     kSlow,
     false,
     false,
     false},
    {"the watchdog suffices, no poller", {2, 1, 0, true, 0, 1}, 2, kFast, false, false, false},
};

TEST(WorkerWakeupsTest, EveryCellWakesWhomTheTableSays) {
  for (const WakeCell& cell : kWakeCells) {
    SCOPED_TRACE(cell.what);
    Pool s;
    Reach(cell.workers, &s);
    const bool wake = s.w.ShouldWakeWorker(cell.queued, cell.run_ns);
    if (!wake) s.w.WakePollerIfNeeded(cell.queued);
    EXPECT_EQ(cell.wake, wake);
    // Only the newest poller is written, and it then counts as coming.
    for (size_t i = 0; i < s.fds.size(); ++i) {
      const bool newest = i + 1 == s.fds.size() && static_cast<int>(i) >= cell.workers.coming;
      EXPECT_EQ(newest && cell.poller, s.fds[i].Drain()) << "poller " << i;
    }
    if (cell.poller) {
      EXPECT_TRUE(s.w.MayPoll(static_cast<size_t>(cell.workers.coming) + 1));
    }
    if (wake) {
      // The signalled sleeper wakes: it watches if it was appointed to.
      bool watchdog = false;
      EXPECT_FALSE(s.w.Woke(&watchdog, true));
      EXPECT_EQ(cell.appoints, watchdog);
    }
  }
}

// The watchdog's life: appointed by a fast call beside a running worker,
// it takes a call still queued after a period, and stands down when no
// worker runs.
TEST(WorkerWakeupsTest, TheWatchdogTakesALeftCallAndStandsDownWhenNothingRuns) {
  WorkerWakeups w;
  w.Sleeping();
  w.RunStarted();
  ASSERT_TRUE(w.ShouldWakeWorker(1, kFast));
  bool watchdog = false;
  EXPECT_FALSE(w.Woke(&watchdog, true));  // appointed: it watches first
  ASSERT_TRUE(watchdog);
  w.Sleeping();
  EXPECT_TRUE(w.Woke(&watchdog, true));  // a period later the call is still there
  w.WatchdogLeft();
  // The next fast call appoints a new one.
  w.Sleeping();
  EXPECT_TRUE(w.ShouldWakeWorker(1, kFast));
  watchdog = false;
  EXPECT_FALSE(w.Woke(&watchdog, false));
  ASSERT_TRUE(watchdog);
  // Nothing queued and nothing running: nothing left to watch.
  w.RunEnded();
  w.Sleeping();
  EXPECT_FALSE(w.Woke(&watchdog, false));
  EXPECT_FALSE(watchdog);
  EXPECT_EQ(0, w.sleeping());
}

TEST(WorkerWakeupsTest, ShutdownWakesEveryPollerAndCountsThemComing) {
  WorkerWakeups w;
  EventFd a = EventFd::Create(), b = EventFd::Create();
  w.AddPoller(a.ref());
  w.AddPoller(b.ref());
  EXPECT_TRUE(w.MayPoll(0));
  EXPECT_FALSE(w.MayPoll(1));
  w.WakeAllPollers();
  EXPECT_TRUE(a.Drain());
  EXPECT_TRUE(b.Drain());
  EXPECT_TRUE(w.MayPoll(2));  // two calls would be theirs
  w.EndPoll(a.ref());         // already off the list: nothing more
  EXPECT_FALSE(w.MayPoll(3));
  w.ArrivedFromPoll();
  w.ArrivedFromPoll();
  w.ArrivedFromPoll();  // never below zero
  EXPECT_TRUE(w.MayPoll(0));
  EXPECT_FALSE(w.MayPoll(1));
}

}  // namespace
}  // namespace osprey
