// ClientCall: what a client connection carries for one call: a request frame
// out and one completion in. The rpc layer's OutboundCall implements it.
//
// Once a reactor took the call (Reactor::AssignCall), its transport state
// (connection, call id, deadline timer) is that reactor's, under its loop
// lock: on its thread, or on a thread acting in its place (a sender that
// borrowed it, a blocking caller reading its own answer); the analysis
// checks it (GUARDED_BY, AssertOnReactor). Any thread: finished(),
// RequestCancel(), cancel_requested(). Before it is queued, the caller
// sets it up (the set_ methods) and, if no reactor takes it, fails it on
// its own thread (FailUnsent). The call completes exactly once,
// whichever comes first of its response, its deadline, a cancel, or the
// failure of its connection; its user callback runs on the reactor thread
// itself (Finish says how).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/transport/connection_key.h"
#include "osprey/transport/reactor.h"
#include "osprey/transport/timer_id.h"
#include "osprey/wire/frame.h"
#include "osprey/wire/frame_encoder.h"

namespace osprey::transport {

class Connection;
class Reactor;
struct InboundCallTrace;

class ClientCall : public std::enable_shared_from_this<ClientCall> {
 public:
  virtual ~ClientCall() = default;

  // Serializes the request frame with the call id the connection chose.
  virtual Status BuildRequestFrame(int32_t call_id, std::unique_ptr<wire::OutboundFrame>* out) = 0;
  // Exactly one of these two runs, once: under the loop lock, or for a
  // call no reactor took, OnFailure on the thread of FailUnsent.
  virtual void OnResponse(wire::InboundResponse frame) = 0;
  virtual void OnFailure(const Status& status) = 0;
  // For error messages: "kudu.rpc_test.CalculatorService.Add".
  virtual std::string Describe() const = 0;
  // The call's own timer (ArmCallTimer) fired, before the call finished.
  // Under the loop lock, on its reactor's thread.
  virtual void OnCallTimer() {}

  MonoTime deadline() const { return deadline_; }
  // Where the call goes: set by the caller before it is queued; its
  // reactor moves it to the next fallback address when one is taken. Read
  // on the reactor thread, or by the caller before the call is queued.
  const ConnectionKey& destination() const { return destination_; }
  void set_destination(ConnectionKey d) { destination_ = std::move(d); }
  // When the caller made the call, if anything watches it (metrics,
  // /rpcz): stamped only then, from the loop time when the caller is a
  // reactor thread (a callback making the next call).
  MonoTime started() const { return started_; }
  void mark_started();
  void set_deadline(MonoTime d) { deadline_ = d; }

  // Any thread. True once the call completed (or began to): exactly one of
  // Finish and FinishWithResponse wins, by an atomic exchange.
  bool finished() const { return finished_.load(std::memory_order_acquire); }

  // For a call no reactor took (the messenger is shut down, the request is
  // invalid): completes it on the calling thread.
  void FailUnsent(const Status& status) { Finish(status); }

  // Any thread: the caller asked to cancel. Sticky, so that a reactor that
  // receives the call after a Cancel() whose abort found no reactor yet
  // still aborts it (AssignCall checks it).
  void RequestCancel() { cancel_requested_.store(true); }
  bool cancel_requested() const { return cancel_requested_.load(); }

  // Before the call is queued: its completion runs no user code (a sync
  // call's is a latch), so a borrowing thread may run it itself instead of
  // waking the reactor for it.
  void set_completion_runs_no_user_code() { no_user_code_ = true; }
  bool completion_runs_no_user_code() const { return no_user_code_; }
  void set_started(MonoTime t) { started_ = t; }

  // Before the call is queued: where to go next, in order, if no
  // connection can be made to the address it was queued for (nothing of it
  // was sent, so trying another address is always safe). The other
  // addresses of the name it was made for.
  void set_fallbacks(std::shared_ptr<const std::vector<Sockaddr>> addresses, size_t next) {
    fallbacks_ = std::move(addresses);
    next_fallback_ = next;
  }

