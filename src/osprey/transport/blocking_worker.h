// BlockingWorker: one thread of a Messenger for work that may block and so
// must not run on a reactor: a Kerberos client's first step, which may ask
// the KDC for a service ticket and, with a KDC that does not answer, waits
// for Kerberos's timeouts. A reactor submits the work and carries on; the
// work posts its result back to the reactor (Reactor::Schedule).
//
// Thread-safe. The queue is bounded: Submit refuses work beyond
// `max_queued` so that a KDC outage cannot grow it without limit. The
// destructor drops what has not started and joins the thread (which
// finishes the work running, if any); destroyed from its own thread (the
// work held the last reference), it lets the thread end on its own.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <thread>

#include "osprey/base/mutex.h"
#include "osprey/base/task.h"
#include "osprey/base/thread_annotations.h"

namespace osprey::transport {

class BlockingWorker {
 public:
  explicit BlockingWorker(size_t max_queued = 1024);
  ~BlockingWorker();
  BlockingWorker(const BlockingWorker&) = delete;
  BlockingWorker& operator=(const BlockingWorker&) = delete;

  // False (and `work` is dropped) when the queue is full.
  bool Submit(Task work);
  size_t queued() const;

 private:
  // Shared with the thread, which may outlive this object (see above).
  struct State {
    explicit State(size_t max) : max_queued(max) {}
    const size_t max_queued;
    Mutex mu;
    CondVar cv;
    std::deque<Task> queue OSPREY_GUARDED_BY(mu);
    bool stopping OSPREY_GUARDED_BY(mu) = false;
  };
  static void Run(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace osprey::transport
