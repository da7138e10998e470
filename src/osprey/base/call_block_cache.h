// CallBlockCache: spare memory blocks, kept per thread, for the objects
// every call makes on one thread and frees on another.
//
// A server call's InboundCall is made on a reactor and freed on the worker
// that ran it; the frame of its answer is made on that worker and freed on
// the reactor once sent. glibc's per-thread cache sees each of these flow
// one way only: the freeing thread's cache fills, the allocating thread's
// runs dry, and from then on every such object goes through the shared
// arena and its lock (a sixth of a c async run's samples, in
// docs/perf-results/journal.md). Both objects come from blocks of one size, and a
// thread keeps the blocks it frees for its own next allocation: a
// reactor's sent frames become its next InboundCalls and a worker's
// finished InboundCalls its next frames, so in the steady state neither
// thread calls malloc or free for them.
//
// Bounded: a thread keeps at most kMaxBlocksPerThread blocks (a block freed
// beyond that goes back to malloc) and frees them when it exits;
// kept_bytes() counts every thread's. Any thread. Allocate and Free take
// no lock; a thread's first Free and its exit take the registry's. Under
// AddressSanitizer and ThreadSanitizer every block is a plain allocation,
// so they still see each object's lifetime.
#pragma once

#include <cstddef>

namespace osprey {

class CallBlockCache {
 public:
  static constexpr size_t kBlockSize = 512;
  static constexpr int kMaxBlocksPerThread = 64;

  // A block for an object of `n` bytes, n <= kBlockSize: one this thread
  // kept if it has one, else a new one.
  static void* Allocate(size_t n);
  // Keeps `block` (from Allocate, on any thread) for this thread's next
  // Allocate, or frees it if this thread keeps kMaxBlocksPerThread already.
  static void Free(void* block);

  // Bytes of the blocks all threads keep.
  static size_t kept_bytes();
  // Blocks this thread keeps.
  static int kept_by_this_thread();
  // False under the sanitizers: every block is then malloc's.
  static bool caches();
};

}  // namespace osprey

// In a class's body: its objects come from CallBlockCache. The class's size
// is checked against the block's where the macro is used.
#define OSPREY_ALLOCATED_FROM_CALL_BLOCK_CACHE(Class)                                   \
  static void* operator new(size_t n) { return ::osprey::CallBlockCache::Allocate(n); } \
  static void operator delete(void* p) { ::osprey::CallBlockCache::Free(p); }           \
  static void CheckFitsACallBlock() {                                                   \
    static_assert(sizeof(Class) <= ::osprey::CallBlockCache::kBlockSize,                \
                  #Class " no longer fits a CallBlockCache block: raise kBlockSize");   \
  }
