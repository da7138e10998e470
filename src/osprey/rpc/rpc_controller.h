// RpcController: the per-call settings and outcome a client passes with a
// call: timeout, request sidecars, and after completion the status, the
// server's error detail and the response sidecars.
//
// One call at a time: set it up, make the call, read it after the callback
// ran (or the sync call returned); Reset() to reuse. Cancel() and status()
// may be called from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/slice.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/rpc/retry_policy.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

class OutboundCall;
class Proxy;

class RpcController {
 public:
  RpcController();
  ~RpcController();
  RpcController(const RpcController&) = delete;
  RpcController& operator=(const RpcController&) = delete;

  // The call fails with TimedOut if no response came within this time. It is
  // sent to the server as timeout_millis. Without one a call has no deadline.
  void set_timeout(MonoDelta timeout);
  void set_deadline(MonoTime deadline);
  MonoDelta timeout() const;

  // Adds a request sidecar; *idx is its index on the server.
  Status AddOutboundSidecar(std::string data, int* idx);

  // The call requires the server's service to support application feature
  // flag `feature` (sent as required_feature_flags, as Kudu's
  // RequireServerFeature). A service without it refuses the call: status()
  // is then a RemoteError naming the flags, and error_response() lists them
  // in unsupported_feature_flags. Kept until Reset().
  void RequireServerFeature(uint32_t feature);
  std::vector<uint32_t> required_server_features() const;

  // Retries for this call (see RetryPolicy); without it, the proxy's.
  // InvalidArgument, and nothing changes, if the policy is not valid.
  Status set_retry_policy(const RetryPolicy& policy);
  // The call may run twice without harm, so it may be retried after its
  // request may have reached the server (as a method that tracks results),
  // and hedged if its proxy hedges (Proxy::set_hedging). A method marked
  // idempotent in its .proto needs no such mark. Never hedged if its method
  // tracks results (exactly once), whatever this says.
  void set_idempotent(bool idempotent);
  // For a proxy whose target is a set of servers balanced by consistent
  // hashing (LoadBalancing::kConsistentHash): calls with the same key go
  // to the same server while it stays. 0 by default.
  void set_hash_key(uint64_t key);
  // After the call: the server its last attempt went to (for a set of
  // servers, the one picked); 0.0.0.0:0 if it never started.
  Sockaddr server() const;
  // After the call: how many attempts it took (1 without retries; a hedge
  // counts).
  int attempts() const;
  // After the call: whether a hedge was sent (HedgingPolicy), and whether
  // its answer came first (server() is then the hedge's).
  enum class Hedge { kNone, kSent, kWon };
  Hedge hedge() const;
  // After the call: how many of its attempts were handed to a connection
  // to send, so may have reached the server: attempts() less those that
  // ended before (no connection, cancelled or timed out while waiting for
  // one, or refused on the client by its adaptive throttling, which leaves
  // 0). What this call cost the server, in requests.
  int attempts_sent() const;

  // Completes the call with Aborted unless it already finished. The server
  // may still run it.
  void Cancel();

  // OK, or why the call failed: TimedOut, Aborted, NetworkError,
  // ServiceUnavailable (server too busy), RemoteError (the server's message).
  Status status() const;
  bool finished() const;
  // For a RemoteError or ServiceUnavailable: the server's error, with its
  // code and any application error extension; else null.
  const wire::ErrorStatusPB* error_response() const;

  // Response sidecars, valid until Reset() or destruction.
  int num_inbound_sidecars() const;
  Status GetInboundSidecar(int idx, Slice* out) const;

  // Clears everything for reuse. Must not be called while a call is in
  // flight.
  void Reset();

 private:
  friend class OutboundCall;
  friend class Proxy;

  // What a starting call takes from its controller, under one lock.
  struct CallStart {
    std::vector<std::string> sidecars;
    std::optional<RetryPolicy> retry_policy;  // unset: the proxy's
    bool idempotent = false;
    uint64_t hash_key = 0;
  };
  // Proxy: a call starts. Takes the outbound sidecars.
  CallStart StartCall(const std::shared_ptr<OutboundCall>& call);
  // OutboundCall: `next` is the retry of the call in flight (Cancel reaches
  // it). True if Cancel() was called during this call: `next` must end
  // Aborted, as a Cancel() may have reached only the attempt before it.
  bool Retrying(const std::shared_ptr<OutboundCall>& next);
  // OutboundCall: `hedge` is the call's hedge, in flight beside it (Cancel
  // reaches both). True if Cancel() was called during this call.
  bool Hedging(const std::shared_ptr<OutboundCall>& hedge);
  // OutboundCall: the call ends, after `attempts` attempts, `attempts_sent`
  // of them handed to a connection.
  void Finish(const Status& status, std::unique_ptr<wire::ErrorStatusPB> error,
              std::shared_ptr<const uint8_t[]> sidecar_storage, std::vector<Slice> sidecars,
              int attempts, int attempts_sent, const Sockaddr& server, Hedge hedge);

  mutable Mutex mu_;
  MonoDelta timeout_ OSPREY_GUARDED_BY(mu_);
  MonoTime deadline_ OSPREY_GUARDED_BY(mu_) = MonoTime::Max();
  std::vector<std::string> outbound_sidecars_ OSPREY_GUARDED_BY(mu_);
  std::vector<uint32_t> required_server_features_ OSPREY_GUARDED_BY(mu_);
  std::optional<RetryPolicy> retry_policy_ OSPREY_GUARDED_BY(mu_);
  bool idempotent_ OSPREY_GUARDED_BY(mu_) = false;
  uint64_t hash_key_ OSPREY_GUARDED_BY(mu_) = 0;
  Sockaddr server_ OSPREY_GUARDED_BY(mu_);
  int attempts_ OSPREY_GUARDED_BY(mu_) = 0;
  int attempts_sent_ OSPREY_GUARDED_BY(mu_) = 0;
  std::shared_ptr<OutboundCall> call_ OSPREY_GUARDED_BY(mu_);
  std::shared_ptr<OutboundCall> hedge_call_ OSPREY_GUARDED_BY(mu_);  // a hedge in flight
  Hedge hedge_ OSPREY_GUARDED_BY(mu_) = Hedge::kNone;
  bool finished_ OSPREY_GUARDED_BY(mu_) = false;
  bool cancelled_ OSPREY_GUARDED_BY(mu_) = false;  // Cancel() during the call in flight
  Status status_ OSPREY_GUARDED_BY(mu_);
  std::unique_ptr<wire::ErrorStatusPB> error_ OSPREY_GUARDED_BY(mu_);
  std::shared_ptr<const uint8_t[]> sidecar_storage_ OSPREY_GUARDED_BY(mu_);
  std::vector<Slice> inbound_sidecars_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
