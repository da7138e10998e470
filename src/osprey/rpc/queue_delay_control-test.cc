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

MonoTime At(int64_t ms) { return MonoTime() + MonoDelta::FromMilliseconds(1000 + ms); }

// A control in `state`, reached at t = 0 ms (watching until 100 ms).
QueueDelayControl In(State state) {
  QueueDelayControl c(kTarget, kInterval);
  if (state != State::kNormal) c.OnTake(At(0), kLong);
  if (state == State::kOverloaded) c.OnTake(At(100), kLong);
  EXPECT_EQ(state, c.state());
  return c;
}

TEST(QueueDelayControlTest, NormalStaysNormalWhileCallsWaitNoLongerThanTheTarget) {
  QueueDelayControl c = In(State::kNormal);
  c.OnTake(At(1), kShort);
  c.OnTake(At(2), kTarget);  // at the target is not over it
  EXPECT_EQ(State::kNormal, c.state());
  c.OnEmpty();
  EXPECT_EQ(State::kNormal, c.state());
}

TEST(QueueDelayControlTest, NormalWatchesAfterOneLongWait) {
  QueueDelayControl c = In(State::kNormal);
  c.OnTake(At(0), kLong);
  EXPECT_EQ(State::kWatching, c.state());
  EXPECT_FALSE(c.overloaded());
}

TEST(QueueDelayControlTest, WatchingEndsAtOneShortWait) {
  QueueDelayControl c = In(State::kWatching);
  c.OnTake(At(50), kLong);
  EXPECT_EQ(State::kWatching, c.state());
  c.OnTake(At(60), kShort);
  EXPECT_EQ(State::kNormal, c.state());
  // A new long wait starts a new whole interval.
  c.OnTake(At(70), kLong);
  c.OnTake(At(100), kLong);
  EXPECT_EQ(State::kWatching, c.state());
  c.OnTake(At(170), kLong);
  EXPECT_TRUE(c.overloaded());
}

TEST(QueueDelayControlTest, WatchingEndsWhenTheQueueEmpties) {
  QueueDelayControl c = In(State::kWatching);
  c.OnEmpty();
  EXPECT_EQ(State::kNormal, c.state());
}

TEST(QueueDelayControlTest, OverloadedAfterAWholeIntervalOfLongWaits) {
  QueueDelayControl c = In(State::kWatching);
  c.OnTake(At(99), kLong);
  EXPECT_FALSE(c.overloaded());
  c.OnTake(At(100), kLong);
  EXPECT_TRUE(c.overloaded());
  EXPECT_EQ(1u, c.episodes());
}

TEST(QueueDelayControlTest, OverloadedIgnoresShortWaitsAndLeavesOnlyWhenEmpty) {
  QueueDelayControl c = In(State::kOverloaded);
  // Newest first: the calls taken waited little; the backlog is still there.
  c.OnTake(At(101), kShort);
  c.OnTake(At(500), kLong);
  EXPECT_TRUE(c.overloaded());
  c.OnEmpty();
  EXPECT_EQ(State::kNormal, c.state());
  // And back: a second episode is counted.
  c.OnTake(At(600), kLong);
  c.OnTake(At(700), kLong);
  EXPECT_TRUE(c.overloaded());
  EXPECT_EQ(2u, c.episodes());
}

}  // namespace
}  // namespace osprey
