// ServerGuards: what a client messenger keeps per server to keep its own
// calls from adding to that server's overload: the retry budget (on when a
// call has a RetryPolicy and MessengerBuilder::set_retry_budget allows)
// and the adaptive throttle (MessengerBuilder::set_client_throttling).
// Shared by the calls to that server (any thread; each guard locks itself).
#pragma once

#include <memory>

#include "osprey/rpc/client_throttle.h"
#include "osprey/rpc/retry_budget.h"

namespace osprey {

struct ServerGuards {
  std::unique_ptr<RetryBudget> retry_budget;  // null: retries not budgeted
  std::unique_ptr<ClientThrottle> throttle;   // null: no throttling
};

}  // namespace osprey
