// EtcdWatchLiveness cell by cell: what a watch stream does at each instant,
// given what its member said and when. The whole watcher against a member
// that hangs is in tests/registry-test.cc and tests/hostile-etcd-test.cc.
#include "osprey/rpc/etcd_watch_liveness.h"

#include <gtest/gtest.h>

namespace osprey {
namespace {

using Action = EtcdWatchLiveness::Action;

MonoDelta Ms(int64_t ms) { return MonoDelta::FromMilliseconds(ms); }

// first_answer 3 s, probe after 5 s of silence, probe timeout 2 s.
class EtcdWatchLivenessTest : public ::testing::Test {
 protected:
  const MonoTime t0_ = MonoTime() + MonoDelta::FromSeconds(1000);
  EtcdWatchLiveness live_{EtcdWatchTimeouts{}, t0_};
};

TEST_F(EtcdWatchLivenessTest, AMemberThatSaysNothingIsGivenUpAtTheFirstAnswerTimeout) {
  EXPECT_EQ(Action::kWait, live_.Tick(t0_ + Ms(2999)));
  EXPECT_EQ(Action::kGiveUp, live_.Tick(t0_ + Ms(3000)));
  EXPECT_EQ("answered nothing within 3.000s", live_.why());
  EXPECT_EQ(0, live_.probes_sent()) << "a stream that never started is not probed";
}

TEST_F(EtcdWatchLivenessTest, AnAnsweredStreamIsNotProbedBeforeItsSilenceLasts) {
  live_.OnData(t0_ + Ms(10));
  EXPECT_EQ(Action::kWait, live_.Tick(t0_ + Ms(3000))) << "the first answer came";
  EXPECT_EQ(Action::kWait, live_.Tick(t0_ + Ms(5009)));
  EXPECT_EQ(Action::kProbe, live_.Tick(t0_ + Ms(5010)));
  EXPECT_TRUE(live_.probe_in_flight());
  EXPECT_EQ(1, live_.probes_sent());
}

TEST_F(EtcdWatchLivenessTest, DataPutsTheProbeOff) {
  live_.OnData(t0_ + Ms(10));
  live_.OnData(t0_ + Ms(4000));
  EXPECT_EQ(Action::kWait, live_.Tick(t0_ + Ms(8999)));
  EXPECT_EQ(Action::kProbe, live_.Tick(t0_ + Ms(9000)));
}

TEST_F(EtcdWatchLivenessTest, AnAnsweredProbeKeepsTheWatchAndTheNextComesAfterAnotherSilence) {
  live_.OnData(t0_);
  ASSERT_EQ(Action::kProbe, live_.Tick(t0_ + Ms(5000)));
  EXPECT_EQ(Action::kWait, live_.Tick(t0_ + Ms(6000))) << "one probe at a time";
  live_.OnProbeAnswered(t0_ + Ms(6500));
  EXPECT_FALSE(live_.probe_in_flight());
  EXPECT_EQ(Action::kWait, live_.Tick(t0_ + Ms(11499)));
  EXPECT_EQ(Action::kProbe, live_.Tick(t0_ + Ms(11500)));
  EXPECT_EQ(2, live_.probes_sent());
}

TEST_F(EtcdWatchLivenessTest, AProbeUnansweredWithinItsTimeoutGivesTheWatchUp) {
  live_.OnData(t0_);
  ASSERT_EQ(Action::kProbe, live_.Tick(t0_ + Ms(5000)));
  EXPECT_EQ(Action::kWait, live_.Tick(t0_ + Ms(6999)));
  EXPECT_EQ(Action::kGiveUp, live_.Tick(t0_ + Ms(7000)));
  EXPECT_EQ("the watch was silent for 5.000s and the member answered no probe within 2.000s",
            live_.why());
}

TEST_F(EtcdWatchLivenessTest, AFailedProbeGivesTheWatchUpAtOnceWithItsReason) {
  live_.OnData(t0_);
  ASSERT_EQ(Action::kProbe, live_.Tick(t0_ + Ms(5000)));
  live_.OnProbeFailed("etcd answered 503");
  EXPECT_EQ(Action::kGiveUp, live_.Tick(t0_ + Ms(5001)));
  EXPECT_EQ("the watch was silent for 5.000s and the member's probe failed: etcd answered 503",
            live_.why());
}

TEST_F(EtcdWatchLivenessTest, WatchDataWhileAProbeIsOutDoesNotExcuseItsSilence) {
  // The stream's bytes may be a buffer the kernel held; the probe asks the
  // process now. Its timeout stands.
  live_.OnData(t0_);
  ASSERT_EQ(Action::kProbe, live_.Tick(t0_ + Ms(5000)));
  live_.OnData(t0_ + Ms(5500));
  EXPECT_EQ(Action::kGiveUp, live_.Tick(t0_ + Ms(7000)));
}

TEST(EtcdWatchLivenessOffTest, WithProbesOffASilentWatchIsKeptForever) {
  const MonoTime t0 = MonoTime() + MonoDelta::FromSeconds(1000);
  EtcdWatchTimeouts off;
  off.probe_after = MonoDelta();
  EtcdWatchLiveness live(off, t0);
  live.OnData(t0);
  EXPECT_EQ(Action::kWait, live.Tick(t0 + MonoDelta::FromSeconds(3600)));
  EXPECT_EQ(0, live.probes_sent());
  // The first answer's timeout still holds.
  EtcdWatchLiveness mute(off, t0);
  EXPECT_EQ(Action::kGiveUp, mute.Tick(t0 + MonoDelta::FromSeconds(3)));
}

}  // namespace
}  // namespace osprey
