// What a timed-out call's message says of where it was, cell by cell.
#include "osprey/transport/call_phase.h"

#include <gtest/gtest.h>

namespace osprey::transport {
namespace {

TEST(CallPhaseTest, EachStepSaysWhereTheCallWas) {
  using Step = CallPhase::Step;
  struct Cell {
    CallPhase phase;
    const char* says;
  } cells[] = {
      {{Step::kConnecting, 0, 0}, " (connecting)"},
      {{Step::kNegotiating, 0, 0}, " (negotiating the connection)"},
      {{Step::kClosed, 0, 0}, " (its connection closed)"},
      {{Step::kSent, 0, 0}, " (sent, no answer)"},
      {{Step::kSent, 4096, 0}, " (queued: the connection had 4096 bytes to write)"},
      {{Step::kSent, 0, 37}, " (sent, no answer; 37 bytes waited unread)"},
      {{Step::kSent, 10, 37},
       " (queued: the connection had 10 bytes to write; 37 bytes waited unread)"},
  };
  for (const Cell& c : cells) EXPECT_EQ(c.says, c.phase.Describe());
}

}  // namespace
}  // namespace osprey::transport
