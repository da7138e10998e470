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
  if (call_timer_) reactor_->CancelTimer(call_timer_);
  call_timer_ = {};
  conn_ = nullptr;
}

bool ClientCall::ArmCallTimer(MonoTime when) {
  AssertOnReactor();
  if (reactor_ == nullptr || call_timer_ || finished()) return false;
  // A raw pointer, as the deadline's: the timer is cancelled (under this
  // loop lock) when the call finishes, before it can be freed.
  call_timer_ = reactor_->ScheduleTimer(when, [this] {
    AssertOnReactor();
    call_timer_ = {};
    if (!finished()) OnCallTimer();
  });
  return true;
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
