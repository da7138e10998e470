// BufferPool: spare large byte buffers, kept between calls.
//
// A call that moves a large message (64 KiB and up) needs frame buffers of
// that size on both ends. Freed after every call, they leave the top of
// glibc's heap free, glibc gives it back to the kernel (madvise), and the
// next call faults every page in again: most of a large call's system time.
// Kept here instead, the next frame of about the same size reuses them, and
// their bytes are never zero-filled (the caller writes every byte it sends).
//
// Bounded: only buffers from min_size to max_size bytes are kept, at most
// max_buffers of them and max_bytes in all; a buffer given back beyond that
// is freed. What the pool keeps is counted (kept_bytes(), and the
// osprey_buffer_pool_kept_bytes gauge of every messenger). Thread-safe: a
// buffer taken on a reactor goes back from whichever thread drops it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/thread_annotations.h"

namespace osprey {

class BufferPool {
 public:
  struct Options {
    size_t min_size = 32 * 1024;        // smaller buffers are plain allocations
    size_t max_size = 8 * 1024 * 1024;  // larger ones are freed, not kept
    size_t max_buffers = 16;
    size_t max_bytes = 64 * 1024 * 1024;
  };

  // One buffer: uninitialised bytes, at least the size asked for. Goes back
  // to its pool when destroyed. Move-only.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept { *this = std::move(other); }
    Buffer& operator=(Buffer&& other) noexcept;
    ~Buffer() { Reset(); }

    uint8_t* data() const { return data_; }
    size_t capacity() const { return capacity_; }
    // Gives the bytes back now.
    void Reset();

   private:
    friend class BufferPool;
    Buffer(BufferPool* pool, uint8_t* data, size_t capacity)
        : pool_(pool), data_(data), capacity_(capacity) {}
    BufferPool* pool_ = nullptr;
    uint8_t* data_ = nullptr;
    size_t capacity_ = 0;
  };

  explicit BufferPool(Options options);
  // Frees what it keeps. Every buffer taken from it must be gone first.
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process's pool, used by the frame encoder and decoder; never
  // destroyed, so buffers may outlive any messenger.
  static BufferPool* Default();

  // A buffer of at least `n` bytes: a kept one no more than twice as large
  // if there is one, else a new one.
  Buffer Take(size_t n) OSPREY_EXCLUDES(mu_);
  // As Take, for bytes that several owners share; *capacity is its size.
  std::shared_ptr<uint8_t[]> TakeShared(size_t n, size_t* capacity) OSPREY_EXCLUDES(mu_);

  size_t kept_bytes() const { return kept_bytes_.load(std::memory_order_relaxed); }
  size_t kept_buffers() const { return kept_buffers_.load(std::memory_order_relaxed); }
  // Buffers of a size it keeps that it had to allocate: a Take with none
  // to reuse. Its rate says whether the pool is large enough.
  uint64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }
  const Options& options() const { return options_; }

 private:
  uint8_t* Allocate(size_t n, size_t* capacity) OSPREY_EXCLUDES(mu_);
  void Give(uint8_t* data, size_t capacity) OSPREY_EXCLUDES(mu_);

  struct Kept {
    size_t capacity;
    uint8_t* data;
  };

  const Options options_;
  Mutex mu_;
  std::vector<Kept> kept_ OSPREY_GUARDED_BY(mu_);  // ascending capacity
  // Written under mu_, read without it by gauges.
  std::atomic<size_t> kept_bytes_{0};
  std::atomic<size_t> kept_buffers_{0};
  std::atomic<uint64_t> allocations_{0};
};

}  // namespace osprey