 protected:
  // The owning reactor's loop time (reactor thread), or the clock.
  MonoTime LoopTime() const;
  // Reactor thread: the request was handed to a connection to send, so the
  // server may have it.
  bool may_have_reached_server() const {
    AssertOnReactor();
    return call_id_ >= 0;
  }
  Reactor* reactor() const { return reactor_; }
  // Reactor thread: the serial (Connection::serial()) of the connection
  // whose close failed the call, if that connection had connected (sent
  // or held the request, the server up); 0 otherwise (it never connected,
  // or the call ended another way).
  uint64_t lost_with() const {
    AssertOnReactor();
    return lost_with_;
  }
  // Under the loop lock of the reactor that took the call: OnCallTimer
  // runs at `when` on its thread, unless the call finished first (the
  // timer goes when it finishes, as its deadline's does; no allocation).
  // One at a time; false if one is armed already. The rpc layer's hedge.
  bool ArmCallTimer(MonoTime when);

 private:
  friend class Connection;
  friend class Reactor;

  // Marks the call done and runs its completion, exactly once: false if it
  // already was. On a thread that borrows the reactor (TryRunHere) the
  // completion, and so the user's callback, is handed to the reactor
  // thread instead: the borrower holds the loop lock, and a callback that
  // blocked on the reactor there would deadlock it. Unless the completion
  // runs no user code.
  bool Finish(const Status& status);
  bool FinishWithResponse(wire::InboundResponse frame);
  void ReleaseTransportState();
  // Checks (in assertion builds) that this thread holds the loop lock of
  // the call's reactor, and tells the analysis so: the transport fields
  // below are that lock's. Before a reactor took the call there is none
  // to check, and those fields are still as constructed.
  void AssertOnReactor() const OSPREY_ASSERT_CAPABILITY(reactor_->loop_mu_) {
    if (reactor_ != nullptr) reactor_->AssertCurrentThread();
  }
  // Reactor thread: makes the next fallback address, if any is left, the
  // destination.
  bool TakeFallback() {
    if (fallbacks_ == nullptr || next_fallback_ >= fallbacks_->size()) return false;
    destination_.remote = (*fallbacks_)[next_fallback_++];
    return true;
  }

  ConnectionKey destination_;
  MonoTime deadline_ = MonoTime::Max();
  MonoTime started_;
  std::atomic<bool> finished_{false};
  std::atomic<bool> cancel_requested_{false};
  bool no_user_code_ = false;
  // Set by the reactor that takes the call (Reactor::AssignCall), on its
  // thread, before any other thread may finish it; the same reactor for
  // every address the call tries.
  Reactor* reactor_ = nullptr;
  // Written by that reactor and its connection (friends), under its loop
  // lock, which the analysis checks: AssertOnReactor() where the lock
  // held is not provably the call's reactor's.
  Connection* conn_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = nullptr;  // the connection it waits on
  int32_t call_id_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = -1;
  uint64_t lost_with_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = 0;
  TimerId timer_id_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  TimerId call_timer_ OSPREY_GUARDED_BY(reactor_->loop_mu_);  // ArmCallTimer's
  MonoDelta timeout_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::shared_ptr<const std::vector<Sockaddr>> fallbacks_;
  size_t next_fallback_ = 0;
};

// Receives server-side request frames from connections (the Messenger).
class InboundCallHandler {
 public:
  virtual ~InboundCallHandler() = default;
  // Reactor thread of `conn`.
  // `trace`: what /rpcz shows of the call, if calls are tracked, else null;
  // owned by `conn` (see InboundCallTrace).
  virtual void HandleInboundCall(const std::shared_ptr<Connection>& conn,
                                 wire::InboundRequest frame, InboundCallTrace* trace) = 0;
  // The thread that called HandleInboundCall: the calls of one read have
  // all been handed over. A handler may hold calls back until then, to
  // queue them together; it must not hold them past this.
  virtual void EndOfInboundCalls() {}
  // Reactor thread of `conn`, a server connection that closed with calls
  // not answered yet: those still waiting to run can be let go.
  virtual void ConnectionClosed(const Connection* conn) { (void)conn; }
};

}  // namespace osprey::transport
