#include "osprey/rpc/outbound_call.h"

#include <glog/logging.h>

#include <algorithm>
#include <random>
#include <string_view>

#include "osprey/rpc/name_resolution.h"
#include "osprey/rpc/request_tracker.h"
#include "osprey/rpc/rpc_controller.h"
#include "osprey/rpc/rpc_metrics.h"
#include "osprey/rpc/slow_call_log.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

OutboundCall::OutboundCall(const RemoteMethod* method, std::unique_ptr<RemoteMethod> owned_method,
                           const google::protobuf::Message& request,
                           google::protobuf::Message* response, RpcController* controller,
                           ResponseCallback callback)
    : owned_method_(std::move(owned_method)),
      method_(method),
      response_(response),
      controller_(controller),
      callback_(std::move(callback)) {
  request.SerializePartialToString(&serialized_request_);
}

OutboundCall::OutboundCall(RetryOf, OutboundCall* prior)
    : owned_method_(prior->owned_method_),
      method_(prior->method_),
      serialized_request_(prior->serialized_request_),
      sidecars_(prior->sidecars_),
      required_features_(prior->required_features_),
      response_(prior->response_),
      controller_(prior->controller_),
      callback_(std::move(prior->callback_)),
      metrics_(prior->metrics_),
      slow_calls_(prior->slow_calls_),
      resolution_(prior->resolution_),
      request_tracker_(prior->request_tracker_),
      seq_no_(prior->seq_no_),
      attempt_no_(prior->attempt_no_ + 1),
      attempts_sent_(prior->attempts_sent_),
      retry_(true),
      guards_(prior->guards_),
      retry_policy_(prior->retry_policy_),
      idempotent_(prior->idempotent_),
      requeue_(prior->requeue_),
      servers_(prior->servers_),
      server_(prior->server_),  // not counted: the requeue picks (or keeps) it
      moves_(prior->moves_),
      pinned_(prior->pinned_),
      // Not hedged again (may_hedge_ false), but its answers still tell the
      // method's window, and it stays in the group of a hedged first.
      hedger_(prior->hedger_),
      hedge_window_(prior->hedge_window_),
      hash_key_(prior->hash_key_),
      group_(prior->group_) {
  // The requeue sets it again; a retry that ends before (shutdown, cancel
  // in the backoff) still names where it went.
  set_destination(prior->destination());
  set_deadline(prior->deadline());
  set_started(prior->started());
  if (prior->completion_runs_no_user_code()) set_completion_runs_no_user_code();
}

OutboundCall::OutboundCall(HedgeOf, OutboundCall* first)
    : owned_method_(first->owned_method_),
      method_(first->method_),
      serialized_request_(first->serialized_request_),
      sidecars_(first->sidecars_),
      required_features_(first->required_features_),
      response_(first->response_),
      controller_(first->controller_),
      // callback_: none; the group holds the call's.
      metrics_(first->metrics_),
      slow_calls_(first->slow_calls_),
      attempt_no_(first->attempt_no_ + 1),
      attempts_sent_(first->attempts_sent_),
      // retry_ false: never retried nor moved; if it fails, the first
      // attempt still decides. No guards: they are the first's server's.
      idempotent_(true),
      hedger_(first->hedger_),
      hedge_window_(first->hedge_window_),
      hash_key_(first->hash_key_),
      is_hedge_(true),
      group_(first->group_) {
  set_deadline(first->deadline());
  set_started(first->started());
  if (first->completion_runs_no_user_code()) set_completion_runs_no_user_code();
}

OutboundCall::~OutboundCall() = default;

void OutboundCall::set_hedging(std::shared_ptr<Hedger> hedger, LatencyWindow* window, MonoTime at,
                               uint64_t key) {
  hedger_ = std::move(hedger);
  hedge_window_ = window;
  hedge_at_ = at;
  hash_key_ = key;
  may_hedge_ = true;
}

