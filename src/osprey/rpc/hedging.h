// HedgingPolicy: when a client call to a set of servers sends a second
// attempt (a hedge) to another server instead of waiting out a slow one
// ("The Tail at Scale": Dean and Barroso's hedged requests; gRPC's hedging
// policy, brpc's backup requests). A plain value; Proxy::set_hedging and
// MessengerBuilder::set_hedging take it.
//
// Only calls that may run twice without harm are hedged: a method marked
// idempotent in its .proto (`option idempotency_level = IDEMPOTENT;` or
// NO_SIDE_EFFECTS, protobuf's own method option), or a call marked so on
// its controller (RpcController::set_idempotent). Never an exactly-once
// (tracked) call: its answer is stored on the one server that ran it, and
// a second server would run it again. Never a proxy of one address: there
// is no other server to ask.
//
// A hedged call's first answer wins; the other attempt is cancelled on the
// client (the server may still run it; its late answer is dropped). A
// refusal (too busy, draining) or a failure of one attempt does not end the
// call while the other may still answer.
#pragma once

#include <cstdint>
#include <string>

#include "osprey/base/monotime.h"
#include "osprey/base/status.h"

namespace osprey {

struct HedgingPolicy {
  // Off by default: a hedge costs a server a call, which only the caller
  // can judge worth it.
  bool enabled = false;
  // When the hedge goes: a fixed `delay` after the call started, or the
  // method's recent 95th percentile latency (its last few hundred answers,
  // per proxy), with `delay` until enough answers are known.
  enum class When { kFixed, kP95 };
  When when = When::kP95;
  MonoDelta delay = MonoDelta::FromMilliseconds(10);
  // Hedges sent are at most this share of the calls that could be hedged
  // (a token bucket: each such call adds `max_share` of a hedge, each hedge
  // takes one). 5% by default: the p95 delay hedges about that many calls
  // anyway; the cap keeps a fleet-wide slowdown from doubling its load.
  double max_share = 0.05;
  // Hedges the bucket may save up for a burst (it starts empty).
  double burst = 10;

  // InvalidArgument naming the field: a negative delay, a share outside
  // [0, 1], a burst below 1.
  Status Validate() const {
    if (delay < MonoDelta())
      return Status::InvalidArgument("HedgingPolicy.delay must not be negative");
    if (!(max_share >= 0 && max_share <= 1)) {
      return Status::InvalidArgument("HedgingPolicy.max_share must be from 0 to 1, got " +
                                     std::to_string(max_share));
    }
    if (!(burst >= 1 && burst <= 1e6)) {
      return Status::InvalidArgument("HedgingPolicy.burst must be from 1 to 1,000,000, got " +
                                     std::to_string(burst));
    }
    return Status::OK();
  }

  // Hedging at the method's recent p95 (until known: `until_known`).
  static HedgingPolicy AtP95(MonoDelta until_known = MonoDelta::FromMilliseconds(10)) {
    HedgingPolicy p;
    p.enabled = true;
    p.when = When::kP95;
    p.delay = until_known;
    return p;
  }
  // Hedging a fixed time after the call started.
  static HedgingPolicy After(MonoDelta delay) {
    HedgingPolicy p;
    p.enabled = true;
    p.when = When::kFixed;
    p.delay = delay;
    return p;
  }
};

// What a proxy's hedging did since it was made (Proxy::hedging_stats):
// calls that could be hedged, hedges sent, hedges whose answer came first
// (won), and hedges due but refused by the cap (max_share) or because no
// other server could take one.
struct HedgeStats {
  int64_t eligible = 0;
  int64_t sent = 0;
  int64_t won = 0;
  int64_t refused_by_cap = 0;
  int64_t no_other_server = 0;
};

}  // namespace osprey
