#include "osprey/rpc/message_pool.h"

#include <google/protobuf/wrappers.pb.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace osprey {
namespace {

using google::protobuf::BytesValue;

std::unique_ptr<google::protobuf::Message> Filled(MessagePool* pool, size_t n) {
  auto m = pool->TakeFor(n);
  static_cast<BytesValue*>(m.get())->set_value(std::string(n, 'v'));
  return m;
}

TEST(MessagePoolTest, ALargeMessageComesBackClearedForTheNextLargeCall) {
  MessagePool pool(&BytesValue::default_instance());
  auto m = Filled(&pool, 100 * 1024);
  const google::protobuf::Message* first = m.get();
  size_t before = MessagePool::total_kept_bytes();
  pool.Give(std::move(m), 100 * 1024);
  EXPECT_EQ(pool.kept(), 1u);
  // Cleared, it keeps its string's capacity: that is the point.
  EXPECT_GE(pool.kept_bytes(), 100 * 1024u);
  EXPECT_EQ(MessagePool::total_kept_bytes() - before, pool.kept_bytes());

  // A small request does not take it.
  auto small = pool.TakeFor(10);
  EXPECT_NE(small.get(), first);
  EXPECT_EQ(pool.kept(), 1u);

  auto again = pool.TakeFor(90 * 1024);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(static_cast<BytesValue*>(again.get())->value(), "");
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  EXPECT_EQ(MessagePool::total_kept_bytes(), before);
}

// A method of mixed sizes: a kept response used by a small call goes back,
// instead of being freed and allocated again by the next large call.
TEST(MessagePoolTest, AKeptMessageUsedByASmallCallGoesBack) {
  MessagePool pool(&BytesValue::default_instance());
  pool.Give(Filled(&pool, 64 * 1024), 64 * 1024);
  bool reused = false;
  auto m = pool.Take(&reused);
  EXPECT_TRUE(reused);
  const google::protobuf::Message* kept = m.get();
  static_cast<BytesValue*>(m.get())->set_value("small");
  pool.Give(std::move(m), 7, reused);
  EXPECT_EQ(pool.kept(), 1u);
  EXPECT_EQ(pool.Take(&reused).get(), kept);
  EXPECT_TRUE(reused);
  // A new message of a small call is not kept.
  auto fresh = pool.Take(&reused);
  EXPECT_FALSE(reused);
  pool.Give(std::move(fresh), 7, reused);
  EXPECT_EQ(pool.kept(), 0u);
}

TEST(MessagePoolTest, SmallAndHugeMessagesAreNeverKept) {
  MessagePool pool(&BytesValue::default_instance());
  pool.Give(Filled(&pool, 1000), 1000);
  pool.Give(Filled(&pool, 100), 0);  // size unknown: an answer never sent
  pool.Give(Filled(&pool, MessagePool::kMaxWireBytes + 1), MessagePool::kMaxWireBytes + 1);
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

TEST(MessagePoolTest, ItKeepsAtMostItsBound) {
  MessagePool pool(&BytesValue::default_instance());
  std::vector<std::unique_ptr<google::protobuf::Message>> held;
  for (size_t i = 0; i < 3 * MessagePool::kMaxKept; ++i) held.push_back(Filled(&pool, 64 * 1024));
  for (auto& m : held) pool.Give(std::move(m), 64 * 1024);
  EXPECT_EQ(pool.kept(), MessagePool::kMaxKept);
  EXPECT_LE(pool.kept_bytes(), MessagePool::kMaxKept * 2 * 64 * 1024);
}

TEST(MessagePoolTest, TakenAndGivenBackFromManyThreads) {
  MessagePool pool(&BytesValue::default_instance());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool] {
      for (int i = 0; i < 200; ++i) {
        auto m = pool.Take();
        ASSERT_EQ(static_cast<BytesValue*>(m.get())->value(), "");
        static_cast<BytesValue*>(m.get())->set_value(std::string(40 * 1024, 'x'));
        pool.Give(std::move(m), 40 * 1024);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(pool.kept(), MessagePool::kMaxKept);
}

TEST(MessagePoolTest, DestroyingAPoolUncountsWhatItKept) {
  size_t before = MessagePool::total_kept_bytes();
  {
    MessagePool pool(&BytesValue::default_instance());
    pool.Give(Filled(&pool, 64 * 1024), 64 * 1024);
    EXPECT_GT(MessagePool::total_kept_bytes(), before);
  }
  EXPECT_EQ(MessagePool::total_kept_bytes(), before);
}

}  // namespace
}  // namespace osprey