void OutboundCall::OnCallTimer() {
  may_hedge_ = false;
  SendHedge();
}

void OutboundCall::SendHedge() {
  if (group_ != nullptr || cancel_requested() || hedger_ == nullptr || servers_ == nullptr) return;
  HedgeCounters& counters = hedger_->counters();
  if (!hedger_->budget().TryTake()) {
    counters.refused_by_cap.fetch_add(1, std::memory_order_relaxed);
    if (metrics_ != nullptr) metrics_->hedges_refused_by_cap->Increment();
    return;
  }
  ServerSet::EntryPtr other = servers_->PickOther(hash_key_, server_);
  if (other == nullptr) {
    hedger_->budget().GiveBack();
    counters.no_other_server.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // From here the call's callback is the group's, taken by whichever
  // attempt decides. This attempt cannot complete meanwhile: it completes
  // under this reactor's loop lock, which the timer holds.
  group_ = std::make_shared<HedgeGroup>(std::move(callback_));
  std::shared_ptr<OutboundCall> hedge(new OutboundCall(HedgeOf{}, this));
  hedge->set_destination({other->address, destination().user, other->host});
  hedge->set_server(servers_, std::move(other));
  group_->SetAttempt(false, std::static_pointer_cast<OutboundCall>(shared_from_this()));
  group_->SetAttempt(true, hedge);
  // Cancel() reaches both attempts from now; one that came already ends
  // the hedge at once.
  if (controller_->Hedging(hedge)) hedge->RequestCancel();
  counters.sent.fetch_add(1, std::memory_order_relaxed);
  if (metrics_ != nullptr) metrics_->hedges_sent->Increment();
  VLOG(1) << Describe() << ": no answer from " << destination().remote.ToString()
          << " yet; hedging to " << hedge->destination().remote.ToString();
  hedger_->Send(std::move(hedge));
}

bool OutboundCall::DecidesGroup(const Status& status, const wire::ErrorStatusPB* error) {
  // An answer took its claim in OnResponse; one that reaches here lost it.
  if (status.ok()) return false;
  // A server's answer but for a refusal: the call ran there, and that is
  // the call's outcome. A failure or refusal waits for the other attempt,
  // unless it was the last one in flight.
  const bool answered = error != nullptr &&
                        error->code() != wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY &&
                        error->code() != wire::ErrorStatusPB::ERROR_UNAVAILABLE &&
                        error->code() != wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN;
  claimed_ = answered ? group_->Claim() : group_->EndedWithoutAnswer();
  return claimed_;
}

void OutboundCall::set_server(std::shared_ptr<ServerSet> servers, ServerSet::EntryPtr server) {
  servers_ = std::move(servers);
  server_ = std::move(server);
  counted_ = true;
  attempt_start_ = MonoTime::Now();
}

void OutboundCall::set_retry(const RetryPolicy& policy, bool idempotent, Requeue requeue) {
  retry_ = policy.max_attempts > 1 || servers_ != nullptr;
  retry_policy_ = policy;
  idempotent_ = idempotent;
  requeue_ = std::move(requeue);
}

ServerSet::Outcome OutboundCall::OutcomeOf(const Status& status,
                                           const wire::ErrorStatusPB* error) const {
  using Outcome = ServerSet::Outcome;
  if (status.ok()) return Outcome::kAnswered;
  if (error != nullptr) {
    switch (error->code()) {
      case wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY:
        return Outcome::kRefusedBusy;
      case wire::ErrorStatusPB::ERROR_UNAVAILABLE:
      case wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN:
        return Outcome::kDraining;
      default:
        return Outcome::kAnswered;  // the server works; the call did not
    }
  }
  if (status.IsNetworkError()) {
    // A connection that connected and then broke (before the request went,
    // or after) is lost, whatever it carried; one that never connected is
    // a failed connect.
    return may_have_reached_server() || lost_with() != 0 ? Outcome::kLost : Outcome::kConnectFailed;
  }
  if (status.IsTimedOut()) return Outcome::kTimedOut;
  return Outcome::kAbandoned;
}

bool OutboundCall::IsMove(const Status& status, const wire::ErrorStatusPB* error) const {
  if (servers_ == nullptr || moves_ >= static_cast<int>(servers_->size())) return false;
  if (error != nullptr) {
    // A call pinned where it may have run moves only when that server says
    // it never ran it: ERROR_UNAVAILABLE, which a server sends for a
    // tracked call only once its memory of answers says so (a draining
    // Osprey server; Kudu's before its services start, or for a token it
    // cannot check yet, after its tracker let the call through).
    if (pinned_) return error->code() == wire::ErrorStatusPB::ERROR_UNAVAILABLE;
    return error->code() == wire::ErrorStatusPB::ERROR_UNAVAILABLE ||
           error->code() == wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN;
  }
  return !pinned_ && status.IsNetworkError() && !may_have_reached_server();
}

bool OutboundCall::ShouldRetry(const Status& status, const wire::ErrorStatusPB* error) const {
  if (IsMove(status, error)) return true;
  if (attempt_no_ - moves_ >= retry_policy_.max_attempts) return false;
  if (status.IsServiceUnavailable()) return retry_policy_.retry_server_too_busy;  // not run
  if (error != nullptr && error->code() == wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN) {
    return retry_policy_.retry_server_shutting_down;  // not run either
  }
  if (status.IsNetworkError() && retry_policy_.retry_network_errors) {
    // After the request may have reached the server, only if running it
    // twice is harmless: the server answers a tracked retry from memory.
    return !may_have_reached_server() || request_tracker_ != nullptr || idempotent_;
  }
  return false;
}

bool OutboundCall::RefusedAsOverloaded(const Status& status) {
  // ERROR_SERVER_TOO_BUSY and ERROR_UNAVAILABLE (OnResponse); a server
  // shutting down is a RemoteError, a broken connection a NetworkError.
  return status.IsServiceUnavailable();
}

bool OutboundCall::ScheduleRetry(const Status& status, bool move) {
  transport::Reactor* r = reactor();
  if (r == nullptr || !r->IsCurrentThread()) return false;  // its timer needs its loop
  MonoTime at = LoopTime();
  if (!move) {
    double cap = static_cast<double>(retry_policy_.initial_backoff.ToMicroseconds());
    for (int64_t i = 1 + moves_; i < attempt_no_; ++i) cap *= retry_policy_.multiplier;
    cap = std::min(cap, static_cast<double>(retry_policy_.max_backoff.ToMicroseconds()));
    thread_local std::minstd_rand rng(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0, std::max(cap, 0.0));
    at = at + MonoDelta::FromMicroseconds(static_cast<int64_t>(jitter(rng)));
  }
  if (!deadline().IsMax() && at >= deadline()) {
    // Ends now rather than at the deadline, with its attempt's error.
    not_retried_because_ = "its deadline comes before its retry's backoff ends";
    return false;
  }
  // Only a server's refusal spends the guards: they keep retries from
  // adding to a server's overload. A connection that broke failed every
  // call it carried at once; those retries are paced by the policy's
  // backoff and bounded by its attempts (issue 46). A move goes to another
  // server, one that did not refuse.
  if (guards_ != nullptr && !move && RefusedAsOverloaded(status)) {
    if (guards_->retry_budget != nullptr && !guards_->retry_budget->TryRetry(LoopTime())) {
      not_retried_because_ = "its server's retry budget is spent";
      return false;
    }
    if (guards_->throttle != nullptr) {
      thread_local std::mt19937_64 draw(std::random_device{}());
      if (guards_->throttle->ShouldRefuse(LoopTime(),
                                          std::uniform_real_distribution<double>(0, 1)(draw))) {
        not_retried_because_ = "the client's adaptive throttling refused the retry";
        return false;
      }
    }
  }
  std::shared_ptr<OutboundCall> next(new OutboundCall(RetryOf{}, this));
  if (move) {
    ++next->moves_;
    next->pinned_ = false;  // it did not run where it was: any server may take it
  }
  if (group_ != nullptr) group_->SetAttempt(false, next);  // the hedge's winner cancels it
  next->set_reactor_for_cancel(r);  // a Cancel() during the backoff ends it at once
  if (controller_->Retrying(next)) {
    // Cancelled while this attempt ended: the retry ends Aborted as soon as
    // it is queued (Reactor::AssignCall), without its backoff.
    next->RequestCancel();
    at = LoopTime();
  }
  // If the reactor stops before the backoff ends, the retry never runs:
  // it fails instead, so its callback still runs exactly once.
  struct Pending {
    std::shared_ptr<OutboundCall> call;
    Requeue requeue;
    ~Pending() {
      if (call != nullptr) {
        call->FailUnsent(Status::Aborted(call->Describe() + ": messenger shut down before retry"));
      }
    }
  };
  auto pending = std::make_shared<Pending>();  // in place: a copy's destructor would fail it
  pending->call = next;
  pending->requeue = requeue_;
  VLOG(1) << Describe() << ": attempt " << attempt_no_ << " failed; retrying at "
          << (at - LoopTime()).ToString() << " from now";
  r->ScheduleTimer(at, [pending] { pending->requeue(std::move(pending->call)); });
  return true;
}

uint32_t OutboundCall::TimeoutMillisToSend(MonoDelta remaining) {
  // Rounded up: truncated, a call with 2.9 ms left would tell the server 2,
  // and a server that refuses calls it cannot finish in time would refuse
  // some it could. At least 1: 0 means no timeout at all.
  int64_t ns = remaining.ToNanoseconds();
  int64_t ms = ns <= 0 ? 1 : (ns - 1) / 1000000 + 1;
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, UINT32_MAX));
}

