#include "osprey/rpc/inbound_call.h"

#include <glog/logging.h>

namespace osprey {

InboundCall::InboundCall(std::shared_ptr<transport::Connection> conn,
                         wire::InboundRequestFrame frame)
    : conn_(std::move(conn)), frame_(std::move(frame)), received_at_(MonoTime::Now()) {
  deadline_ = frame_.header.has_timeout_millis() && frame_.header.timeout_millis() > 0
                  ? received_at_ + MonoDelta::FromMilliseconds(frame_.header.timeout_millis())
                  : MonoTime::Max();
}

void InboundCall::RespondSuccess(const google::protobuf::MessageLite& response,
                                 std::vector<std::string> sidecars) {
  wire::ResponseHeader header;
  header.set_call_id(call_id());
  header.set_is_error(false);  // Kudu sets it explicitly; so do we, byte for byte.
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = wire::OutboundFrame::Encode(&header, response, std::move(sidecars), &frame);
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

void InboundCall::RespondError(const wire::ErrorStatusPB& error) {
  wire::ResponseHeader header;
  header.set_call_id(call_id());
  header.set_is_error(true);
  std::unique_ptr<wire::OutboundFrame> frame;
  Status s = wire::OutboundFrame::Encode(&header, error, {}, &frame);
  if (!s.ok()) {
    LOG(ERROR) << "cannot encode error response for call " << call_id() << ": " << s.ToString();
    return;
  }
  transport::Connection::QueueResponse(conn_, call_id(), std::move(frame));
}

}  // namespace osprey
