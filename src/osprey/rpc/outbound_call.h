// OutboundCall: one client call in flight, from the proxy that made it to
// the completion callback. Created on the caller's thread (which serializes
// the request), then owned by the reactor of its connection, which
// completes it exactly once and runs the callback there.
#pragma once

#include <google/protobuf/message.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/sockaddr.h"
#include "osprey/rpc/hedger.h"
#include "osprey/rpc/remote_method.h"
#include "osprey/rpc/retry_policy.h"
#include "osprey/rpc/server_guards.h"
#include "osprey/rpc/server_set.h"
#include "osprey/transport/client_call.h"
#include "osprey/transport/reactor.h"

namespace osprey {

class ClientMethodMetrics;
class NameResolution;
class RequestTracker;
class RpcController;
class SlowCallLog;
using ResponseCallback = std::function<void()>;

class OutboundCall final : public transport::ClientCall {
 public:
  // `method` must outlive the call; `owned_method`, if given, is it.
  OutboundCall(const RemoteMethod* method, std::unique_ptr<RemoteMethod> owned_method,
               const google::protobuf::Message& request, google::protobuf::Message* response,
               RpcController* controller, ResponseCallback callback);
  ~OutboundCall() override;

  Status BuildRequestFrame(int32_t call_id, std::unique_ptr<wire::OutboundFrame>* out) override;
  void OnResponse(wire::InboundResponse frame) override;
  void OnFailure(const Status& status) override;
  std::string Describe() const override;
  // The hedge's delay is over and the call has not finished: send it.
  void OnCallTimer() override;

  void set_sidecars(std::vector<std::string> sidecars) { sidecars_ = std::move(sidecars); }
  void set_required_features(std::vector<uint32_t> features) {
    required_features_ = std::move(features);
  }
  // Any thread, once it was queued: asks its reactor to abort it.
  void set_reactor_for_cancel(transport::Reactor* reactor) { cancel_reactor_.store(reactor); }
  // Before the call is queued: count it in `metrics` (null: not counted);
  // list it in `slow_calls` if it is slow (null: not listed).
  void set_observers(ClientMethodMetrics* metrics, SlowCallLog* slow_calls);
  // Before the call is queued: the named proxy's resolution, which a
  // network error makes stale.
  void set_resolution(std::shared_ptr<NameResolution> resolution) {
    resolution_ = std::move(resolution);
  }
  // Before the call is queued, for a method that tracks results: its
  // request id is `tracker`'s client id and `seq_no`.
  void set_request_id(std::shared_ptr<RequestTracker> tracker, int64_t seq_no) {
    request_tracker_ = std::move(tracker);
    seq_no_ = seq_no;
  }
  void Cancel();

  // Queues a retry (on its messenger, to its address); runs on a reactor
  // thread once the backoff is over.
  using Requeue = std::function<void(std::shared_ptr<OutboundCall> next)>;
  // Before the call is queued: retry failed attempts as `policy` says.
  // `idempotent`: the caller allows a retry after the request may have
  // reached the server.
  void set_retry(const RetryPolicy& policy, bool idempotent, Requeue requeue);
  // The overload guards of its server: a retry after the server refused
  // the call as overloaded needs the retry budget's leave (and the
  // throttle's), and each attempt's answer tells the throttle whether the
  // server accepted it.
  void set_guards(std::shared_ptr<ServerGuards> guards) { guards_ = std::move(guards); }
  // For a proxy whose target is a set of servers: this attempt goes to
  // `server` of `servers` (ServerSet::Pick counted it outstanding; the
  // attempt's end is reported back once). A call to a set is also moved:
  // an attempt the server did not run (it was draining or shutting down, or
  // no connection was made) goes at once to another server, without
  // spending the retry budget or the policy's attempts, up to once per
  // server; an exactly-once call whose outcome on a server is unknown
  // stays on that server, where its answer is stored.
  void set_server(std::shared_ptr<ServerSet> servers, ServerSet::EntryPtr server);
  const ServerSet::EntryPtr& server() const { return server_; }
  // The server the call may have run on: its retries go there only.
  bool pinned_to_server() const { return pinned_; }
  // Before the call is queued, for a call to a set that may be hedged
  // (Hedger::Plan): at `at`, if no answer came, a second attempt goes to
  // another server of the set (`key`: the call's hash key); its answers'
  // latencies go to `window` (owned by `hedger`). Only this first attempt
  // arms the hedge: a retry or move of it is not hedged.
  void set_hedging(std::shared_ptr<Hedger> hedger, LatencyWindow* window, MonoTime at,
                   uint64_t key);
  // The timeout_millis a request carries when `remaining` is left of its
  // deadline: whole milliseconds rounded up, from 1 to UINT32_MAX.
  static uint32_t TimeoutMillisToSend(MonoDelta remaining);