std::string OutboundCall::Describe() const {
  return method_->service() + "." + method_->method() + " RPC";
}

Status OutboundCall::BuildRequestFrame(int32_t call_id, std::unique_ptr<wire::OutboundFrame>* out) {
  if (may_hedge_) {
    // Armed once the first attempt is on its way, on its reactor: the
    // timer runs under the same loop lock as the attempt's completion.
    may_hedge_ = false;
    if (hedge_at_ < deadline()) may_hedge_ = ArmCallTimer(hedge_at_);
  }
  if (is_hedge_) group_->hedge_sent.store(true, std::memory_order_relaxed);
  uint32_t timeout_ms = 0;  // none
  if (!deadline().IsMax()) {
    timeout_ms = TimeoutMillisToSend(deadline() - LoopTime());
  }
  std::string request_id;
  if (request_tracker_ != nullptr) {
    wire::RequestIdPB id;
    id.set_client_id(request_tracker_->client_id());
    id.set_seq_no(seq_no_);
    id.set_first_incomplete_seq_no(request_tracker_->FirstIncomplete());
    id.set_attempt_no(attempt_no_);
    id.SerializeToString(&request_id);
  }
  Status s = wire::OutboundFrame::EncodeRequest(
      call_id, method_->serialized_pb(), timeout_ms, required_features_, Slice(request_id),
      serialized_request_, retry_ ? sidecars_ : std::move(sidecars_), out);
  if (!retry_) {
    serialized_request_.clear();
    serialized_request_.shrink_to_fit();
  }
  return s;
}

