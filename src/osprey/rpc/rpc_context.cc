#include "osprey/rpc/rpc_context.h"

#include <glog/logging.h>
#include <google/protobuf/unknown_field_set.h>

#include "osprey/rpc/inbound_call.h"
#include "osprey/rpc/message_pool.h"
#include "osprey/wire/frame.h"

namespace osprey {

RpcContext::RpcContext(std::unique_ptr<InboundCall> call,
                       std::unique_ptr<google::protobuf::Message> request,
                       std::unique_ptr<google::protobuf::Message> response)
    : call_(std::move(call)), request_(std::move(request)), response_(std::move(response)) {}

RpcContext::~RpcContext() {
  if (request_pool_ != nullptr) {
    request_pool_->Give(std::move(request_), request_bytes_, request_reused_);
  }
  if (response_pool_ != nullptr) {
    response_pool_->Give(std::move(response_), response_bytes_, response_reused_);
  }
}

void RpcContext::UsePools(MessagePool* requests, size_t request_bytes, bool request_reused,
                          MessagePool* responses, bool response_reused) {
  request_pool_ = requests;
  request_bytes_ = request_bytes;
  request_reused_ = request_reused;
  response_pool_ = responses;
  response_reused_ = response_reused;
}

bool RpcContext::BeginResponse(const char* which) {
  if (!responded_.exchange(true, std::memory_order_acq_rel)) return true;
  LOG(ERROR) << "second response (" << which << ") to call " << call_->call_id() << " of "
             << call_->remote_method().service_name() << "." << call_->remote_method().method_name()
             << " ignored";
  DCHECK(false) << "RpcContext answered twice";
  return false;
}

void RpcContext::Release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void RpcContext::AnswerIfUnanswered(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& why) {
  if (!responded_.exchange(true, std::memory_order_acq_rel)) {
    call_->RespondFailure(code, why);
    Release();
  }
}

void RpcContext::HandlerDone(const char* exception) {
  if (exception != nullptr) {
    std::string what = std::string(call_->remote_method().service_name()) + "." +
                       std::string(call_->remote_method().method_name()) +
                       " handler threw an exception: " + exception;
    LOG(ERROR) << what;
    // Answered already, the answer stands; if not, the exception is it.
    AnswerIfUnanswered(wire::ErrorStatusPB::ERROR_APPLICATION, Status::IllegalState(what));
  }
  Release();
}

void RpcContext::RespondSuccess() {
  if (!BeginResponse("RespondSuccess")) return;
  if (!response_->IsInitialized()) {
    call_->RespondFailure(wire::ErrorStatusPB::ERROR_APPLICATION,
                          Status::IllegalState("handler's response lacks required fields: " +
                                               response_->InitializationErrorString()));
  } else {
    call_->RespondSuccess(*response_, std::move(outbound_sidecars_));
    // Serializing it cached its size.
    response_bytes_ = static_cast<size_t>(response_->GetCachedSize());
  }
  Release();
}

void RpcContext::RespondFailure(const Status& status) {
  RespondRpcFailure(wire::ErrorStatusPB::ERROR_APPLICATION, status);
}

void RpcContext::RespondRpcFailure(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& status) {
  if (!BeginResponse("RespondRpcFailure")) return;
  call_->RespondFailure(code, status);
  Release();
}

void RpcContext::RespondApplicationError(int error_ext_id, const std::string& message,
                                         const google::protobuf::MessageLite& app_error) {
  if (!BeginResponse("RespondApplicationError")) return;
  wire::ErrorStatusPB err;
  err.set_message(message);
  err.set_code(wire::ErrorStatusPB::ERROR_APPLICATION);
  // Carried as the extension's bytes: the client parses it with the
  // extension its own generated code declares.
  err.GetReflection()->MutableUnknownFields(&err)->AddLengthDelimited(
      error_ext_id, app_error.SerializeAsString());
  call_->RespondError(err);
  Release();
}

Status RpcContext::AddOutboundSidecar(std::string data, int* idx) {
  if (outbound_sidecars_.size() >= wire::kMaxSidecars) {
    return Status::InvalidArgument("a response may carry at most " +
                                   std::to_string(wire::kMaxSidecars) +
                                   " sidecars (Kudu's limit; a peer refuses more)");
  }
  outbound_sidecars_.push_back(std::move(data));
  if (idx) *idx = static_cast<int>(outbound_sidecars_.size()) - 1;
  return Status::OK();
}

int RpcContext::num_inbound_sidecars() const { return static_cast<int>(call_->sidecars().size()); }

Status RpcContext::GetInboundSidecar(int idx, Slice* out) const {
  if (idx < 0 || static_cast<size_t>(idx) >= call_->sidecars().size()) {
    return Status::InvalidArgument("no request sidecar " + std::to_string(idx) + "; there are " +
                                   std::to_string(call_->sidecars().size()));
  }
  *out = call_->sidecars()[idx];
  return Status::OK();
}

const Sockaddr& RpcContext::remote_address() const { return call_->remote_address(); }
const std::string& RpcContext::remote_user() const { return call_->remote_user(); }
const wire::RequestIdPB* RpcContext::request_id() const {
  // Set (with every required field: it parsed) only for a tracked method.
  return call_->request_id().has_client_id() ? &call_->request_id() : nullptr;
}
const std::string& RpcContext::remote_principal() const {
  return call_->remote_identity().principal;
}
AuthenticationMethod RpcContext::authentication_method() const {
  return call_->remote_identity().method;
}
MonoTime RpcContext::GetClientDeadline() const { return call_->deadline(); }

}  // namespace osprey
