#include "osprey/transport/client_call.h"

#include "osprey/transport/reactor.h"

namespace osprey::transport {

void ClientCall::ReleaseTransportState() {
  // A call no reactor took has no transport state; the reactor's own
  // fields are its thread's alone.
  if (reactor_ == nullptr) return;
  reactor_->AssertCurrentThread();
  if (timer_id_) reactor_->CancelTimer(timer_id_);
  timer_id_ = {};
  conn_ = nullptr;
}

void ClientCall::mark_started() { started_ = Reactor::LoopTimeOrNow(); }

MonoTime ClientCall::LoopTime() const {
  return reactor_ != nullptr ? reactor_->loop_time() : MonoTime::Now();
}

bool ClientCall::Finish(const Status& status) {
  if (finished_.exchange(true, std::memory_order_acq_rel)) return false;
  ReleaseTransportState();
  if (reactor_ != nullptr && !no_user_code_ && reactor_->OnBorrowingThread()) {
    // The reactor is awake after the borrow ends: EndBorrow wakes it for
    // what was scheduled, and it cannot stop while we hold its loop, so
    // Schedule cannot refuse; if it ever did, completing here beats never.
    if (reactor_->Schedule([self = shared_from_this(), status] { self->OnFailure(status); })) {
      return true;
    }
  }
  OnFailure(status);
  return true;
}

bool ClientCall::FinishWithResponse(wire::InboundResponse frame) {
  if (finished_.exchange(true, std::memory_order_acq_rel)) return false;
  ReleaseTransportState();
  if (reactor_ != nullptr && !no_user_code_ && reactor_->OnBorrowingThread()) {
    auto f = std::make_shared<wire::InboundResponse>(std::move(frame));
    if (reactor_->Schedule([self = shared_from_this(), f] { self->OnResponse(std::move(*f)); })) {
      return true;
    }
    frame = std::move(*f);
  }
  OnResponse(std::move(frame));
  return true;
}

}  // namespace osprey::transport