void OutboundCall::OnResponse(wire::InboundResponse frame) {
  const Slice& body = frame.main_message;
  if (frame.header.is_error()) {
    auto err = std::make_unique<wire::ErrorStatusPB>();
    if (!err->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      Complete(Status::IOError(Describe() + ": server error response does not parse"), nullptr,
               nullptr, {});
      return;
    }
    Status s;
    switch (err->code()) {
      case wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY:
      case wire::ErrorStatusPB::ERROR_UNAVAILABLE: {
        // Servers (Kudu's too) send the status as text: its "Service
        // unavailable: " would be said twice.
        std::string_view message = err->message();
        constexpr std::string_view kPrefix = "Service unavailable: ";
        if (message.substr(0, kPrefix.size()) == kPrefix) message.remove_prefix(kPrefix.size());
        s = Status::ServiceUnavailable(std::string(message));
        break;
      }
      default:
        s = Status::RemoteError(err->message() + " (" +
                                wire::ErrorStatusPB::RpcErrorCodePB_Name(err->code()) + ")");
    }
    if (err->unsupported_feature_flags_size() > 0) {
      std::string flags;
      for (uint32_t f : err->unsupported_feature_flags()) {
        flags += (flags.empty() ? "" : ", ") + std::to_string(f);
      }
      s = s.CloneAndPrepend(Describe() + ": server does not support required feature flag(s) " +
                            flags);
    }
    Complete(s, std::move(err), nullptr, {});
    return;
  }
  if (group_ != nullptr && !claimed_) {
    // A hedged call: only the first answer may fill the response.
    if (!group_->Claim()) {
      Complete(Status::OK(), nullptr, nullptr, {});  // dropped there
      return;
    }
    claimed_ = true;
  }
  if (!response_->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    Complete(
        Status::IOError(Describe() + ": response does not parse as " + response_->GetTypeName() +
                        ": " + response_->InitializationErrorString()),
        nullptr, nullptr, {});
    return;
  }
  Complete(Status::OK(), nullptr, std::move(frame.storage), std::move(frame.sidecars));
}