 private:
  struct RetryOf {};
  // The next attempt of `prior`, which hands it its request, response,
  // controller and callback.
  OutboundCall(RetryOf, OutboundCall* prior);
  struct HedgeOf {};
  // The hedge of `first`: the same request, response and controller; the
  // callback is their group's. Never retried nor moved.
  OutboundCall(HedgeOf, OutboundCall* first);
  // OnCallTimer: the hedge, if the cap and the set allow one.
  void SendHedge();
  // For an attempt of a hedged call (group_ set): whether this attempt,
  // which ended so, decides the call. Else it is dropped: the other
  // attempt answered first, or may still answer.
  bool DecidesGroup(const Status& status, const wire::ErrorStatusPB* error);
  // Whether the failure `status` may be retried (attempts left, and safe to).
  bool ShouldRetry(const Status& status, const wire::ErrorStatusPB* error) const;
  // True if a retry of the attempt that ended with `status` was scheduled;
  // false: this attempt's outcome is final. Only a retry after a refusal
  // as overloaded asks the server's guards (budget, throttle). `move`: to
  // another server of the set, at once (IsMove).
  bool ScheduleRetry(const Status& status, bool move);
  // For a set of servers: whether the attempt that ended so is moved to
  // another server (see set_server).
  bool IsMove(const Status& status, const wire::ErrorStatusPB* error) const;
  // What the attempt that ended so tells the set of its server.
  ServerSet::Outcome OutcomeOf(const Status& status, const wire::ErrorStatusPB* error) const;
  // Whether an attempt that ended with `status` was refused by its server
  // as overloaded (too busy, unavailable): it did not run, and retrying it
  // adds to that server's load.
  static bool RefusedAsOverloaded(const Status& status);
  // Whether an attempt that ended so was accepted by the server (for the
  // throttle): answered with anything but a refusal.
  static bool ServerAccepted(const Status& status, const wire::ErrorStatusPB* error);

  void Complete(const Status& status, std::unique_ptr<wire::ErrorStatusPB> error,
                std::shared_ptr<const uint8_t[]> storage, std::vector<Slice> sidecars);

  std::shared_ptr<RemoteMethod> owned_method_;  // shared with retries
  const RemoteMethod* const method_;
  std::string serialized_request_;
  std::vector<std::string> sidecars_;
  std::vector<uint32_t> required_features_;
  google::protobuf::Message* const response_;
  RpcController* const controller_;
  ResponseCallback callback_;
  std::atomic<transport::Reactor*> cancel_reactor_{nullptr};
  ClientMethodMetrics* metrics_ = nullptr;
  SlowCallLog* slow_calls_ = nullptr;
  std::shared_ptr<NameResolution> resolution_;
  std::shared_ptr<RequestTracker> request_tracker_;  // null: no request id
  int64_t seq_no_ = 0;
  int64_t attempt_no_ = 1;
  // Attempts of this call so far, this one included once it ends, whose
  // request was handed to a connection to send (may have reached the
  // server); RpcController::attempts_sent().
  int64_t attempts_sent_ = 0;
  bool retry_ = false;
  std::shared_ptr<ServerGuards> guards_;  // shared with retries; null: none
  const char* not_retried_because_ = nullptr;
  RetryPolicy retry_policy_;
  bool idempotent_ = false;
  Requeue requeue_;
  // A set of servers (null: one address): where this attempt went, and
  // whether it still holds its place in the server's outstanding count.
  std::shared_ptr<ServerSet> servers_;
  ServerSet::EntryPtr server_;
  bool counted_ = false;
  MonoTime attempt_start_;  // when this attempt was given its server
  int moves_ = 0;           // attempts that were moves, not the policy's
  bool pinned_ = false;     // an exactly-once attempt may have run on server_
  // Hedging (null hedger_: none; the one-address and unhedged calls pay
  // nothing more). Written before the call is queued, then on its
  // reactor under its loop lock (the timer, Complete), as the fields above.
  std::shared_ptr<Hedger> hedger_;
  LatencyWindow* hedge_window_ = nullptr;  // owned by hedger_
  MonoTime hedge_at_;
  uint64_t hash_key_ = 0;
  bool may_hedge_ = false;  // the first attempt, until its hedge timer fired
  bool is_hedge_ = false;
  // Once the hedge went: shared by both attempts (and the first's retries).
  std::shared_ptr<HedgeGroup> group_;
  bool claimed_ = false;  // this attempt decides the group's call
};

}  // namespace osprey
