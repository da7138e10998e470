#include "osprey/base/call_block_cache.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/sanitizers.h"
#include "osprey/base/thread_annotations.h"

namespace osprey {
namespace {

struct FreeBlock {
  FreeBlock* next;
};

// One thread's blocks. Trivially destructible, so it stays usable while
// the thread's other thread_local objects are destroyed (ExitGuard frees
// its blocks first and marks it exited).
struct ThreadBlocks {
  FreeBlock* head;
  // Written by its thread only; read by kept_bytes() from any thread.
  std::atomic<int> count;
  enum State : int { kUnused, kKeeping, kExited } state;
};

constinit thread_local ThreadBlocks tls_blocks{nullptr, 0, ThreadBlocks::kUnused};

// The threads that keep blocks, for kept_bytes(). Never destroyed: threads
// may exit after static destructors ran.
struct Registry {
  Mutex mu;
  std::vector<ThreadBlocks*> threads OSPREY_GUARDED_BY(mu);
};

Registry* GetRegistry() {
  static Registry* r = new Registry;
  return r;
}

struct ExitGuard {
  bool armed = false;
  ~ExitGuard() {
    ThreadBlocks& t = tls_blocks;
    {
      Registry* r = GetRegistry();
      MutexLock l(r->mu);
      r->threads.erase(std::remove(r->threads.begin(), r->threads.end(), &t), r->threads.end());
    }
    while (t.head != nullptr) {
      FreeBlock* b = t.head;
      t.head = b->next;
      ::operator delete(b);
    }
    t.count.store(0, std::memory_order_relaxed);
    t.state = ThreadBlocks::kExited;
  }
};

thread_local ExitGuard tls_exit_guard;

constexpr bool kCaches =
#ifdef OSPREY_SANITIZED
    false;
#else
    true;
#endif

}  // namespace

void* CallBlockCache::Allocate(size_t n) {
  DCHECK_LE(n, kBlockSize);
  if (!kCaches) return ::operator new(n);
  ThreadBlocks& t = tls_blocks;
  if (FreeBlock* b = t.head) {
    t.head = b->next;
    t.count.store(t.count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return b;
  }
  return ::operator new(kBlockSize);
}

void CallBlockCache::Free(void* block) {
  if (block == nullptr) return;
  ThreadBlocks& t = tls_blocks;
  if (!kCaches || t.state == ThreadBlocks::kExited) {
    ::operator delete(block);
    return;
  }
  const int count = t.count.load(std::memory_order_relaxed);
  if (count >= kMaxBlocksPerThread) {
    ::operator delete(block);
    return;
  }
  if (t.state == ThreadBlocks::kUnused) {
    // Makes this thread's ExitGuard, so that its exit frees what it keeps.
    tls_exit_guard.armed = true;
    Registry* r = GetRegistry();
    MutexLock l(r->mu);
    r->threads.push_back(&t);
    t.state = ThreadBlocks::kKeeping;
  }
  auto* b = static_cast<FreeBlock*>(block);
  b->next = t.head;
  t.head = b;
  t.count.store(count + 1, std::memory_order_relaxed);
}

size_t CallBlockCache::kept_bytes() {
  Registry* r = GetRegistry();
  MutexLock l(r->mu);
  size_t blocks = 0;
  for (const ThreadBlocks* t : r->threads) {
    blocks += static_cast<size_t>(t->count.load(std::memory_order_relaxed));
  }
  return blocks * kBlockSize;
}

int CallBlockCache::kept_by_this_thread() {
  return tls_blocks.count.load(std::memory_order_relaxed);
}

bool CallBlockCache::caches() { return kCaches; }

}  // namespace osprey
