// CheckHttpTimeout with the time given by the test: each deadline at its
// instant, a nanosecond before it, and what takes precedence.
#include "osprey/transport/http_timeouts.h"

#include <gtest/gtest.h>

namespace osprey::transport {
namespace {

const MonoDelta kRequest = MonoDelta::FromSeconds(3);
const MonoDelta kIdle = MonoDelta::FromSeconds(65);
const MonoDelta kNs = MonoDelta::FromNanoseconds(1);

HttpTimeout At(const HttpTimerState& s, MonoTime now, MonoTime* next) {
  return CheckHttpTimeout(s, now, kRequest, kIdle, next);
}

TEST(HttpTimeoutsTest, AQuietConnectionClosesAfterTheIdleTimeout) {
  const MonoTime t0 = MonoTime::Now();
  HttpTimerState s;
  s.idle_since = t0;
  MonoTime next;
  EXPECT_EQ(HttpTimeout::kNone, At(s, t0 + kIdle - kNs, &next));
  EXPECT_EQ(t0 + kIdle, next);
  EXPECT_EQ(HttpTimeout::kIdle, At(s, t0 + kIdle, &next));
}

// A partial request after a keep-alive answer has the request timeout from
// its first byte, not the idle timeout.
TEST(HttpTimeoutsTest, AnIncompleteRequestHasTheRequestTimeoutFromItsFirstByte) {
  const MonoTime t0 = MonoTime::Now();
  HttpTimerState s;
  s.idle_since = t0;
  s.request_pending = true;
  s.request_started_at = t0 + MonoDelta::FromSeconds(30);
  MonoTime next;
  EXPECT_EQ(HttpTimeout::kNone, At(s, s.request_started_at + kRequest - kNs, &next));
  EXPECT_EQ(s.request_started_at + kRequest, next);
  EXPECT_EQ(HttpTimeout::kRequestIncomplete, At(s, s.request_started_at + kRequest, &next));
}

// A slow reader that keeps taking bytes is never cut; one that takes none
// for the idle timeout is.
TEST(HttpTimeoutsTest, UnsentOutputWaitsForAPeerThatReads) {
  const MonoTime t0 = MonoTime::Now();
  HttpTimerState s;
  s.output_pending = true;
  s.request_pending = true;  // pipelined bytes wait behind the answer
  s.request_started_at = t0;
  s.output_progress_at = t0 + MonoDelta::FromSeconds(100);
  MonoTime next;
  EXPECT_EQ(HttpTimeout::kNone, At(s, t0 + MonoDelta::FromSeconds(150), &next));
  EXPECT_EQ(s.output_progress_at + kIdle, next);
  EXPECT_EQ(HttpTimeout::kNotReading, At(s, s.output_progress_at + kIdle, &next));
}

// Issue 47: a keep-alive connection past its age closes when next quiet,
// however recently it asked (the idle timeout alone let a peer that asks
// every 20 s keep it forever); before then, the idle timeout.
TEST(HttpTimeoutsTest, AConnectionPastItsAgeClosesWhenQuiet) {
  const MonoTime t0 = MonoTime::Now();
  HttpTimerState s;
  s.idle_since = t0 + MonoDelta::FromSeconds(599);  // answered just now
  s.retire_at = t0 + MonoDelta::FromSeconds(600);
  MonoTime next;
  EXPECT_EQ(HttpTimeout::kNone, At(s, s.retire_at - kNs, &next));
  EXPECT_EQ(s.retire_at, next);
  EXPECT_EQ(HttpTimeout::kRetired, At(s, s.retire_at, &next));
  // A request in progress at that instant is not cut: its answer closes it.
  s.request_pending = true;
  s.request_started_at = s.retire_at - kNs;
  EXPECT_EQ(HttpTimeout::kNone, At(s, s.retire_at, &next));
  // Retirement later than the idle timeout: idle comes first.
  s.request_pending = false;
  s.retire_at = s.idle_since + kIdle + kNs;
  EXPECT_EQ(HttpTimeout::kIdle, At(s, s.idle_since + kIdle, &next));
}

TEST(HttpTimeoutsTest, NothingTimesOutWhileTheHandlerWorks) {
  const MonoTime t0 = MonoTime::Now();
  HttpTimerState s;
  s.awaiting_answer = true;
  s.idle_since = t0;
  MonoTime next = t0;
  EXPECT_EQ(HttpTimeout::kNone, At(s, t0 + MonoDelta::FromSeconds(3600), &next));
  EXPECT_TRUE(next.IsMax());
}

}  // namespace
}  // namespace osprey::transport
