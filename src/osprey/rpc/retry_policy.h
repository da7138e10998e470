// RetryPolicy: when a client call is sent again, as Kudu's RpcRetrier does
// for a busy or restarting server. A plain value.
//
// An attempt is retried, after a backoff, for:
//  - ServiceUnavailable: the server's queue was full (ERROR_SERVER_TOO_BUSY)
//    or it was unavailable: it did not run the call;
//  - a server answering FATAL_SERVER_SHUTTING_DOWN: it did not run it;
//  - NetworkError before the request was sent (no connection);
//  - NetworkError after it may have reached the server, only when the
//    method tracks results (the server answers a retry from memory: exactly
//    once) or the call is idempotent (RpcController::set_idempotent, or
//    its method's idempotency_level in the .proto).
// Never past the call's deadline: a backoff that would end after it ends
// the call with the last attempt's error. The backoff is "full jitter":
// uniform in [0, min(max_backoff, initial_backoff * multiplier^(n-1))]
// before attempt n+1, so many clients retrying at once spread out.
#pragma once

#include <cmath>
#include <string>

#include "osprey/base/monotime.h"
#include "osprey/base/status.h"

namespace osprey {

struct RetryPolicy {
  // Attempts in all, the first included; 1: never retried (the default).
  int max_attempts = 1;
  MonoDelta initial_backoff = MonoDelta::FromMilliseconds(20);
  MonoDelta max_backoff = MonoDelta::FromSeconds(2);
  double multiplier = 2.0;
  bool retry_server_too_busy = true;
  bool retry_server_shutting_down = true;
  bool retry_network_errors = true;

  // InvalidArgument naming the field, for a policy that could not mean
  // anything: fewer than one attempt, a negative backoff, a max_backoff
  // below initial_backoff, or a multiplier that is not a finite number of
  // at least 1.
  Status Validate() const {
    if (max_attempts < 1) {
      return Status::InvalidArgument("RetryPolicy.max_attempts must be at least 1, got " +
                                     std::to_string(max_attempts));
    }
    if (initial_backoff < MonoDelta() || max_backoff < MonoDelta()) {
      return Status::InvalidArgument("RetryPolicy backoffs must not be negative");
    }
    if (max_backoff < initial_backoff) {
      return Status::InvalidArgument("RetryPolicy.max_backoff (" + max_backoff.ToString() +
                                     ") is below initial_backoff (" + initial_backoff.ToString() +
                                     ")");
    }
    if (!std::isfinite(multiplier) || multiplier < 1.0) {
      return Status::InvalidArgument(
          "RetryPolicy.multiplier must be a finite number of at least 1, got " +
          std::to_string(multiplier));
    }
    return Status::OK();
  }

  // Kudu-like retries: up to 10 attempts, 20 ms doubling to 2 s.
  static RetryPolicy Default() {
    RetryPolicy p;
    p.max_attempts = 10;
    return p;
  }
};

}  // namespace osprey
