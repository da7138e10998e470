// Messenger::InboundHandler: where the reactors hand the calls they read,
// held per thread until the end of a read and then queued to their
// services' pools in one go (split from messenger.cc, issue 48).
#include "osprey/rpc/messenger_inbound.h"

#include <glog/logging.h>

#include <vector>

#include "osprey/rpc/inbound_call.h"
#include "osprey/rpc/messenger_metrics.h"
#include "osprey/rpc/service_pool.h"
#include "osprey/transport/connection.h"

namespace osprey {

namespace {

// The calls for workers that one read of a connection brought, queued
// together at its end (InboundCallHandler::EndOfInboundCalls) with one lock
// of their service's queue rather than one each. Per thread: reactors, and
// workers reading their own connection, decode requests. At most
// kMaxHeldCalls, and never held past the read.
struct HeldCalls {
  std::shared_ptr<ServicePool> pool;
  std::vector<std::unique_ptr<InboundCall>> calls;
};
thread_local HeldCalls tls_held_calls;
constexpr size_t kMaxHeldCalls = 64;

void QueueHeldCalls() {
  HeldCalls& held = tls_held_calls;
  if (held.calls.empty()) return;
  std::shared_ptr<ServicePool> pool = std::move(held.pool);
  held.pool.reset();
  pool->QueueInboundCalls(&held.calls);
}

// ERROR_UNAVAILABLE: retried by Kudu's client as by ours, which moves it
// to another server of its set; the text says it did not run.
std::shared_ptr<const std::string> DrainRefusal(const Messenger* m) {
  return std::make_shared<const std::string>(
      "server " + m->name() + " is draining: this call did not run; send it to another server");
}

void RefuseWhileDraining(const Messenger* m, InboundCall* call) {
  call->RespondFailure(wire::ErrorStatusPB::ERROR_UNAVAILABLE,
                       Status::ServiceUnavailable(*DrainRefusal(m)));
}

}  // namespace

void Messenger::InboundHandler::EndOfInboundCalls() { QueueHeldCalls(); }

void Messenger::InboundHandler::HandleInboundCall(
    const std::shared_ptr<transport::Connection>& conn, wire::InboundRequest frame,
    transport::InboundCallTrace* trace) {
  Messenger* m = m_;
  auto call = std::make_unique<InboundCall>(conn, std::move(frame));
  if (trace != nullptr) call->set_trace(trace);
  const bool draining = m->draining_.load(std::memory_order_relaxed);
  if (draining) {
    m->last_drain_refusal_ns_.store((conn->reactor()->loop_time() - MonoTime()).ToNanoseconds());
    // A retry of a request this server may have run is answered from its
    // memory (below, once its method is known to track results): refused
    // here, a call whose answer a cut lost could only fail.
    if (!call->has_request_id()) {
      RefuseWhileDraining(m, call.get());
      return;
    }
  }
  std::string_view service_name = call->remote_method().service_name();
  std::shared_ptr<ServicePool> pool;
  HeldCalls& held = tls_held_calls;
  if (held.pool != nullptr && held.pool->service()->service_name() == service_name) {
    pool = held.pool;  // a service is never unregistered: no need to look again
  } else {
    MutexLock l(m->mu_);
    auto it = m->services_.find(service_name);
    if (it != m->services_.end()) pool = it->second;
  }
  if (!pool) {
    call->RespondFailure(wire::ErrorStatusPB::ERROR_NO_SUCH_SERVICE,
                         Status::NotFound("service " + std::string(service_name) +
                                          " is not registered on " + m->name_));
    return;
  }
  const ServiceMethod* method = pool->service()->FindMethod(call->remote_method().method_name());
  if (method == nullptr) {
    call->RespondFailure(
        wire::ErrorStatusPB::ERROR_NO_SUCH_METHOD,
        Status::NotFound("service " + std::string(service_name) + " has no method " +
                         std::string(call->remote_method().method_name())));
    return;
  }
  if (!call->required_feature_flags().empty()) {
    std::vector<uint32_t> unsupported;
    for (uint32_t f : call->required_feature_flags()) {
      if (!pool->service()->SupportsFeature(f)) unsupported.push_back(f);
    }
    if (!unsupported.empty()) {
      call->RespondUnsupportedFeatures(unsupported);
      return;
    }
  }
  const ServicePool::MethodObservers* observers = pool->ObserversFor(method);
  call->set_method(method, observers != nullptr ? observers->metrics : nullptr,
                   m->metrics_->slow_calls());
  if (call->trace() != nullptr && observers != nullptr) {
    call->trace()->method.store(&observers->label, std::memory_order_release);
  }
  // Exactly once: a retry of a request this server has seen is answered,
  // not run. (A call of such a method without a request id just runs.)
  // The id is checked here; the tracker sees the call once it is authorized.
  if (draining && !method->track_result) {
    RefuseWhileDraining(m, call.get());
    return;
  }
  if (method->track_result && call->has_request_id()) {
    wire::RequestIdPB id;
    std::string_view bytes = call->request_id_pb();
    if (!id.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      call->RespondFailure(wire::ErrorStatusPB::ERROR_INVALID_REQUEST,
                           Status::InvalidArgument("the request_id does not parse as RequestIdPB"));
      return;
    }
    // Tracked once authorized (ServiceIf::Handle), as Kudu does.
    call->set_request_id(m->result_tracker_, std::move(id));
    if (draining) call->set_refused_if_new(DrainRefusal(m));
  }
  if (!pool->has_workers()) {
    pool->QueueInboundCall(std::move(call));  // runs it here, now
    return;
  }
  if (held.pool != pool) QueueHeldCalls();
  held.pool = std::move(pool);
  held.calls.push_back(std::move(call));
  if (held.calls.size() >= kMaxHeldCalls) QueueHeldCalls();
}

void Messenger::InboundHandler::ConnectionClosed(const transport::Connection* conn) {
  std::vector<std::shared_ptr<ServicePool>> pools;
  {
    MutexLock l(m_->mu_);
    pools.reserve(m_->services_.size());
    for (const auto& [name, pool] : m_->services_) pools.push_back(pool);
  }
  for (const auto& pool : pools) pool->DropCallsOf(conn);
}

}  // namespace osprey
