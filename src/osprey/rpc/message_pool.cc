#include "osprey/rpc/message_pool.h"

namespace osprey {
namespace {

std::atomic<size_t> all_pools_bytes{0};

}  // namespace

MessagePool::MessagePool(const google::protobuf::Message* prototype) : prototype_(prototype) {}

MessagePool::~MessagePool() {
  MutexLock l(mu_);
  all_pools_bytes.fetch_sub(kept_bytes_, std::memory_order_relaxed);
}

std::unique_ptr<google::protobuf::Message> MessagePool::TakeKept() {
  MutexLock l(mu_);
  if (kept_.empty()) return nullptr;
  Kept k = std::move(kept_.back());
  kept_.pop_back();
  kept_bytes_ -= k.bytes;
  all_pools_bytes.fetch_sub(k.bytes, std::memory_order_relaxed);
  kept_count_.store(kept_.size(), std::memory_order_relaxed);
  return std::move(k.message);
}

std::unique_ptr<google::protobuf::Message> MessagePool::TakeFor(size_t wire_bytes, bool* reused) {
  if (wire_bytes < kMinWireBytes) {
    if (reused != nullptr) *reused = false;
    return std::unique_ptr<google::protobuf::Message>(prototype_->New());
  }
  return Take(reused);
}

std::unique_ptr<google::protobuf::Message> MessagePool::Take(bool* reused) {
  std::unique_ptr<google::protobuf::Message> m;
  if (kept_count_.load(std::memory_order_relaxed) != 0) m = TakeKept();
  if (reused != nullptr) *reused = m != nullptr;
  if (m == nullptr) m.reset(prototype_->New());
  return m;
}

void MessagePool::Give(std::unique_ptr<google::protobuf::Message> m, size_t wire_bytes,
                       bool reused) {
  if ((wire_bytes < kMinWireBytes && !reused) || wire_bytes > kMaxWireBytes ||
      kept_count_.load(std::memory_order_relaxed) >= kMaxKept) {
    return;  // freed
  }
  // Cleared here, on the answering thread, not under the lock.
  m->Clear();
  size_t bytes = m->SpaceUsedLong();
  // Clearing keeps capacity: a message that once held far more than this
  // call sent is not worth its memory.
  if (bytes > 2 * kMaxWireBytes) return;
  MutexLock l(mu_);
  if (kept_.size() >= kMaxKept) return;
  kept_.push_back(Kept{std::move(m), bytes});
  kept_bytes_ += bytes;
  all_pools_bytes.fetch_add(bytes, std::memory_order_relaxed);
  kept_count_.store(kept_.size(), std::memory_order_relaxed);
}

size_t MessagePool::kept_bytes() const {
  MutexLock l(mu_);
  return kept_bytes_;
}

size_t MessagePool::total_kept_bytes() { return all_pools_bytes.load(std::memory_order_relaxed); }

}  // namespace osprey
