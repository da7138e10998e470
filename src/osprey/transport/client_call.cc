#include "osprey/transport/client_call.h"

#include "osprey/transport/reactor.h"

namespace osprey::transport {

void ClientCall::ReleaseTransportState() {
  if (timer_id_ && reactor_ != nullptr) reactor_->CancelTimer(timer_id_);
  timer_id_ = {};
  conn_ = nullptr;
}

MonoTime ClientCall::LoopTime() const {
  return reactor_ != nullptr ? reactor_->loop_time() : MonoTime::Now();
}

bool ClientCall::Finish(const Status& status) {
  if (finished_) return false;
  finished_ = true;
  ReleaseTransportState();
  OnFailure(status);
  return true;
}

bool ClientCall::FinishWithResponse(wire::InboundResponse frame) {
  if (finished_) return false;
  finished_ = true;
  ReleaseTransportState();
  OnResponse(std::move(frame));
  return true;
}

}  // namespace osprey::transport
