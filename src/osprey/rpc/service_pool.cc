#include "osprey/rpc/service_pool.h"

#include <glog/logging.h>

#include "osprey/rpc/inbound_call.h"

namespace osprey {

ServicePool::ServicePool(std::unique_ptr<ServiceIf> service, const ServicePoolOptions& options)
    : service_(std::move(service)), options_(options), not_empty_(&mu_) {}

ServicePool::~ServicePool() { Shutdown(); }

Status ServicePool::Start() {
  if (options_.worker_threads < 0) {
    return Status::InvalidArgument("worker_threads must be 0 or more, got " +
                                   std::to_string(options_.worker_threads));
  }
  if (options_.queue_length == 0) return Status::InvalidArgument("queue_length must be at least 1");
  for (int i = 0; i < options_.worker_threads; ++i) {
    workers_.emplace_back([this] { RunWorker(); });
  }
  return Status::OK();
}

void ServicePool::Shutdown() {
  std::deque<std::unique_ptr<InboundCall>> left;
  {
    MutexLock l(mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    left.swap(queue_);
  }
  not_empty_.Broadcast();
  for (auto& call : left) {
    call->RespondFailure(wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN,
                         Status::ServiceUnavailable("server is shutting down"));
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ServicePool::QueueInboundCall(std::unique_ptr<InboundCall> call) {
  if (options_.worker_threads == 0) {
    RunCall(std::move(call));
    return;
  }
  bool was_empty;
  {
    MutexLock l(mu_);
    if (shutting_down_) {
      call->RespondFailure(wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN,
                           Status::ServiceUnavailable("server is shutting down"));
      return;
    }
    if (queue_.size() >= options_.queue_length) {
      call->RespondFailure(
          wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
          Status::ServiceUnavailable("the service queue of " + service_->service_name() +
                                     " is full (" + std::to_string(options_.queue_length) +
                                     " calls); try again later"));
      return;
    }
    was_empty = queue_.empty();
    queue_.push_back(std::move(call));
  }
  // Workers only sleep on an empty queue.
  if (was_empty) not_empty_.Signal();
}

void ServicePool::RunWorker() {
  while (true) {
    std::unique_ptr<InboundCall> call;
    {
      MutexLock l(mu_);
      while (queue_.empty() && !shutting_down_) not_empty_.Wait();
      if (queue_.empty()) return;
      call = std::move(queue_.front());
      queue_.pop_front();
      // More work and other workers asleep: pass the wake-up on.
      if (!queue_.empty()) not_empty_.Signal();
    }
    RunCall(std::move(call));
  }
}

void ServicePool::RunCall(std::unique_ptr<InboundCall> call) {
  if (call->deadline() <= MonoTime::Now()) {
    // The client has given up: don't spend a worker on it.
    VLOG(1) << "skipping call " << call->call_id() << " that waited in the queue past its deadline";
    call->RespondFailure(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
                         Status::TimedOut("call waited in the service queue past its deadline"));
    return;
  }
  service_->Handle(std::move(call));
}

}  // namespace osprey
