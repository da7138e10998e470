#include "osprey/rpc/inbound_call.h"

#include <glog/logging.h>

namespace osprey {

InboundCall::InboundCall(std::shared_ptr<transport::Connection> conn, wire::InboundRequest frame)
    : conn_(std::move(conn)),
      frame_(std::move(frame)),
      received_at_(conn_->reactor()->loop_time()) {
  deadline_ = frame_.header.has_timeout_millis() && frame_.header.timeout_millis() > 0
                  ? received_at_ + MonoDelta::FromMilliseconds(frame_.header.timeout_millis())
                  : MonoTime::Max();
}

void InboundCall::RespondSuccess(const google::protobuf::MessageLite& response,
                                 std::vector<std::string> sidecars) {
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
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = wire::OutboundFrame::EncodeResponse(call_id(), true, error, {}, &frame);
  if (!s.ok()) {
    LOG(ERROR) << "cannot encode error response for call " << call_id() << ": " << s.ToString();
    return;
  }
  transport::Connection::QueueResponse(conn_, call_id(), std::move(frame));
}

}  // namespace osprey
