// RpcContext: the server-side handle of one call, given to a service
// method's handler. It owns the request and response messages. One
// Respond* call completes it, from any thread, before or after the handler
// returns. The context lives until both the handler has returned and the
// call was answered: a second Respond* while the handler still runs is
// ignored and logged (a DCHECK in assertion builds), and a handler that
// throws has its call answered with a RemoteError naming the exception.
// Once the handler has returned, the one response frees the context: touch
// nothing of it after.
#pragma once

#include <google/protobuf/message.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/connection_types.h"
#include "osprey/base/monotime.h"
#include "osprey/base/slice.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

class InboundCall;
class MessagePool;

class RpcContext {
 public:
  RpcContext(std::unique_ptr<InboundCall> call, std::unique_ptr<google::protobuf::Message> request,
             std::unique_ptr<google::protobuf::Message> response);
  ~RpcContext();

  // Sends the response message (and any sidecars added).
  void RespondSuccess();
  // Sends an ERROR_APPLICATION error carrying `status` as its message.
  void RespondFailure(const Status& status);
  // Sends an RPC-level error with the given code.
  void RespondRpcFailure(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& status);
  // Sends ERROR_APPLICATION with `app_error` as extension field number
  // `error_ext_id` (100 and up) of ErrorStatusPB, as Kudu's services do.
  void RespondApplicationError(int error_ext_id, const std::string& message,
                               const google::protobuf::MessageLite& app_error);

  // Response sidecars; *idx is the index the client reads it at.
  Status AddOutboundSidecar(std::string data, int* idx);
  // Request sidecars, valid while the context lives.
  int num_inbound_sidecars() const;
  Status GetInboundSidecar(int idx, Slice* out) const;

  const Sockaddr& remote_address() const;
  // The caller's local user name: the name SASL PLAIN sent (proving
  // nothing), or the Kerberos principal mapped to a local name.
  const std::string& remote_user() const;
  // The caller's Kerberos principal ("alice@EXAMPLE.COM"); empty unless
  // it authenticated with Kerberos.
  const std::string& remote_principal() const;
  // How the caller proved who it is.
  AuthenticationMethod authentication_method() const;
  // When the client stops waiting; MonoTime::Max() if it set no timeout.
  MonoTime GetClientDeadline() const;
  // An exactly-once call's request id (a method with track_rpc_result),
  // as Kudu's RpcContext::request_id(): the client id and sequence number
  // that name the request across its retries; null for other calls. The
  // server's memory of answers is its process's: a handler whose effects
  // outlive the process stores this id with them, and checks it, so that
  // the retry a restarted server does not remember does not run twice.
  const wire::RequestIdPB* request_id() const;

  const google::protobuf::Message* request_pb() const { return request_.get(); }
  google::protobuf::Message* response_pb() { return response_.get(); }

 private:
  friend class ServiceIf;  // Handle() and TrackAuthorized() drive the context
  // True for the first response only; logs the others.
  bool BeginResponse(const char* which);
  // Drops one of the two references (the handler's, the response's).
  void Release();
  // The handler returned or threw (`exception`: its what(), or null).
  void HandlerDone(const char* exception);
  // Answers with `code` and `why` unless the call was answered already.
  void AnswerIfUnanswered(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& why);
  // The messages go back to these pools (which outlive the call, as its
  // service does) when the context ends; the request was `request_bytes`
  // on the wire.
  void UsePools(MessagePool* requests, size_t request_bytes, bool request_reused,
                MessagePool* responses, bool response_reused);

  std::atomic<bool> responded_{false};
  std::atomic<int> refs_{2};
  std::unique_ptr<InboundCall> call_;
  std::unique_ptr<google::protobuf::Message> request_;
  std::unique_ptr<google::protobuf::Message> response_;
  std::vector<std::string> outbound_sidecars_;
  MessagePool* request_pool_ = nullptr;
  MessagePool* response_pool_ = nullptr;
  size_t request_bytes_ = 0;
  size_t response_bytes_ = 0;    // as sent; 0: no response message was sent
  bool request_reused_ = false;  // taken from its pool
  bool response_reused_ = false;
};

}  // namespace osprey
