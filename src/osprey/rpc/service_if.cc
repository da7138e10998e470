#include "osprey/rpc/service_if.h"

#include <exception>

#include "osprey/rpc/inbound_call.h"
#include "osprey/rpc/message_pool.h"
#include "osprey/rpc/rpc_context.h"

namespace osprey {

ServiceIf::~ServiceIf() = default;

const ServiceMethod* ServiceIf::FindMethod(std::string_view name) const {
  auto it = methods_.find(name);
  return it == methods_.end() ? nullptr : &it->second;
}

bool ServiceIf::SupportsFeature(uint32_t /*feature*/) const { return false; }

std::vector<const ServiceMethod*> ServiceIf::methods() const {
  std::vector<const ServiceMethod*> out;
  for (const auto& [name, m] : methods_) out.push_back(&m);
  return out;
}

void ServiceIf::RegisterMethod(ServiceMethod method) {
  method.request_pool = std::make_shared<MessagePool>(method.request_prototype);
  method.response_pool = std::make_shared<MessagePool>(method.response_prototype);
  std::string name = method.name;
  methods_.insert_or_assign(std::move(name), std::move(method));
}

bool ServiceIf::Authorize(const ServiceMethod& method, const google::protobuf::Message* req,
                          google::protobuf::Message* resp, RpcContext* ctx) {
  return method.authorize == nullptr || method.authorize(req, resp, ctx);
}

bool ServiceIf::TrackAuthorized(RpcContext* ctx) {
  InboundCall* call = ctx->call_.get();
  std::shared_ptr<ResultTracker> tracker = call->pending_tracker();
  // Copied first: once the tracker holds a waiting call, another thread
  // may answer and free it.
  ResultTracker::Key key{call->remote_user(), call->request_id().client_id(),
                         call->request_id().seq_no()};
  // Whose share of the tracker's memory the call spends: a user who proved
  // who they are, or, for a name the peer chose (SASL PLAIN), the peer's
  // address, which naming more users does not multiply.
  const std::string share = call->remote_identity().method == AuthenticationMethod::kPlain
                                ? "address " + call->remote_address().host()
                                : "user " + key.user;
  std::unique_ptr<TrackedCall> tracked(ctx->call_.release());
  ResultTracker::Decision d = tracker->Track(key.user, share, call->request_id(), &tracked);
  // The tracker answered the call, or holds it (then tracked is null).
  ctx->call_.reset(static_cast<InboundCall*>(tracked.release()));
  if (d == ResultTracker::Decision::kRun) {
    ctx->call_->set_tracked(std::move(key));
    if (const auto& why = ctx->call_->refused_if_new(); why != nullptr) {
      // Draining: it never ran here, and will not. The refusal is its
      // answer (not stored: the request is forgotten), and any duplicate
      // that came meanwhile gets it too.
      ctx->call_->RespondFailure(wire::ErrorStatusPB::ERROR_UNAVAILABLE,
                                 Status::ServiceUnavailable(*why));
      delete ctx;
      return false;
    }
    return true;
  }
  // Nobody else has seen this context: it ends here, without a response
  // of its own.
  delete ctx;
  return false;
}

bool ServiceIf::Handle(std::unique_ptr<InboundCall> call, MonoTime start) {
  const ServiceMethod* m = call->method();
  Slice body = call->request_body();
  bool req_reused;
  std::unique_ptr<google::protobuf::Message> req =
      m->request_pool->TakeFor(body.size(), &req_reused);
  if (!req->ParsePartialFromArray(body.data(), static_cast<int>(body.size()))) {
    call->RespondFailure(wire::ErrorStatusPB::ERROR_INVALID_REQUEST,
                         Status::InvalidArgument("request for " + service_name() + "." + m->name +
                                                 " does not parse as " + req->GetTypeName()));
    return false;
  }
  if (!req->IsInitialized()) {
    call->RespondFailure(
        wire::ErrorStatusPB::ERROR_INVALID_REQUEST,
        Status::InvalidArgument("request for " + service_name() + "." + m->name +
                                " lacks required fields: " + req->InitializationErrorString()));
    return false;
  }
  bool resp_reused;
  std::unique_ptr<google::protobuf::Message> resp = m->response_pool->Take(&resp_reused);
  call->MarkHandlerStarted(start);
  auto* ctx = new RpcContext(std::move(call), std::move(req), std::move(resp));
  ctx->UsePools(m->request_pool.get(), body.size(), req_reused, m->response_pool.get(),
                resp_reused);
  // The server keeps serving whatever a handler throws: its call is
  // answered with the exception's text, unless the handler answered first.
  try {
    if (!Authorize(*m, ctx->request_pb(), ctx->response_pb(), ctx)) {
      ctx->AnswerIfUnanswered(wire::ErrorStatusPB::FATAL_UNAUTHORIZED,
                              Status::NotAuthorized("unauthorized access to method: " + m->name));
      ctx->HandlerDone(nullptr);
      return true;
    }
    if (ctx->call_->pending_tracker() != nullptr && !TrackAuthorized(ctx)) return false;
    m->handler(ctx->request_pb(), ctx->response_pb(), ctx);
  } catch (const std::exception& e) {
    ctx->HandlerDone(e.what());
    return true;
  } catch (...) {
    ctx->HandlerDone("an exception not derived from std::exception");
    return true;
  }
  ctx->HandlerDone(nullptr);
  return true;
}

}  // namespace osprey
