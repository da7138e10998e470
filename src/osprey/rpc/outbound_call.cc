#include "osprey/rpc/outbound_call.h"

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

OutboundCall::~OutboundCall() = default;

std::string OutboundCall::Describe() const {
  return method_->service() + "." + method_->method() + " RPC";
}

Status OutboundCall::BuildRequestFrame(int32_t call_id, std::unique_ptr<wire::OutboundFrame>* out) {
  uint32_t timeout_ms = 0;  // none
  if (!deadline().IsMax()) {
    int64_t ms = (deadline() - LoopTime()).ToMilliseconds();
    timeout_ms = static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, UINT32_MAX));
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
  Status s = wire::OutboundFrame::EncodeRequest(call_id, method_->serialized_pb(), timeout_ms,
                                                required_features_, Slice(request_id),
                                                serialized_request_, std::move(sidecars_), out);
  serialized_request_.clear();
  serialized_request_.shrink_to_fit();
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
  if (!response_->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    Complete(
        Status::IOError(Describe() + ": response does not parse as " + response_->GetTypeName() +
                        ": " + response_->InitializationErrorString()),
        nullptr, nullptr, {});
    return;
  }
  Complete(Status::OK(), nullptr, std::move(frame.storage), std::move(frame.sidecars));
}

void OutboundCall::OnFailure(const Status& status) { Complete(status, nullptr, nullptr, {}); }

void OutboundCall::set_observers(ClientMethodMetrics* metrics, SlowCallLog* slow_calls,
                                 const Sockaddr& remote, const std::string& user) {
  metrics_ = metrics;
  slow_calls_ = slow_calls;
  if (metrics_ != nullptr || slow_calls_ != nullptr) mark_started();
  if (metrics_ != nullptr) metrics_->started->Increment();
  if (slow_calls_ != nullptr) {
    remote_ = remote;
    user_ = user;
  }
}

void OutboundCall::Complete(const Status& status, std::unique_ptr<wire::ErrorStatusPB> error,
                            std::shared_ptr<const uint8_t[]> storage, std::vector<Slice> sidecars) {
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
                               remote_, user_, took,
                               status.ok() ? "ok" : Status::CodeName(status.code()));
    }
  }
  if (resolution_ != nullptr && status.IsNetworkError()) resolution_->MarkStale();
  if (request_tracker_ != nullptr) request_tracker_->End(seq_no_);
  ResponseCallback cb = std::move(callback_);
  controller_->Finish(status, std::move(error), std::move(storage), std::move(sidecars));
  cb();
}

void OutboundCall::Cancel() {
  // Either this load sees the reactor, or the reactor's AssignCall, which
  // comes after the reactor was stored, sees the request (both seq_cst).
  RequestCancel();
  transport::Reactor* r = cancel_reactor_.load();
  if (r == nullptr) return;
  r->AbortCall(shared_from_this(), Status::Aborted(Describe() + " cancelled"));
}

}  // namespace osprey
