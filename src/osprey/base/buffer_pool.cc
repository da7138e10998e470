#include "osprey/base/buffer_pool.h"

#include <algorithm>

namespace osprey {
namespace {

constexpr size_t kPage = 4096;

}  // namespace

BufferPool::Buffer& BufferPool::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    data_ = other.data_;
    capacity_ = other.capacity_;
    other.pool_ = nullptr;
    other.data_ = nullptr;
    other.capacity_ = 0;
  }
  return *this;
}

void BufferPool::Buffer::Reset() {
  if (data_ != nullptr) pool_->Give(data_, capacity_);
  pool_ = nullptr;
  data_ = nullptr;
  capacity_ = 0;
}

BufferPool::BufferPool(Options options) : options_(options) {}

BufferPool::~BufferPool() {
  for (const Kept& k : kept_) delete[] k.data;
}

BufferPool* BufferPool::Default() {
  static BufferPool* pool = new BufferPool(Options{});
  return pool;
}

uint8_t* BufferPool::Allocate(size_t n, size_t* capacity) {
  n = std::max<size_t>(n, 1);
  if (n >= options_.min_size && n <= options_.max_size) {
    {
      MutexLock l(mu_);
      auto it = std::lower_bound(kept_.begin(), kept_.end(), n,
                                 [](const Kept& k, size_t want) { return k.capacity < want; });
      // Only a kept buffer that is not far larger: a small frame must not
      // hold the pool's largest buffer while a large one waits.
      if (it != kept_.end() && it->capacity <= 2 * n) {
        uint8_t* data = it->data;
        *capacity = it->capacity;
        kept_bytes_.store(kept_bytes_.load(std::memory_order_relaxed) - it->capacity,
                          std::memory_order_relaxed);
        kept_.erase(it);
        kept_buffers_.store(kept_.size(), std::memory_order_relaxed);
        return data;
      }
    }
    allocations_.fetch_add(1, std::memory_order_relaxed);
    // Headroom, so frames a few bytes apart (a request and its echo, whose
    // headers differ) share buffers.
    n = std::min((n + n / 16 + kPage - 1) / kPage * kPage, options_.max_size);
  }
  *capacity = n;
  // new[] without (): the bytes are not zero-filled.
  return new uint8_t[n];
}

void BufferPool::Give(uint8_t* data, size_t capacity) {
  if (capacity >= options_.min_size && capacity <= options_.max_size) {
    MutexLock l(mu_);
    size_t bytes = kept_bytes_.load(std::memory_order_relaxed);
    if (kept_.size() < options_.max_buffers && bytes + capacity <= options_.max_bytes) {
      auto it = std::lower_bound(kept_.begin(), kept_.end(), capacity,
                                 [](const Kept& k, size_t want) { return k.capacity < want; });
      kept_.insert(it, Kept{capacity, data});
      kept_bytes_.store(bytes + capacity, std::memory_order_relaxed);
      kept_buffers_.store(kept_.size(), std::memory_order_relaxed);
      return;
    }
  }
  delete[] data;
}

BufferPool::Buffer BufferPool::Take(size_t n) {
  size_t capacity;
  uint8_t* data = Allocate(n, &capacity);
  return Buffer(this, data, capacity);
}

std::shared_ptr<uint8_t[]> BufferPool::TakeShared(size_t n, size_t* capacity) {
  uint8_t* data = Allocate(n, capacity);
  size_t cap = *capacity;
  return std::shared_ptr<uint8_t[]>(data, [this, cap](uint8_t* p) { Give(p, cap); });
}

}  // namespace osprey
