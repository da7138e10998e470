#include "osprey/rpc/inbound_call.h"

#include <glog/logging.h>

#include "osprey/rpc/rpc_metrics.h"
#include "osprey/rpc/slow_call_log.h"

namespace osprey {

InboundCall::InboundCall(std::shared_ptr<transport::Connection> conn, wire::InboundRequest frame)
    : conn_(std::move(conn)),
      frame_(std::move(frame)),
      received_at_(conn_->reactor()->loop_time()) {
  deadline_ = frame_.header.has_timeout_millis() && frame_.header.timeout_millis() > 0
                  ? received_at_ + MonoDelta::FromMilliseconds(frame_.header.timeout_millis())
                  : MonoTime::Max();
}

void InboundCall::set_method(const ServiceMethod* m, ServerMethodMetrics* metrics,
                             SlowCallLog* slow_calls) {
  method_ = m;
  metrics_ = metrics;
  slow_calls_ = slow_calls;
  if (metrics_ != nullptr) metrics_->received->Increment();
}

size_t InboundCall::memory_bytes() const {
  size_t n = sizeof(*this) + frame_.main_message.size() + 128;
  for (const Slice& s : frame_.sidecars) n += s.size();
  // The sidecar table: a Slice and, in the header, an offset per sidecar.
  n += frame_.sidecars.capacity() * sizeof(Slice) +
       frame_.header.sidecar_offsets().capacity() * sizeof(uint32_t) +
       frame_.header.required_feature_flags().capacity() * sizeof(uint32_t);
  return n;
}

InboundCall::~InboundCall() {
  if (result_tracker_ == nullptr || recorded_) return;
  wire::ErrorStatusPB err;
  err.set_code(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY);
  err.set_message(
      Status::ServiceUnavailable("the first attempt of this request was dropped before it ran; "
                                 "try again")
          .ToString());
  ResultTracker::Answer dropped{true, err.SerializeAsString(), {}};
  result_tracker_->Record(tracked_key_, dropped, /*store=*/false);
}

namespace {
Status EncodeAnswer(int32_t call_id, const ResultTracker::Answer& answer,
                    std::unique_ptr<wire::OutboundFrame>* frame) {
  wire::ResponseHeader header;
  header.set_call_id(call_id);
  header.set_is_error(answer.is_error);
  return wire::OutboundFrame::EncodeSerialized(&header, Slice(answer.body), answer.sidecars, frame);
}
}  // namespace

void InboundCall::RecordAndRespond(ResultTracker::Answer answer) {
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = EncodeAnswer(call_id(), answer, &frame);
  if (!s.ok()) {
    // Too big to send: what is stored and sent is why.
    wire::ErrorStatusPB err;
    err.set_code(wire::ErrorStatusPB::ERROR_APPLICATION);
    err.set_message(s.CloneAndPrepend("response could not be sent").ToString());
    answer = {true, err.SerializeAsString(), {}};
    s = EncodeAnswer(call_id(), answer, &frame);
    if (!s.ok()) return;
  }
  recorded_ = true;
  // Stored before it is sent: a retry that follows the answer finds it. An
  // error is not stored, as Kudu's FailAndRespond: its retry runs again.
  result_tracker_->Record(tracked_key_, answer, handler_started_ && !answer.is_error);
  SendAnswer(answer, std::move(frame));
}

void InboundCall::RespondStored(const ResultTracker::Answer& answer) {
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = EncodeAnswer(call_id(), answer, &frame);
  if (!s.ok()) {
    LOG(ERROR) << "cannot encode the stored answer to call " << call_id() << ": " << s.ToString();
    return;
  }
  SendAnswer(answer, std::move(frame));
}

void InboundCall::SendAnswer(const ResultTracker::Answer& answer,
                             std::unique_ptr<wire::OutboundFrame> frame) {
  wire::ErrorStatusPB::RpcErrorCodePB code = wire::ErrorStatusPB::ERROR_APPLICATION;
  if (answer.is_error) {
    wire::ErrorStatusPB err;
    if (err.ParseFromString(answer.body)) code = err.code();
  }
  CountAnswer(!answer.is_error, code);
  transport::Connection::QueueResponse(conn_, call_id(), std::move(frame));
}

void InboundCall::MarkHandlerStarted(MonoTime start) {
  handler_started_ = true;
  if (trace_ != nullptr) trace_->running.store(true, std::memory_order_relaxed);
  if (metrics_ != nullptr) metrics_->queue_time->Record(start - received_at_);
}

void InboundCall::CountAnswer(bool ok, wire::ErrorStatusPB::RpcErrorCodePB code) {
  if (metrics_ != nullptr) {
    metrics_->CountOutcome(ok, code);
    // The coarse clock first (it lags by at most a few milliseconds): only
    // an answer near its deadline pays for Now().
    if (ok && deadline_ != MonoTime::Max() &&
        MonoTime::NowCoarse() + MonoDelta::FromMilliseconds(20) > deadline_ &&
        MonoTime::Now() > deadline_) {
      metrics_->answered_after_deadline->Increment();
    }
  }
  if (slow_calls_ == nullptr) return;
  // The coarse clock first: only a call near the threshold pays for Now().
  MonoDelta margin = MonoDelta::FromMilliseconds(20);
  if (MonoTime::NowCoarse() - received_at_ + margin < slow_calls_->threshold()) return;
  const std::string* label = trace_ != nullptr ? trace_->method.load() : nullptr;
  std::string method = metrics_ != nullptr ? metrics_->method() : label != nullptr ? *label : "";
  slow_calls_->MaybeRecord(/*inbound=*/true, method, remote_address(), remote_user(),
                           MonoTime::Now() - received_at_,
                           ok ? "ok" : wire::ErrorStatusPB::RpcErrorCodePB_Name(code));
}

void InboundCall::RespondSuccess(const google::protobuf::MessageLite& response,
                                 std::vector<std::string> sidecars) {
  if (result_tracker_ != nullptr) {
    RecordAndRespond({false, response.SerializeAsString(), std::move(sidecars)});
    return;
  }
  // is_error is written even when false: Kudu does, and we match it byte
  // for byte.
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s =
      wire::OutboundFrame::EncodeResponse(call_id(), false, response, std::move(sidecars), &frame);
  if (!s.ok()) {
    RespondFailure(wire::ErrorStatusPB::ERROR_APPLICATION,
                   s.CloneAndPrepend("response could not be sent"));
    return;
  }
  CountAnswer(true, wire::ErrorStatusPB::ERROR_APPLICATION);
  transport::Connection::QueueResponse(conn_, call_id(), std::move(frame));
}

void InboundCall::RespondFailure(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& status) {
  wire::ErrorStatusPB err;
  err.set_message(status.ToString());
  err.set_code(code);
  RespondError(err);
}

void InboundCall::RespondUnsupportedFeatures(const std::vector<uint32_t>& unsupported) {
  std::string list;
  for (uint32_t f : unsupported) list += (list.empty() ? "" : ", ") + std::to_string(f);
  wire::ErrorStatusPB err;
  err.set_message("unsupported feature flags: service " +
                  std::string(remote_method().service_name()) + " does not support " + list);
  err.set_code(wire::ErrorStatusPB::ERROR_INVALID_REQUEST);
  for (uint32_t f : unsupported) err.add_unsupported_feature_flags(f);
  RespondError(err);
}

void InboundCall::RespondError(const wire::ErrorStatusPB& error) {
  if (result_tracker_ != nullptr) {
    RecordAndRespond({true, error.SerializeAsString(), {}});
    return;
  }
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = wire::OutboundFrame::EncodeResponse(call_id(), true, error, {}, &frame);
  SendErrorFrame(error.code(), s, std::move(frame));
}

void InboundCall::RespondSerializedError(wire::ErrorStatusPB::RpcErrorCodePB code,
                                         std::shared_ptr<const std::string> error_pb) {
  if (result_tracker_ != nullptr) {
    RecordAndRespond({true, *error_pb, {}});
    return;
  }
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s =
      wire::OutboundFrame::EncodeSharedResponse(call_id(), true, std::move(error_pb), &frame);
  SendErrorFrame(code, s, std::move(frame));
}

void InboundCall::SendErrorFrame(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& encoded,
                                 std::unique_ptr<wire::OutboundFrame> frame) {
  if (!encoded.ok()) {
    LOG(ERROR) << "cannot encode error response for call " << call_id() << ": "
               << encoded.ToString();
    return;
  }
  CountAnswer(false, code);
  transport::Connection::QueueResponse(conn_, call_id(), std::move(frame));
}

}  // namespace osprey
