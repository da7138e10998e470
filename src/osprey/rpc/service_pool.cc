#include "osprey/rpc/service_pool.h"

#include <glog/logging.h>
#include <unistd.h>

#include "osprey/base/thread_name.h"
#include "osprey/rpc/inbound_call.h"
#include "osprey/rpc/messenger_metrics.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/reactor.h"

namespace osprey {

namespace {
thread_local const ServicePool* tls_worker_of = nullptr;
// Sent by the queue (PutResult::kExpired) and by a worker that takes an
// expired call alike; tagged as BuildRefusals says.
constexpr const char* kExpiredInQueue =
    "call waited in the service queue past its deadline [reason=expired_in_queue]";
}  // namespace

bool ServicePool::OnWorkerThread() const { return tls_worker_of == this; }

ServicePool::ServicePool(std::unique_ptr<ServiceIf> service, const ServicePoolOptions& options,
                         std::shared_ptr<MessengerMetrics> metrics)
    : service_(std::move(service)),
      options_(options),
      queue_(QueueOptions(options)),
      messenger_metrics_(std::move(metrics)) {
  BuildRefusals();
  const bool counting = messenger_metrics_ != nullptr && messenger_metrics_->counting();
  for (const ServiceMethod* m : service_->methods()) {
    std::string label = service_->service_name() + "." + m->name;
    ServerMethodMetrics* metrics = counting ? messenger_metrics_->ServerMethod(label) : nullptr;
    observers_.emplace(m, MethodObservers{std::move(label), metrics});
  }
}

ServicePool::Queue::Options ServicePool::QueueOptions(const ServicePoolOptions& options) {
  Queue::Options q;
  q.capacity = options.queue_length;
  q.workers = options.worker_threads;
  q.deadline_order = options.deadline_order;
  q.overload_control = options.overload_control;
  q.admit_by_patience = options.admit_by_patience;
  q.admit_to_deadline = options.admit_to_deadline;
  q.delay_target = options.queue_delay_target;
  q.delay_interval = options.queue_delay_interval;
  return q;
}

const ServicePool::MethodObservers* ServicePool::ObserversFor(const ServiceMethod* method) const {
  auto it = observers_.find(method);
  return it == observers_.end() ? nullptr : &it->second;
}

ServicePool::~ServicePool() { Shutdown(); }

Status ServicePool::Start() {
  if (options_.worker_threads < 0) {
    return Status::InvalidArgument("worker_threads must be 0 or more, got " +
                                   std::to_string(options_.worker_threads));
  }
  if (options_.queue_length == 0) return Status::InvalidArgument("queue_length must be at least 1");
  if (options_.overload_control && (options_.queue_delay_target <= MonoDelta() ||
                                    options_.queue_delay_interval <= MonoDelta())) {
    return Status::InvalidArgument(
        "queue_delay_target and queue_delay_interval must be above 0 with overload_control");
  }
  if (messenger_metrics_ != nullptr && messenger_metrics_->counting() &&
      options_.worker_threads > 0) {
    // Read through a weak reference: the registry may outlive this pool.
    std::weak_ptr<ServicePool> weak = weak_from_this();
    MetricLabels labels = {{"service", service_->service_name()}};
    Status g = messenger_metrics_->registry()->AddGauge(
        "osprey_server_queue_length", "Calls waiting in the service queue, by service.", labels,
        [weak] {
          auto pool = weak.lock();
          return pool != nullptr ? static_cast<double>(pool->queue_.size()) : 0.0;
        });
    if (g.ok()) {
      g = messenger_metrics_->registry()->AddGauge(
          "osprey_server_queue_overloaded",
          "1 while the service queue's delay control says overloaded (newest first, refusing "
          "at admission), else 0.",
          labels, [weak] {
            auto pool = weak.lock();
            return pool != nullptr && pool->queue_.overloaded() ? 1.0 : 0.0;
          });
    }
    if (!g.ok()) return g;
  }
  MutexLock l(shutdown_mu_);
  {
    MutexLock live(live_mu_);
    live_workers_ = options_.worker_threads;
  }
  for (int i = 0; i < options_.worker_threads; ++i) {
    workers_.emplace_back([this, i] {
      SetCurrentThreadName("osp-worker-" + std::to_string(i));
      RunWorker();
    });
  }
  return Status::OK();
}

bool ServicePool::Shutdown(MonoTime deadline) {
  for (auto& call : queue_.Shutdown()) {
    call->RespondFailure(wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN,
                         Status::ServiceUnavailable("server is shutting down"));
  }
  MutexLock l(shutdown_mu_);
  if (workers_.empty()) return true;
  int still_running = 0;
  {
    MutexLock live(live_mu_);
    while (live_workers_ > 0) {
      if (!all_returned_.WaitUntil(&live_mu_, deadline) && MonoTime::Now() >= deadline) break;
    }
    still_running = live_workers_;
    if (still_running > 0) keep_alive_ = shared_from_this();
  }
  if (still_running > 0) {
    LOG(WARNING) << "service " << service_->service_name() << ": " << still_running
                 << " handler(s) still running at the shutdown deadline; their answers will be "
                    "dropped, and the service stays alive until they return";
    for (auto& t : workers_) t.detach();
    workers_.clear();
    return false;
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
  return true;
}

void ServicePool::QueueInboundCall(std::unique_ptr<InboundCall> call) {
  if (options_.worker_threads == 0) {
    MonoTime start = MonoTime::Now();
    if (ServerMethodMetrics* m = RunCall(std::move(call), start)) {
      m->handler_latency->Record(MonoTime::Now() - start);
    }
    return;
  }
  thread_local Queue::RefusedList pushed_out;
  Queue::PutResult result = queue_.Put(&call, &pushed_out);
  if (result != Queue::PutResult::kQueued) Refuse(std::move(call), result);
  RefuseAll(&pushed_out);
}

void ServicePool::QueueInboundCalls(std::vector<std::unique_ptr<InboundCall>>* calls) {
  if (options_.worker_threads == 0) {
    for (auto& c : *calls) QueueInboundCall(std::move(c));
  } else {
    // Per thread and reused: a read's batch allocates nothing here.
    thread_local std::vector<Queue::PutResult> results;
    thread_local Queue::RefusedList pushed_out;
    queue_.PutAll(calls, &results, &pushed_out);
    for (size_t i = 0; i < calls->size(); ++i) {
      if ((*calls)[i] != nullptr) Refuse(std::move((*calls)[i]), results[i]);
    }
    RefuseAll(&pushed_out);
  }
  calls->clear();
}

void ServicePool::DropCallsOf(const transport::Connection* conn) {
  if (options_.worker_threads == 0) return;  // nothing queued
  std::vector<std::unique_ptr<InboundCall>> dropped;
  size_t n = queue_.RemoveIf([conn](const InboundCall& c) { return c.came_on(conn); }, &dropped);
  if (n == 0) return;
  dropped_calls_of_closed_connections_.fetch_add(n, std::memory_order_relaxed);
  VLOG(1) << "dropped " << n << " queued call(s) of a closed client connection";
}

void ServicePool::RefuseAll(Queue::RefusedList* refused) {
  for (auto& r : *refused) Refuse(std::move(r.call), r.why);
  refused->clear();
}

void ServicePool::Refuse(std::unique_ptr<InboundCall> call, Queue::PutResult why) {
  using R = Queue::PutResult;
  if (ServerMethodMetrics* m = call->metrics()) {
    switch (why) {
      case R::kQueued:
      case R::kShuttingDown:
        break;
      case R::kFull:
        m->rejected_queue_full->Increment();
        break;
      case R::kEvicted:
        m->refused[ServerMethodMetrics::kEvicted]->Increment();
        break;
      case R::kOverloaded:
        m->refused[ServerMethodMetrics::kOverloaded]->Increment();
        break;
      case R::kWouldMissDeadline:
        m->refused[ServerMethodMetrics::kWouldMissDeadline]->Increment();
        break;
      case R::kWaitedTooLong:
        m->refused[ServerMethodMetrics::kWaitedTooLong]->Increment();
        break;
      case R::kExpired:
        m->deadline_expired_in_queue->Increment();
        break;
    }
  }
  SendRefusal(call.get(), why);
}

// One answer per refusal: every PutResult but kQueued, which is not one.
static_assert(static_cast<size_t>(ServiceQueue<InboundCall>::PutResult::kQueued) == 0 &&
                  static_cast<size_t>(ServiceQueue<InboundCall>::PutResult::kExpired) == 7,
              "refusals_ holds one answer per PutResult after kQueued");

void ServicePool::SendRefusal(InboundCall* call, Queue::PutResult why) const {
  CHECK(why != Queue::PutResult::kQueued) << "a queued call is not refused";
  // Made once (BuildRefusals): a refusal builds no text and serializes
  // nothing; its frame shares the bytes.
  const Refusal& r = refusals_[static_cast<size_t>(why) - 1];
  call->RespondSerializedError(r.code, r.error_pb);
}

void ServicePool::BuildRefusals() {
  using R = Queue::PutResult;
  const std::string& name = service_->service_name();
  const std::string queue = "the service queue of " + name;
  auto set = [this](R why, wire::ErrorStatusPB::RpcErrorCodePB code, const Status& status) {
    wire::ErrorStatusPB e;
    e.set_code(code);
    e.set_message(status.ToString());
    refusals_[static_cast<size_t>(why) - 1] = {
        code, std::make_shared<std::string>(e.SerializeAsString())};
  };
  const auto busy = wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY;
  set(R::kShuttingDown, wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN,
      Status::ServiceUnavailable("server is shutting down"));
  // Every ERROR_SERVER_TOO_BUSY of the queue ends with a tag of its reason,
  // named as the metrics name it: the code alone cannot say whether a
  // longer queue would help, and a client (rpc-bench's report) cannot rely
  // on prose that may be reworded. The tags are stable.
  const std::string full = queue + " is full (" + std::to_string(options_.queue_length) + " calls)";
  set(R::kFull, busy, Status::ServiceUnavailable(full + "; try again later [reason=queue_full]"));
  set(R::kEvicted, busy,
      Status::ServiceUnavailable(full +
                                 " and pushed this call out for one with an earlier deadline; try "
                                 "again later [reason=evicted]"));
  set(R::kOverloaded, busy,
      Status::ServiceUnavailable(
          queue +
          " is overloaded (the calls this one would wait behind hold more work than an eighth of "
          "its timeout, or than the delay target if that is longer); try again later "
          "[reason=overloaded]"));
  set(R::kWouldMissDeadline, busy,
      Status::ServiceUnavailable(queue +
                                 " holds calls that would keep this one past its deadline; try "
                                 "again later [reason=would_miss_deadline]"));
  set(R::kWaitedTooLong, busy,
      Status::ServiceUnavailable(queue +
                                 " is overloaded, and this call waited in it longer than its "
                                 "delay target and an eighth of its timeout; try again later "
                                 "[reason=waited_too_long]"));
  set(R::kExpired, busy, Status::TimedOut(kExpiredInQueue));
}

void ServicePool::RunWorker() {
  tls_worker_of = this;
  // A connection whose last call in flight this worker answered itself.
  std::shared_ptr<transport::Connection> answered;
  transport::Connection::NoteAnsweredConnections(&answered);
  std::unique_ptr<InboundCall> call;
  int64_t took = -1;
  bool from_poll = false;
  Queue::RefusedList shed;  // calls that waited too long while overloaded
  while (queue_.Take(&call, took, from_poll, &shed)) {
    RefuseAll(&shed);
    if (call == nullptr) {  // only calls to refuse
      took = -1;
      from_poll = false;
      continue;
    }
    MonoTime start = MonoTime::Now();
    ServerMethodMetrics* m = RunCall(std::move(call), start);
    MonoDelta ran = MonoTime::Now() - start;
    // The handler's time: until it returns (an answer it defers to another
    // thread is not waited for).
    if (m != nullptr) m->handler_latency->Record(ran);
    took = ran.ToNanoseconds();
    from_poll = false;
    if (answered != nullptr) {
      std::shared_ptr<transport::Connection> conn = std::move(answered);
      answered.reset();
      if (WaitForNextRequest(conn, took)) {
        took = -1;  // reported when it began to poll
        from_poll = true;
      }
    }
  }
  RefuseAll(&shed);  // shed by the Take that found the queue shutting down
  transport::Connection::NoteAnsweredConnections(nullptr);
  std::shared_ptr<ServicePool> last;  // if abandoned, this pool dies with it
  {
    MutexLock live(live_mu_);
    if (--live_workers_ == 0) {
      last = std::move(keep_alive_);
      all_returned_.Broadcast();
    }
  }
  tls_worker_of = nullptr;
  // Nothing of this pool may be touched past here: `last` may free it.
}

bool ServicePool::WaitForNextRequest(const std::shared_ptr<transport::Connection>& conn,
                                     int64_t last_run_ns) {
  transport::Reactor* r = conn->reactor();
  transport::ParkedConnection parked = r->ParkForWorker(conn);
  if (!parked) return false;
  if (!queue_.BeginPoll(parked.wake_fd, last_run_ns)) {
    r->Unpark(parked);
    return false;
  }
  r->WaitForRequest(parked, [&] { queue_.EndPoll(parked.wake_fd); });
  return true;
}

ServerMethodMetrics* ServicePool::RunCall(std::unique_ptr<InboundCall> call, MonoTime start) {
  if (call->connection_closed()) {
    // The client vanished while the call waited: nobody can read the
    // answer, and running it would keep live clients waiting.
    dropped_calls_of_closed_connections_.fetch_add(1, std::memory_order_relaxed);
    VLOG(1) << "dropping call " << call->call_id() << " whose client connection closed";
    return nullptr;
  }
  if (call->deadline() <= start) {
    // The client has given up: don't spend a worker on it.
    VLOG(1) << "skipping call " << call->call_id() << " that waited in the queue past its deadline";
    if (call->metrics() != nullptr) call->metrics()->deadline_expired_in_queue->Increment();
    SendRefusal(call.get(), Queue::PutResult::kExpired);  // made once, as the queue's
    return nullptr;
  }
  ServerMethodMetrics* metrics = call->metrics();
  return service_->Handle(std::move(call), start) ? metrics : nullptr;
}

}  // namespace osprey
