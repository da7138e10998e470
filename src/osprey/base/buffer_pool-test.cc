#include "osprey/base/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace osprey {
namespace {

BufferPool::Options SmallPool() {
  return BufferPool::Options{
      .min_size = 1024, .max_size = 64 * 1024, .max_buffers = 4, .max_bytes = 100 * 1024};
}

TEST(BufferPoolTest, ABufferGivenBackIsTheNextOfItsSize) {
  BufferPool pool(SmallPool());
  uint8_t* first;
  {
    BufferPool::Buffer b = pool.Take(10000);
    ASSERT_GE(b.capacity(), 10000u);
    std::memset(b.data(), 0xab, b.capacity());  // every byte is ours (ASan checks)
    first = b.data();
  }
  EXPECT_EQ(pool.kept_buffers(), 1u);
  EXPECT_GE(pool.kept_bytes(), 10000u);
  // A frame a few bytes larger (an echo's header differs) fits the same one.
  BufferPool::Buffer again = pool.Take(10010);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.kept_buffers(), 0u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  EXPECT_EQ(pool.allocations(), 1u);
}

TEST(BufferPoolTest, ASmallRequestDoesNotTakeAFarLargerBuffer) {
  BufferPool pool(SmallPool());
  pool.Take(60 * 1024).Reset();
  ASSERT_EQ(pool.kept_buffers(), 1u);
  BufferPool::Buffer small = pool.Take(2000);
  EXPECT_LT(small.capacity(), 60 * 1024u);
  EXPECT_EQ(pool.kept_buffers(), 1u);  // the large one still waits
}

TEST(BufferPoolTest, BuffersOutsideItsSizesAreNeverKept) {
  BufferPool pool(SmallPool());
  {
    BufferPool::Buffer tiny = pool.Take(100);
    BufferPool::Buffer huge = pool.Take(1024 * 1024);
    EXPECT_GE(tiny.capacity(), 100u);
    EXPECT_GE(huge.capacity(), 1024u * 1024);
    std::memset(huge.data(), 1, huge.capacity());
  }
  EXPECT_EQ(pool.kept_buffers(), 0u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  EXPECT_EQ(pool.allocations(), 0u);  // neither was a size it keeps
}

TEST(BufferPoolTest, GivingBackMoreThanItKeepsFreesTheRest) {
  BufferPool pool(SmallPool());
  {
    std::vector<BufferPool::Buffer> held;
    for (int i = 0; i < 50; ++i) held.push_back(pool.Take(4096 + i * 100));
  }
  EXPECT_EQ(pool.kept_buffers(), SmallPool().max_buffers);
  EXPECT_LE(pool.kept_bytes(), SmallPool().max_bytes);
}

TEST(BufferPoolTest, ItsBytesNeverPassTheirBound) {
  BufferPool pool(SmallPool());
  {
    std::vector<BufferPool::Buffer> held;
    for (int i = 0; i < 10; ++i) held.push_back(pool.Take(40 * 1024));
  }
  // 100 KiB holds two of them, not the four buffers the count allows.
  EXPECT_EQ(pool.kept_buffers(), 2u);
  EXPECT_LE(pool.kept_bytes(), 100 * 1024u);
}

TEST(BufferPoolTest, SharedBuffersGoBackWhenTheLastOwnerDropsThem) {
  BufferPool pool(SmallPool());
  size_t capacity = 0;
  std::shared_ptr<uint8_t[]> a = pool.TakeShared(5000, &capacity);
  EXPECT_GE(capacity, 5000u);
  std::shared_ptr<uint8_t[]> b = a;
  a.reset();
  EXPECT_EQ(pool.kept_buffers(), 0u);
  b.reset();
  EXPECT_EQ(pool.kept_buffers(), 1u);
  EXPECT_EQ(pool.kept_bytes(), capacity);
}

TEST(BufferPoolTest, BuffersTakenOnOneThreadGoBackFromOthers) {
  BufferPool pool(SmallPool());
  constexpr int kThreads = 4;
  constexpr int kRounds = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < kRounds; ++i) {
        size_t cap;
        auto shared = pool.TakeShared(2048 + (i * 37 + t) % 8192, &cap);
        shared[0] = static_cast<uint8_t>(i);
        shared[cap - 1] = static_cast<uint8_t>(t);
        // Dropped by another thread half the time.
        if (i % 2 == 0) {
          std::thread([s = std::move(shared)]() mutable { s.reset(); }).join();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(pool.kept_buffers(), SmallPool().max_buffers);
  EXPECT_LE(pool.kept_bytes(), SmallPool().max_bytes);
}

TEST(BufferPoolTest, TheProcessPoolIsBoundedAsDocumented) {
  const BufferPool::Options& o = BufferPool::Default()->options();
  EXPECT_EQ(o.min_size, 32u * 1024);
  EXPECT_EQ(o.max_size, 8u * 1024 * 1024);
  EXPECT_EQ(o.max_buffers, 16u);
  EXPECT_EQ(o.max_bytes, 64u * 1024 * 1024);
  EXPECT_EQ(BufferPool::Default(), BufferPool::Default());
}

}  // namespace
}  // namespace osprey
