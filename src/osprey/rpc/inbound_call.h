// InboundCall: one request a server received, from its frame to the
// response. Created on the connection's reactor, handed (as a unique_ptr)
// to a service pool worker and then to the RpcContext; the response may be
// sent from any thread and goes back to the connection's reactor.
#pragma once

#include <google/protobuf/message.h>

#include <memory>
#include <string>
#include <vector>

#include "osprey/base/call_block_cache.h"
#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/rpc/result_tracker.h"
#include "osprey/transport/connection.h"
#include "osprey/wire/frame.h"

namespace osprey {

class ServerMethodMetrics;
class ServiceIf;
struct ServiceMethod;
class SlowCallLog;

class InboundCall : public TrackedCall {
 public:
  InboundCall(std::shared_ptr<transport::Connection> conn, wire::InboundRequest frame);
  // A tracked call destroyed unanswered (dropped unrun) releases the
  // duplicates waiting for it.
  ~InboundCall() override;
  // Made on a reactor, freed on a worker: see CallBlockCache.
  OSPREY_ALLOCATED_FROM_CALL_BLOCK_CACHE(InboundCall)

  int32_t call_id() const { return frame_.header.call_id(); }
  const wire::RequestHeaderView::RemoteMethod& remote_method() const {
    return frame_.header.remote_method();
  }
  Slice request_body() const { return frame_.main_message; }
  const std::vector<Slice>& sidecars() const { return frame_.sidecars; }
  // The application feature flags the client requires the service to support.
  const std::vector<uint32_t>& required_feature_flags() const {
    return frame_.header.required_feature_flags();
  }
  bool has_request_id() const { return frame_.header.has_request_id(); }
  std::string_view request_id_pb() const { return frame_.header.request_id_pb(); }
  // A call of a method that tracks results, with a request id: once it is
  // authorized, `tracker` decides whether it runs (ServiceIf::Handle).
  void set_request_id(std::shared_ptr<ResultTracker> tracker, wire::RequestIdPB id) {
    pending_tracker_ = std::move(tracker);
    request_id_ = std::move(id);
  }
  const std::shared_ptr<ResultTracker>& pending_tracker() const { return pending_tracker_; }
  const wire::RequestIdPB& request_id() const { return request_id_; }
  // A draining server's tracked call: answered from the tracker's memory,
  // or waiting for its first attempt, as always; but if it is new there,
  // refused with `why` (ERROR_UNAVAILABLE) instead of run.
  void set_refused_if_new(std::shared_ptr<const std::string> why) {
    refused_if_new_ = std::move(why);
  }
  const std::shared_ptr<const std::string>& refused_if_new() const { return refused_if_new_; }
  // The first attempt of a tracked request: its answer goes to the tracker
  // (stored, and sent to its waiting duplicates) before it is sent.
  void set_tracked(ResultTracker::Key key) {
    result_tracker_ = std::move(pending_tracker_);
    tracked_key_ = std::move(key);
  }
  // What the call holds: its request, with its sidecars.
  size_t memory_bytes() const override;
  const Sockaddr& remote_address() const { return conn_->remote(); }
  // Any thread: the client's connection closed, so no answer can reach it.
  bool connection_closed() const { return conn_->closed_any_thread(); }
  // Whether it came on `conn` (the calls of a connection that closed).
  bool came_on(const transport::Connection* conn) const { return conn_.get() == conn; }
  const std::string& remote_user() const { return conn_->user(); }
  const AuthenticatedIdentity& remote_identity() const { return conn_->identity(); }
  MonoTime received_at() const { return received_at_; }
  // The client's deadline (arrival + timeout_millis), or MonoTime::Max().
  MonoTime deadline() const { return deadline_; }

  const ServiceMethod* method() const { return method_; }
  // The call's method is known: from here on it is counted in `metrics`
  // (null: not counted), and answers slower than the log's threshold go to
  // `slow_calls` (null: none).
  void set_method(const ServiceMethod* m, ServerMethodMetrics* metrics, SlowCallLog* slow_calls);
  ServerMethodMetrics* metrics() const { return metrics_; }
  // Owned by conn_'s call table (see InboundCallTrace).
  void set_trace(transport::InboundCallTrace* trace) { trace_ = trace; }
  transport::InboundCallTrace* trace() const { return trace_; }
  // The handler starts now (`start`, read by the pool): counts the time in
  // the queue and shows the call as running.
  void MarkHandlerStarted(MonoTime start);

  // Each sends the one response of this call. Any thread.
  void RespondSuccess(const google::protobuf::MessageLite& response,
                      std::vector<std::string> sidecars);
  void RespondFailure(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& status) override;
  void RespondError(const wire::ErrorStatusPB& error);
  // As RespondError, with the ErrorStatusPB already serialized and shared
  // (a service queue's refusals): no serialization and no copy per call.
  void RespondSerializedError(wire::ErrorStatusPB::RpcErrorCodePB code,
                              std::shared_ptr<const std::string> error_pb);
  // ERROR_INVALID_REQUEST listing `unsupported` in unsupported_feature_flags,
  // as a Kudu server answers a call that requires flags its service lacks.
  void RespondUnsupportedFeatures(const std::vector<uint32_t>& unsupported);
  // Sends a remembered answer (ResultTracker), with this call's id.
  void RespondStored(const ResultTracker::Answer& answer) override;

 private:
  std::shared_ptr<transport::Connection> conn_;
  wire::InboundRequest frame_;
  MonoTime received_at_;
  MonoTime deadline_;
  const ServiceMethod* method_ = nullptr;
  ServerMethodMetrics* metrics_ = nullptr;
  SlowCallLog* slow_calls_ = nullptr;
  transport::InboundCallTrace* trace_ = nullptr;
  std::shared_ptr<ResultTracker> pending_tracker_;  // set_request_id, until tracked
  wire::RequestIdPB request_id_;
  std::shared_ptr<const std::string> refused_if_new_;
  std::shared_ptr<ResultTracker> result_tracker_;  // null: not tracked
  ResultTracker::Key tracked_key_;
  bool handler_started_ = false;
  bool recorded_ = false;

  // A tracked call's answer to its tracker, then to the client.
  void RecordAndRespond(ResultTracker::Answer answer);
  void SendAnswer(const ResultTracker::Answer& answer, std::unique_ptr<wire::OutboundFrame> frame);

  // Sends an error answer's frame, if `encoded` (how encoding it went) is
  // OK, and counts it.
  void SendErrorFrame(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& encoded,
                      std::unique_ptr<wire::OutboundFrame> frame);
  // Counts the answer's outcome; lists the call if it was slow.
  void CountAnswer(bool ok, wire::ErrorStatusPB::RpcErrorCodePB code);
};

}  // namespace osprey
