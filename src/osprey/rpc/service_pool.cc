#include "osprey/rpc/service_pool.h"

#include <glog/logging.h>

#include "osprey/rpc/inbound_call.h"

namespace osprey {

namespace {
thread_local const ServicePool* tls_worker_of = nullptr;
}  // namespace

bool ServicePool::OnWorkerThread() const { return tls_worker_of == this; }

ServicePool::ServicePool(std::unique_ptr<ServiceIf> service, const ServicePoolOptions& options)
    : service_(std::move(service)), options_(options) {}

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
  bool wake;
  {
    MutexLock l(mu_);
    if (shutting_down_) {
      call->RespondFailure(wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN,
                           Status::ServiceUnavailable("server is shutting down"));
      return;
    }
    if (queue_.size() >= options_.queue_length) {
      call->RespondFailure(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
                           Status::ServiceUnavailable(
                               "the service queue of " + service_->service_name() + " is full (" +
                               std::to_string(options_.queue_length) + " calls); try again later"));
      return;
    }
    queue_.push_back(std::move(call));
    wake = ShouldWakeWorker();
  }
  if (wake) not_empty_.Signal();
}

bool ServicePool::ShouldWakeWorker() {
  if (sleeping_ <= pending_wakes_) return false;  // everyone is or will be awake
  // Waking a sleeping worker costs two context switches, tens of
  // microseconds here. When handlers are known to be faster than that, a
  // running worker will reach the queue sooner: leave the call to it unless
  // the queue is getting long. For slow or blocking handlers, wake.
  bool fast = avg_run_ns_ < kFastHandlerNanos;
  if (fast && running_ > 0 && queue_.size() <= static_cast<size_t>(running_) * kCallsPerRunner) {
    if (watchdog_) return false;
    // A running worker's handler may block (on another call to this very
    // service, say): one sleeping worker becomes the watchdog and takes any
    // call that is still queued a few milliseconds later.
    watchdog_ = true;
    appoint_watchdog_ = true;
  }
  pending_wakes_++;
  return true;
}

void ServicePool::RunWorker() {
  tls_worker_of = this;
  mu_.Lock();
  bool watchdog = false;  // this worker is the pool's watchdog (see below)
  while (true) {
    while (queue_.empty() || (watchdog && !shutting_down_)) {
      if (shutting_down_) break;
      sleeping_++;
      if (watchdog) {
        not_empty_.WaitUntil(&mu_, MonoTime::Now() + kWatchdogPeriod);
      } else {
        not_empty_.Wait(&mu_);
      }
      sleeping_--;
      if (pending_wakes_ > 0) pending_wakes_--;
      if (appoint_watchdog_ && !watchdog) {
        // Woken to watch, not to work: stay awake-ish until the calls left
        // to running workers have been taken.
        appoint_watchdog_ = false;
        watchdog = true;
        continue;
      }
      if (watchdog) {
        // Signalled to work, or a call is still queued after a period: take it.
        if (!queue_.empty()) break;
        if (queue_.empty() && running_ == 0) {
          watchdog = false;  // nothing left to watch
          watchdog_ = false;
        }
        continue;
      }
    }
    if (watchdog) {
      watchdog = false;
      watchdog_ = false;
    }
    if (queue_.empty()) break;  // shutting down
    std::unique_ptr<InboundCall> call = std::move(queue_.front());
    queue_.pop_front();
    // More waiting than this worker will take: maybe another should run.
    bool wake = !queue_.empty() && ShouldWakeWorker();
    running_++;
    mu_.Unlock();
    if (wake) not_empty_.Signal();
    MonoTime start = MonoTime::Now();
    RunCall(std::move(call));
    int64_t took = (MonoTime::Now() - start).ToNanoseconds();
    mu_.Lock();
    running_--;
    // Exponentially weighted, 1/8 per call: follows a change of handler
    // cost within tens of calls.
    avg_run_ns_ += (took - avg_run_ns_) / 8;
  }
  if (watchdog) watchdog_ = false;
  mu_.Unlock();
}

void ServicePool::RunCall(std::unique_ptr<InboundCall> call) {
  if (call->connection_closed()) {
    // The client vanished while the call waited: nobody can read the
    // answer, and running it would keep live clients waiting.
    dropped_calls_of_closed_connections_.fetch_add(1, std::memory_order_relaxed);
    VLOG(1) << "dropping call " << call->call_id() << " whose client connection closed";
    return;
  }
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
