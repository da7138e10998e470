#include "osprey/rpc/rpc_controller.h"

#include <glog/logging.h>

#include "osprey/rpc/outbound_call.h"
#include "osprey/wire/frame.h"

namespace osprey {

RpcController::RpcController() = default;
RpcController::~RpcController() = default;

void RpcController::set_timeout(MonoDelta timeout) {
  MutexLock l(mu_);
  timeout_ = timeout;
  deadline_ = MonoTime::Max();
}

void RpcController::set_deadline(MonoTime deadline) {
  MutexLock l(mu_);
  deadline_ = deadline;
  timeout_ = MonoDelta();
}

MonoDelta RpcController::timeout() const {
  MutexLock l(mu_);
  return timeout_;
}

Status RpcController::AddOutboundSidecar(std::string data, int* idx) {
  MutexLock l(mu_);
  if (call_) return Status::IllegalState("cannot add a sidecar while a call is in flight");
  if (outbound_sidecars_.size() >= wire::kMaxSidecars) {
    return Status::InvalidArgument("a call may carry at most " +
                                   std::to_string(wire::kMaxSidecars) +
                                   " sidecars (Kudu's limit; a peer refuses more)");
  }
  outbound_sidecars_.push_back(std::move(data));
  if (idx) *idx = static_cast<int>(outbound_sidecars_.size()) - 1;
  return Status::OK();
}

void RpcController::Cancel() {
  std::shared_ptr<OutboundCall> call, hedge;
  {
    MutexLock l(mu_);
    // Kept for a retry that replaces call_ after this: see Retrying().
    if (call_) cancelled_ = true;
    call = call_;
    hedge = hedge_call_;
  }
  if (call) call->Cancel();
  if (hedge) hedge->Cancel();
}

Status RpcController::status() const {
  MutexLock l(mu_);
  return status_;
}

bool RpcController::finished() const {
  MutexLock l(mu_);
  return finished_;
}

const wire::ErrorStatusPB* RpcController::error_response() const {
  MutexLock l(mu_);
  return error_.get();
}

int RpcController::num_inbound_sidecars() const {
  MutexLock l(mu_);
  return static_cast<int>(inbound_sidecars_.size());
}

Status RpcController::GetInboundSidecar(int idx, Slice* out) const {
  MutexLock l(mu_);
  if (idx < 0 || static_cast<size_t>(idx) >= inbound_sidecars_.size()) {
    return Status::InvalidArgument("no response sidecar " + std::to_string(idx) + "; there are " +
                                   std::to_string(inbound_sidecars_.size()));
  }
  *out = inbound_sidecars_[idx];
  return Status::OK();
}

Status RpcController::set_retry_policy(const RetryPolicy& policy) {
  OSPREY_RETURN_NOT_OK(policy.Validate());
  MutexLock l(mu_);
  retry_policy_ = policy;
  return Status::OK();
}

void RpcController::set_idempotent(bool idempotent) {
  MutexLock l(mu_);
  idempotent_ = idempotent;
}

void RpcController::set_hash_key(uint64_t key) {
  MutexLock l(mu_);
  hash_key_ = key;
}

Sockaddr RpcController::server() const {
  MutexLock l(mu_);
  return server_;
}

int RpcController::attempts() const {
  MutexLock l(mu_);
  return attempts_;
}

int RpcController::attempts_sent() const {
  MutexLock l(mu_);
  return attempts_sent_;
}

bool RpcController::Hedging(const std::shared_ptr<OutboundCall>& hedge) {
  MutexLock l(mu_);
  hedge_call_ = hedge;
  return cancelled_;
}

RpcController::Hedge RpcController::hedge() const {
  MutexLock l(mu_);
  return hedge_;
}

bool RpcController::Retrying(const std::shared_ptr<OutboundCall>& next) {
  MutexLock l(mu_);
  call_ = next;
  return cancelled_;
}

void RpcController::Reset() {
  MutexLock l(mu_);
  CHECK(!call_) << "RpcController::Reset() while a call is in flight";
  retry_policy_.reset();
  idempotent_ = false;
  hash_key_ = 0;
  server_ = Sockaddr();
  attempts_ = 0;
  attempts_sent_ = 0;
  hedge_ = Hedge::kNone;
  timeout_ = MonoDelta();
  deadline_ = MonoTime::Max();
  outbound_sidecars_.clear();
  required_server_features_.clear();
  finished_ = false;
  cancelled_ = false;
  status_ = Status::OK();
  error_.reset();
  sidecar_storage_.reset();
  inbound_sidecars_.clear();
}

RpcController::CallStart RpcController::StartCall(const std::shared_ptr<OutboundCall>& call) {
  MutexLock l(mu_);
  CHECK(!call_) << "RpcController used for a second call while the first is in flight";
  call_ = call;
  hedge_call_.reset();
  hedge_ = Hedge::kNone;
  finished_ = false;
  cancelled_ = false;
  status_ = Status::OK();
  error_.reset();
  sidecar_storage_.reset();
  inbound_sidecars_.clear();
  if (!deadline_.IsMax()) {
    call->set_deadline(deadline_);
  } else if (timeout_ > MonoDelta()) {
    call->set_deadline(MonoTime::Now() + timeout_);
  }
  if (!required_server_features_.empty()) call->set_required_features(required_server_features_);
  return {std::move(outbound_sidecars_), retry_policy_, idempotent_, hash_key_};
}

void RpcController::RequireServerFeature(uint32_t feature) {
  MutexLock l(mu_);
  for (uint32_t f : required_server_features_) {
    if (f == feature) return;
  }
  required_server_features_.push_back(feature);
}

std::vector<uint32_t> RpcController::required_server_features() const {
  MutexLock l(mu_);
  return required_server_features_;
}

void RpcController::Finish(const Status& status, std::unique_ptr<wire::ErrorStatusPB> error,
                           std::shared_ptr<const uint8_t[]> sidecar_storage,
                           std::vector<Slice> sidecars, int attempts, int attempts_sent,
                           const Sockaddr& server, Hedge hedge) {
  MutexLock l(mu_);
  server_ = server;
  hedge_ = hedge;
  attempts_ = attempts;
  attempts_sent_ = attempts_sent;
  status_ = status;
  error_ = std::move(error);
  sidecar_storage_ = std::move(sidecar_storage);
  inbound_sidecars_ = std::move(sidecars);
  outbound_sidecars_.clear();
  finished_ = true;
  call_.reset();
  hedge_call_.reset();
}

}  // namespace osprey
