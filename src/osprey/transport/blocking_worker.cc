#include "osprey/transport/blocking_worker.h"

#include "osprey/base/thread_name.h"

namespace osprey::transport {

BlockingWorker::BlockingWorker(size_t max_queued)
    : state_(std::make_shared<State>(max_queued)), thread_(Run, state_) {}

BlockingWorker::~BlockingWorker() {
  std::deque<Task> dropped;  // destroyed outside the lock: tasks own references
  {
    MutexLock l(state_->mu);
    state_->stopping = true;
    dropped.swap(state_->queue);
  }
  state_->cv.Broadcast();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

bool BlockingWorker::Submit(Task work) {
  {
    MutexLock l(state_->mu);
    if (state_->stopping || state_->queue.size() >= state_->max_queued) return false;
    state_->queue.push_back(std::move(work));
  }
  state_->cv.Signal();
  return true;
}

size_t BlockingWorker::queued() const {
  MutexLock l(state_->mu);
  return state_->queue.size();
}

void BlockingWorker::Run(std::shared_ptr<State> state) {
  SetCurrentThreadName("osp-blocking");
  while (true) {
    Task work;
    {
      MutexLock l(state->mu);
      while (state->queue.empty() && !state->stopping) state->cv.Wait(&state->mu);
      if (state->stopping) return;
      work = std::move(state->queue.front());
      state->queue.pop_front();
    }
    work();
  }
}

}  // namespace osprey::transport
