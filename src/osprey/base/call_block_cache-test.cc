#include "osprey/base/call_block_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace osprey {
namespace {

constexpr int kMax = CallBlockCache::kMaxBlocksPerThread;

#define SKIP_IF_NOT_CACHING()                                                     \
  if (!CallBlockCache::caches()) {                                                \
    GTEST_SKIP() << "under a sanitizer every block is malloc's, so none is kept"; \
  }

TEST(CallBlockCacheTest, EveryByteOfABlockIsUsable) {
  // Under ASan, this checks each block is as large as asked for.
  std::vector<void*> blocks;
  for (size_t n : {size_t{1}, size_t{100}, CallBlockCache::kBlockSize}) {
    void* b = CallBlockCache::Allocate(n);
    ASSERT_NE(b, nullptr);
    std::memset(b, 0xab, n);
    blocks.push_back(b);
  }
  for (void* b : blocks) CallBlockCache::Free(b);
  CallBlockCache::Free(nullptr);  // as delete of a null pointer
}

TEST(CallBlockCacheTest, ABlockFreedIsThisThreadsNextAllocation) {
  SKIP_IF_NOT_CACHING();
  void* a = CallBlockCache::Allocate(100);
  void* b = CallBlockCache::Allocate(400);
  const int before = CallBlockCache::kept_by_this_thread();
  CallBlockCache::Free(a);
  CallBlockCache::Free(b);
  EXPECT_EQ(CallBlockCache::kept_by_this_thread(), before + 2);
  // Last freed, first reused; whatever the size asked for, within a block.
  EXPECT_EQ(CallBlockCache::Allocate(CallBlockCache::kBlockSize), b);
  EXPECT_EQ(CallBlockCache::Allocate(1), a);
  EXPECT_EQ(CallBlockCache::kept_by_this_thread(), before);
  CallBlockCache::Free(a);
  CallBlockCache::Free(b);
}

TEST(CallBlockCacheTest, AThreadKeepsNoMoreThanItsBound) {
  SKIP_IF_NOT_CACHING();
  std::thread t([] {
    std::vector<void*> blocks;
    for (int i = 0; i < kMax + 50; ++i) blocks.push_back(CallBlockCache::Allocate(64));
    for (void* b : blocks) CallBlockCache::Free(b);
    EXPECT_EQ(CallBlockCache::kept_by_this_thread(), kMax);
    EXPECT_GE(CallBlockCache::kept_bytes(), size_t{kMax} * CallBlockCache::kBlockSize);
  });
  t.join();
}

// The case it exists for: blocks made on one thread and freed on another
// serve the freeing thread's next allocations, with no malloc.
TEST(CallBlockCacheTest, BlocksFreedOnAnotherThreadServeThatThread) {
  SKIP_IF_NOT_CACHING();
  std::vector<void*> made;
  std::thread maker([&] {
    for (int i = 0; i < 20; ++i) made.push_back(CallBlockCache::Allocate(300));
  });
  maker.join();
  std::thread freer([&] {
    for (void* b : made) CallBlockCache::Free(b);
    EXPECT_EQ(CallBlockCache::kept_by_this_thread(), 20);
    std::set<void*> again;
    for (int i = 0; i < 20; ++i) again.insert(CallBlockCache::Allocate(300));
    EXPECT_EQ(again, std::set<void*>(made.begin(), made.end()));
    EXPECT_EQ(CallBlockCache::kept_by_this_thread(), 0);
    for (void* b : again) CallBlockCache::Free(b);
  });
  freer.join();
}

TEST(CallBlockCacheTest, AThreadsBlocksAreFreedAndUncountedWhenItExits) {
  SKIP_IF_NOT_CACHING();
  const size_t before = CallBlockCache::kept_bytes();
  size_t during = 0;
  std::thread t([&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 10; ++i) blocks.push_back(CallBlockCache::Allocate(64));
    for (void* b : blocks) CallBlockCache::Free(b);
    during = CallBlockCache::kept_bytes();
  });
  t.join();
  EXPECT_EQ(during, before + 10 * CallBlockCache::kBlockSize);
  EXPECT_EQ(CallBlockCache::kept_bytes(), before);
}

struct Base {
  virtual ~Base() = default;
};
struct Derived : Base {
  OSPREY_ALLOCATED_FROM_CALL_BLOCK_CACHE(Derived)
  char payload[200] = {};
};

TEST(CallBlockCacheTest, AClassThatUsesItGetsItsBlocks) {
  SKIP_IF_NOT_CACHING();
  Base* first = new Derived;
  void* where = static_cast<Derived*>(first);
  const int before = CallBlockCache::kept_by_this_thread();
  // Deleted through its base: the virtual destructor finds Derived's delete.
  delete first;
  EXPECT_EQ(CallBlockCache::kept_by_this_thread(), before + 1);
  auto second = std::make_unique<Derived>();
  EXPECT_EQ(static_cast<void*>(second.get()), where);
  EXPECT_EQ(CallBlockCache::kept_by_this_thread(), before);
}

}  // namespace
}  // namespace osprey
