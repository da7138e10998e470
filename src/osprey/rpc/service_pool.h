// ServicePool: runs one service's calls on a set of worker threads fed by a
// ServiceQueue. A full queue answers ERROR_SERVER_TOO_BUSY at once; with
// zero workers, calls run on the reactor thread that received them.
// QueueInboundCall runs on reactor threads; Start and Shutdown on the
// Messenger's caller (or its shutdown thread).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/status.h"
#include "osprey/rpc/service_if.h"
#include "osprey/rpc/service_pool_options.h"
#include "osprey/rpc/service_queue.h"

namespace osprey {

class InboundCall;

class ServicePool {
 public:
  ServicePool(std::unique_ptr<ServiceIf> service, const ServicePoolOptions& options);
  ~ServicePool();

  Status Start();
  // Answers every queued call FATAL_SERVER_SHUTTING_DOWN, waits for running
  // handlers to return, joins the workers. Idempotent.
  void Shutdown();

  // Takes the call, or answers it with an error itself.
  void QueueInboundCall(std::unique_ptr<InboundCall> call);

  ServiceIf* service() const { return service_.get(); }
  // True on one of this pool's worker threads (where Shutdown would wait
  // for itself).
  bool OnWorkerThread() const;
  // Queued calls dropped unrun because their client's connection had
  // closed by the time a worker reached them.
  uint64_t dropped_calls_of_closed_connections() const {
    return dropped_calls_of_closed_connections_.load(std::memory_order_relaxed);
  }

 private:
  void RunWorker();
  void RunCall(std::unique_ptr<InboundCall> call);

  const std::unique_ptr<ServiceIf> service_;
  const ServicePoolOptions options_;
  ServiceQueue<InboundCall> queue_;
  Mutex shutdown_mu_;  // one Shutdown() joins the workers; the next waits
  std::vector<std::thread> workers_ GUARDED_BY(shutdown_mu_);
  std::atomic<uint64_t> dropped_calls_of_closed_connections_{0};
};

}  // namespace osprey
