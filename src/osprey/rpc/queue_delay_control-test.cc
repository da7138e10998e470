// QueueDelayControl cell by cell: each state with each event, and the
// whole path from normal to overloaded and back.
#include "osprey/rpc/queue_delay_control.h"

#include <gtest/gtest.h>

namespace osprey {
namespace {

using State = QueueDelayControl::State;
constexpr MonoDelta kTarget = MonoDelta::FromMilliseconds(5);
constexpr MonoDelta kInterval = MonoDelta::FromMilliseconds(100);
constexpr MonoDelta kShort = MonoDelta::FromMilliseconds(1);
constexpr MonoDelta kLong = MonoDelta::FromMilliseconds(6);

MonoTime AtMs(int64_t ms) { return MonoTime() + MonoDelta::FromMilliseconds(1000 + ms); }

// `n` newcomers offered to the queue.
void Arrive(QueueDelayControl* c, int n) {
  for (int i = 0; i < n; ++i) c->OnArrival();
}

// A control in `state`, reached at t = 0 ms (watching until 100 ms; to
// overloaded with 2 arrivals for the 1 take that ends the interval).
QueueDelayControl In(State state) {
  QueueDelayControl c(kTarget, kInterval);
  if (state != State::kNormal) c.OnTake(AtMs(0), kLong);
  if (state == State::kOverloaded) {
    Arrive(&c, 2);
    c.OnTake(AtMs(100), kLong);
  }
  EXPECT_EQ(state, c.state());
  return c;
}

TEST(QueueDelayControlTest, NormalStaysNormalWhileCallsWaitNoLongerThanTheTarget) {
  QueueDelayControl c = In(State::kNormal);
  c.OnTake(AtMs(1), kShort);
  c.OnTake(AtMs(2), kTarget);  // at the target is not over it
  EXPECT_EQ(State::kNormal, c.state());
  c.OnEmpty(AtMs(3));
  EXPECT_EQ(State::kNormal, c.state());
  EXPECT_FALSE(c.recently_overloaded());
}

TEST(QueueDelayControlTest, NormalWatchesAfterOneLongWait) {
  QueueDelayControl c = In(State::kNormal);
  c.OnTake(AtMs(0), kLong);
  EXPECT_EQ(State::kWatching, c.state());
  EXPECT_FALSE(c.overloaded());
}

TEST(QueueDelayControlTest, WatchingEndsAtOneShortWait) {
  QueueDelayControl c = In(State::kWatching);
  c.OnTake(AtMs(50), kLong);
  EXPECT_EQ(State::kWatching, c.state());
  c.OnTake(AtMs(60), kShort);
  EXPECT_EQ(State::kNormal, c.state());
  // A new long wait starts a new whole interval.
  c.OnTake(AtMs(70), kLong);
  Arrive(&c, 3);
  c.OnTake(AtMs(100), kLong);
  EXPECT_EQ(State::kWatching, c.state());
  c.OnTake(AtMs(170), kLong);
  EXPECT_TRUE(c.overloaded());
}

TEST(QueueDelayControlTest, WatchingEndsWhenTheQueueEmpties) {
  QueueDelayControl c = In(State::kWatching);
  c.OnEmpty(AtMs(50));
  EXPECT_EQ(State::kNormal, c.state());
  EXPECT_FALSE(c.recently_overloaded());
}

TEST(QueueDelayControlTest, OverloadedAfterAWholeIntervalOfLongWaits) {
  QueueDelayControl c = In(State::kWatching);
  Arrive(&c, 3);
  c.OnTake(AtMs(99), kLong);
  EXPECT_FALSE(c.overloaded());
  c.OnTake(AtMs(100), kLong);  // 3 arrivals for 2 takes: 1.5, over 5/4
  EXPECT_TRUE(c.overloaded());
  EXPECT_EQ(1u, c.episodes());
}

// Issue 48, item 4: a queue that only fluctuates is not overloaded. A whole
// interval of long waits with calls arriving no faster than 5 for 4 taken
// starts a new interval instead; the arrivals are counted afresh in it.
TEST(QueueDelayControlTest, AnIntervalOfLongWaitsWithoutMoreArrivalsThanTakesIsNoOverload) {
  QueueDelayControl c = In(State::kWatching);  // 1 take at 0 ms (before the count)
  for (int ms = 10; ms <= 100; ms += 10) {     // 10 takes, 12 arrivals: 1.2
    Arrive(&c, ms <= 20 ? 2 : 1);
    c.OnTake(AtMs(ms), kLong);
  }
  EXPECT_EQ(State::kWatching, c.state());
  EXPECT_EQ(0u, c.episodes());
  // A new interval, to 200 ms: 5 arrivals for 4 takes is enough.
  Arrive(&c, 5);
  for (int ms = 110; ms <= 190; ms += 30) c.OnTake(AtMs(ms), kLong);
  EXPECT_EQ(State::kWatching, c.state());  // 190 < 200
  c.OnTake(AtMs(200), kLong);              // the 4th take of the interval
  EXPECT_TRUE(c.overloaded());
  EXPECT_EQ(1u, c.episodes());
}

TEST(QueueDelayControlTest, OutpacedWithTwiceAsManyArrivalsAsTakesSinceTheQueueWasEmpty) {
  QueueDelayControl c = In(State::kNormal);
  c.OnTake(AtMs(0), kShort);  // an interval of takes begins, to end at 100 ms
  c.OnEmpty(AtMs(0));
  Arrive(&c, 15);
  EXPECT_FALSE(c.outpaced());  // under kOutpacedMinArrivals (16)
  Arrive(&c, 1);
  EXPECT_TRUE(c.outpaced());  // 16 arrivals, 0 takes: in any state
  for (int i = 0; i < 8; ++i) c.OnTake(AtMs(1 + i), kShort);
  EXPECT_TRUE(c.outpaced());  // 16 for 8: twice
  c.OnTake(AtMs(10), kLong);
  EXPECT_FALSE(c.outpaced());  // 16 for 9
  Arrive(&c, 2);
  EXPECT_TRUE(c.outpaced());    // 18 for 9
  c.OnEmpty(AtMs(11));          // counted afresh since empty,
  EXPECT_TRUE(c.outpaced());    // but the interval of takes under way has 18 for 9
  c.OnTake(AtMs(100), kShort);  // which ends: 18 for 10
  EXPECT_FALSE(c.outpaced());
  Arrive(&c, 15);
  EXPECT_FALSE(c.outpaced());
  EXPECT_EQ(2, QueueDelayControl::kOutpacedRatio);
  EXPECT_EQ(16, QueueDelayControl::kOutpacedMinArrivals);
  EXPECT_EQ(5, QueueDelayControl::kOverloadArrivals);
  EXPECT_EQ(4, QueueDelayControl::kOverloadTakes);
}

// Callers that re-send each refusal at once (a closed loop, no backoff):
// the queue holds one call, and empties at every take. The count since it
// was last empty restarts each time; the interval's does not.
TEST(QueueDelayControlTest, OutpacedOverAWholeIntervalThoughTheQueueEmptiesAtEveryTake) {
  QueueDelayControl c = In(State::kNormal);
  Arrive(&c, 1);  // the first call, taken at once: an interval of takes begins
  c.OnTake(AtMs(0), kShort);
  c.OnEmpty(AtMs(0));
  for (int ms = 5; ms <= 200; ms += 5) {
    Arrive(&c, 40);  // one admitted, the rest refused and sent again
    c.OnTake(AtMs(ms), kShort);
    c.OnEmpty(AtMs(ms));
    Arrive(&c, 1);
    EXPECT_TRUE(c.outpaced()) << ms << " ms";
  }
  EXPECT_FALSE(c.recently_overloaded());  // the waits were short
  // An interval of takes at one arrival for each take ends it.
  for (int ms = 205; ms <= 310; ms += 5) {
    c.OnTake(AtMs(ms), kShort);
    c.OnEmpty(AtMs(ms));
    Arrive(&c, 1);
  }
  EXPECT_FALSE(c.outpaced());
}

TEST(QueueDelayControlTest, OverloadedIgnoresShortWaitsAndLeavesOnlyWhenEmpty) {
  QueueDelayControl c = In(State::kOverloaded);
  // Newest first: the calls taken waited little; the backlog is still there.
  c.OnTake(AtMs(101), kShort);
  c.OnTake(AtMs(500), kLong);
  EXPECT_TRUE(c.overloaded());
  EXPECT_TRUE(c.recently_overloaded());
  c.OnEmpty(AtMs(510));
  EXPECT_EQ(State::kNormal, c.state());
  // Recently overloaded for an interval after it emptied (the admission
  // applies the patience then), and on until an interval of takes past that
  // one brings fewer than 9 calls for 8 taken.
  EXPECT_TRUE(c.recently_overloaded());
  c.OnTake(AtMs(611), kShort);  // the interval of takes that began at 101 ends: 1 for 3
  EXPECT_FALSE(c.recently_overloaded());
  // And back: a second episode is counted.
  c.OnTake(AtMs(600), kLong);
  Arrive(&c, 2);
  c.OnTake(AtMs(700), kLong);
  EXPECT_TRUE(c.overloaded());
  EXPECT_EQ(2u, c.episodes());
}

// At 1.5 times capacity calls never arrive twice as fast as they are
// taken (outpaced()), and the newest-first queue empties now and then: the
// hold keeps the patience while calls keep coming faster than they go.
TEST(QueueDelayControlTest, TheHoldAfterAnOverloadLastsWhileCallsArriveFasterThanTheyAreTaken) {
  QueueDelayControl c = In(State::kOverloaded);  // the interval of takes ends at 100
  c.OnEmpty(AtMs(150));
  EXPECT_TRUE(c.recently_overloaded());
  for (int ms = 160; ms <= 400; ms += 10) {  // 3 arrivals for 2 takes
    Arrive(&c, 3);
    c.OnTake(AtMs(ms), kShort);
    c.OnTake(AtMs(ms + 5), kShort);
  }
  EXPECT_TRUE(c.recently_overloaded());
  for (int ms = 410; ms <= 700; ms += 10) {  // 1 for 1
    Arrive(&c, 1);
    c.OnTake(AtMs(ms), kShort);
  }
  EXPECT_FALSE(c.recently_overloaded());
}

}  // namespace
}  // namespace osprey
