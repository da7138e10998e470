// ServicePool: runs one service's calls on a set of worker threads fed by a
// ServiceQueue. A full queue answers ERROR_SERVER_TOO_BUSY at once; with
// zero workers, calls run on the reactor thread that received them.
// QueueInboundCall(s) run on reactor threads; Start and Shutdown on the
// Messenger's caller (or its shutdown thread).
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "osprey/base/metrics.h"
#include "osprey/base/mutex.h"
#include "osprey/base/status.h"
#include "osprey/rpc/rpc_metrics.h"
#include "osprey/rpc/service_if.h"
#include "osprey/rpc/service_pool_options.h"
#include "osprey/rpc/service_queue.h"

namespace osprey {

namespace transport {
class Connection;
}  // namespace transport
class InboundCall;
class MessengerMetrics;

// Owned by its Messenger through a shared_ptr: workers left running past a
// shutdown's deadline keep it (and its service) alive until they return.
class ServicePool : public std::enable_shared_from_this<ServicePool> {
 public:
  // `metrics`: where the per-method metrics are made (null: none). Kept as
  // long as the pool, which a handler running past a shutdown keeps alive.
  ServicePool(std::unique_ptr<ServiceIf> service, const ServicePoolOptions& options,
              std::shared_ptr<MessengerMetrics> metrics = nullptr);
  ~ServicePool();

  Status Start();
  // Answers every queued call FATAL_SERVER_SHUTTING_DOWN and waits, until
  // `deadline`, for running handlers to return. True if they all did (the
  // workers are joined). False if some still run: a thread cannot be
  // stopped, so those workers are let go, keeping this pool alive until the
  // last returns; their answers then go nowhere. Idempotent.
  bool Shutdown(MonoTime deadline = MonoTime::Max());

  // Takes the call, or answers it with an error itself.
  void QueueInboundCall(std::unique_ptr<InboundCall> call);
  // As QueueInboundCall for each, in order, with one lock of the queue:
  // the calls a reactor read together. Leaves *calls empty.
  void QueueInboundCalls(std::vector<std::unique_ptr<InboundCall>>* calls);
  // The client connection `conn` closed: its calls still queued leave the
  // queue at once, unrun and unanswered, so that they hold no place a live
  // caller needs. Reactor thread of `conn`.
  void DropCallsOf(const transport::Connection* conn);
  // Whether calls run on workers (else on the reactor, at once).
  bool has_workers() const { return options_.worker_threads > 0; }

  ServiceIf* service() const { return service_.get(); }
  // What watches one of this service's methods, for as long as the pool
  // (one lookup per call for both); null for a method not of this service.
  struct MethodObservers {
    const std::string label;             // "<service>.<method>"
    ServerMethodMetrics* const metrics;  // null when not counted
  };
  const MethodObservers* ObserversFor(const ServiceMethod* method) const;
  // True on one of this pool's worker threads (where Shutdown would wait
  // for itself).
  bool OnWorkerThread() const;
  // Queued calls dropped unrun because their client's connection had
  // closed (DropCallsOf, or a worker finding it closed).
  uint64_t dropped_calls_of_closed_connections() const {
    return dropped_calls_of_closed_connections_.load(std::memory_order_relaxed);
  }

 private:
  using Queue = ServiceQueue<InboundCall>;
  // Answers a call the queue did not take or pushed out, saying why.
  void Refuse(std::unique_ptr<InboundCall> call, Queue::PutResult why);
  void RefuseAll(Queue::RefusedList* refused);
  void BuildRefusals();
  // Answers `call` with the answer made once for refusal `why` (any
  // PutResult but kQueued).
  void SendRefusal(InboundCall* call, Queue::PutResult why) const;
  // A refusal's code and its ErrorStatusPB, serialized.
  struct Refusal {
    wire::ErrorStatusPB::RpcErrorCodePB code;
    std::shared_ptr<const std::string> error_pb;
  };
  static Queue::Options QueueOptions(const ServicePoolOptions& options);
  void RunWorker();
  // Leader/follower on the server: after answering the last call in flight
  // of `conn` itself, a worker with nothing queued waits on that
  // connection's socket instead of in the queue, so that the next request
  // is read, run and answered on this thread with no hand-off. True if it
  // did (and so reported `last_run_ns` to the queue); it then reads what
  // arrived into the queue and comes to Take.
  bool WaitForNextRequest(const std::shared_ptr<transport::Connection>& conn, int64_t last_run_ns);
  // Runs the call's handler, unless its client left or its deadline passed;
  // `start`: the clock, read just before. Returns the metrics the caller
  // records the handler's time in (null: it did not run, or not counted).
  ServerMethodMetrics* RunCall(std::unique_ptr<InboundCall> call, MonoTime start);

  const std::unique_ptr<ServiceIf> service_;
  const ServicePoolOptions options_;
  Queue queue_;
  Mutex shutdown_mu_;  // one Shutdown() joins the workers; the next waits
  std::vector<std::thread> workers_ OSPREY_GUARDED_BY(shutdown_mu_);
  // Workers that have not returned yet, and the reference that keeps an
  // abandoned pool alive until the last of them does.
  Mutex live_mu_;
  int live_workers_ OSPREY_GUARDED_BY(live_mu_) = 0;
  CondVar all_returned_;
  std::shared_ptr<ServicePool> keep_alive_ OSPREY_GUARDED_BY(live_mu_);
  std::atomic<uint64_t> dropped_calls_of_closed_connections_{0};
  // Made in the constructor, read-only after.
  const std::shared_ptr<MessengerMetrics> messenger_metrics_;
  std::unordered_map<const ServiceMethod*, MethodObservers> observers_;
  // The answer to each refusal, by Queue::PutResult after kQueued
  // (SendRefusal), made once by BuildRefusals. Shared with the frames that
  // send it, which may outlive the pool in a connection's queue.
  std::array<Refusal, 7> refusals_;
};

}  // namespace osprey