bool OutboundCall::ServerAccepted(const Status& status, const wire::ErrorStatusPB* error) {
  // Answered by the server, with anything but a refusal to run it.
  if (status.ok()) return true;
  if (error == nullptr) return false;  // never answered: network, timeout, local
  return error->code() != wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY &&
         error->code() != wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN;
}

void OutboundCall::OnFailure(const Status& status) { Complete(status, nullptr, nullptr, {}); }

void OutboundCall::set_observers(ClientMethodMetrics* metrics, SlowCallLog* slow_calls) {
  metrics_ = metrics;
  slow_calls_ = slow_calls;
  if (metrics_ != nullptr || slow_calls_ != nullptr) mark_started();
  if (metrics_ != nullptr) metrics_->started->Increment();
}

void OutboundCall::Complete(const Status& attempt_status,
                            std::unique_ptr<wire::ErrorStatusPB> error,
                            std::shared_ptr<const uint8_t[]> storage, std::vector<Slice> sidecars) {
  Status status = attempt_status;
  if (may_have_reached_server()) ++attempts_sent_;
  if (servers_ != nullptr && counted_) {
    ServerSet::Outcome outcome = OutcomeOf(status, error.get());
    // Cancelled because the other attempt of its hedged call answered.
    if (outcome == ServerSet::Outcome::kAbandoned && group_ != nullptr && !claimed_ &&
        group_->decided()) {
      outcome = ServerSet::Outcome::kOutrun;
    }
    const MonoDelta took = MonoTime::Now() - attempt_start_;
    servers_->Ended(server_, outcome, took, outcome == ServerSet::Outcome::kLost ? lost_with() : 0);
    counted_ = false;
    // Every answer, the first or not, is a sample of the method's latency.
    if (status.ok() && hedge_window_ != nullptr) hedge_window_->Record(took);
    // An exactly-once attempt that may have run there: its retries stay,
    // where the server keeps its answer.
    if (request_tracker_ != nullptr &&
        ((outcome == ServerSet::Outcome::kLost && may_have_reached_server()) ||
         outcome == ServerSet::Outcome::kTimedOut)) {
      pinned_ = true;
    }
  }
  if (guards_ != nullptr && guards_->throttle != nullptr && ServerAccepted(status, error.get())) {
    guards_->throttle->RecordAccepted(LoopTime());
  }
  // A hedged call whose other attempt answered is not retried.
  if (retry_ && !(group_ != nullptr && group_->decided()) && ShouldRetry(status, error.get())) {
    if (cancel_requested()) {
      // Cancel() came as this attempt failed: the call ends as cancelled,
      // not with the failure it would have retried.
      status = Status::Aborted(Describe() + " cancelled");
      error.reset();
    } else if (ScheduleRetry(status, IsMove(status, error.get()))) {
      return;
    } else if (not_retried_because_ != nullptr) {
      status = status.CloneAndPrepend(std::string("not retried (") + not_retried_because_ + ")");
    }
  }
  int attempts = static_cast<int>(attempt_no_);
  int attempts_sent = static_cast<int>(attempts_sent_);
  RpcController::Hedge hedge = RpcController::Hedge::kNone;
  if (group_ != nullptr) {
    hedge = RpcController::Hedge::kSent;
    if (!claimed_ && !DecidesGroup(status, error.get())) return;  // the other attempt decides
    // This attempt decides: the other is not wanted any more. Cancelled on
    // the client only; a late answer is dropped (OnResponse).
    if (std::shared_ptr<OutboundCall> other = group_->Other(is_hedge_)) other->Cancel();
    if (is_hedge_) {
      ++attempts_sent;  // the first attempt was sent before its hedge
      if (status.ok() || error != nullptr) {
        hedge = RpcController::Hedge::kWon;
        hedger_->counters().won.fetch_add(1, std::memory_order_relaxed);
        if (metrics_ != nullptr) metrics_->hedges_won->Increment();
      }
    } else {
      ++attempts;
      if (group_->hedge_sent.load(std::memory_order_relaxed)) ++attempts_sent;
    }
  }
  // A failure after retries says so: the last attempt's error alone reads
  // as if the call had been made once.
  if (!status.ok() && attempts > 1) {
    status = status.CloneAndPrepend("after " + std::to_string(attempts) + " attempts");
  }
  // The controller and response may be gone the moment the callback runs
  // (a sync caller returns): touch nothing of theirs after it.
  if (metrics_ != nullptr || slow_calls_ != nullptr) {
    MonoDelta took = LoopTime() - started();  // the reactor's clock reading, when on one
    if (metrics_ != nullptr) {
      metrics_->CountOutcome(status);
      metrics_->latency->Record(took);
    }
    if (slow_calls_ != nullptr && took >= slow_calls_->threshold()) {
      slow_calls_->MaybeRecord(/*inbound=*/false, method_->service() + "." + method_->method(),
                               destination().remote, destination().user, took,
                               status.ok() ? "ok" : Status::CodeName(status.code()));
    }
  }
  if (resolution_ != nullptr && status.IsNetworkError()) resolution_->MarkStale();
  if (request_tracker_ != nullptr) request_tracker_->End(seq_no_);
  ResponseCallback cb = group_ != nullptr ? group_->TakeCallback() : std::move(callback_);
  controller_->Finish(status, std::move(error), std::move(storage), std::move(sidecars), attempts,
                      attempts_sent, destination().remote, hedge);
  cb();
}

void OutboundCall::Cancel() {
  // Either this load sees the reactor, or the reactor's AssignCall, which
  // comes after the reactor was stored, sees the request (both seq_cst).
  RequestCancel();
  transport::Reactor* r = cancel_reactor_.load();
  if (r == nullptr) return;
  // The messenger, and with it `r`, may be gone: its last reference can go
  // on another thread once this call finished.
  transport::Reactor::AbortCallIfAlive(r, shared_from_this(),
                                       Status::Aborted(Describe() + " cancelled"));
}

}  // namespace osprey
