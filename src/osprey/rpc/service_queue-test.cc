// ServiceQueue on its own, with calls of the test's making: bounds, order,
// shutdown, and the wake-up policy that keeps a blocked worker from
// starving the calls queued behind it.
#include "osprey/rpc/service_queue.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "osprey/base/countdown_latch.h"

namespace osprey {
namespace {

struct TestCall {
  explicit TestCall(int id) : id(id) {}
  int id;
};
using Queue = ServiceQueue<TestCall>;

// Polls a state of the queue that no event announces, for at most 10 s.
template <class Condition>
bool Eventually(Condition condition) {
  MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(10);
  while (!condition()) {
    if (MonoTime::Now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ServiceQueueTest, BoundedFifo) {
  Queue q(3);
  for (int i = 0; i < 3; ++i) {
    auto c = std::make_unique<TestCall>(i);
    EXPECT_EQ(Queue::PutResult::kQueued, q.Put(&c));
    EXPECT_EQ(nullptr, c);  // taken
  }
  auto extra = std::make_unique<TestCall>(99);
  EXPECT_EQ(Queue::PutResult::kFull, q.Put(&extra));
  ASSERT_NE(nullptr, extra);  // left with the caller to refuse
  EXPECT_EQ(99, extra->id);
  EXPECT_EQ(3u, q.size());
  std::unique_ptr<TestCall> got;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(q.Take(&got, i == 0 ? -1 : 1000));
    EXPECT_EQ(i, got->id);
  }
  // Room again.
  EXPECT_EQ(Queue::PutResult::kQueued, q.Put(&extra));
}

TEST(ServiceQueueTest, ShutdownHandsBackTheQueueAndStopsWorkers) {
  Queue q(10);
  for (int i = 0; i < 4; ++i) {
    auto c = std::make_unique<TestCall>(i);
    ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&c));
  }
  std::unique_ptr<TestCall> got;
  ASSERT_TRUE(q.Take(&got, -1));  // one running
  // Two idle workers block in Take until the shutdown.
  Queue idle(1);
  std::atomic<int> exited{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([&] {
      std::unique_ptr<TestCall> c;
      while (idle.Take(&c, -1)) {
      }
      exited++;
    });
  }
  auto left = q.Shutdown();
  ASSERT_EQ(3u, left.size());
  EXPECT_EQ(1, left.front()->id);
  auto late = std::make_unique<TestCall>(7);
  EXPECT_EQ(Queue::PutResult::kShuttingDown, q.Put(&late));
  EXPECT_NE(nullptr, late);
  EXPECT_FALSE(q.Take(&got, 1000));
  EXPECT_TRUE(q.Shutdown().empty());  // idempotent
  (void)idle.Shutdown();
  for (auto& w : workers) w.join();
  EXPECT_EQ(2, exited.load());
}

TEST(ServiceQueueTest, PutWakesASleepingWorker) {
  Queue q(10);
  CountDownLatch got(1);
  std::thread worker([&] {
    std::unique_ptr<TestCall> c;
    if (q.Take(&c, -1) && c->id == 5) got.CountDown();
  });
  ASSERT_TRUE(Eventually([&] { return q.sleeping_workers() == 1; }));
  auto c = std::make_unique<TestCall>(5);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&c));
  EXPECT_TRUE(got.WaitFor(MonoDelta::FromSeconds(10)));
  (void)q.Shutdown();
  worker.join();
}

// A read's calls go in together: in order, up to the bound, and those
// beyond it are handed back, each with its reason.
TEST(ServiceQueueTest, PutAllQueuesInOrderUpToTheBoundAndHandsBackTheRest) {
  Queue q(3);
  auto first = std::make_unique<TestCall>(0);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&first));
  std::vector<std::unique_ptr<TestCall>> calls;
  for (int i = 1; i <= 4; ++i) calls.push_back(std::make_unique<TestCall>(i));
  std::vector<Queue::PutResult> results;
  q.PutAll(&calls, &results);
  ASSERT_EQ(4u, results.size());
  EXPECT_EQ(Queue::PutResult::kQueued, results[0]);
  EXPECT_EQ(Queue::PutResult::kQueued, results[1]);
  EXPECT_EQ(Queue::PutResult::kFull, results[2]);
  EXPECT_EQ(Queue::PutResult::kFull, results[3]);
  EXPECT_EQ(nullptr, calls[0]);
  EXPECT_EQ(nullptr, calls[1]);
  ASSERT_NE(nullptr, calls[2]);
  EXPECT_EQ(3, calls[2]->id);
  ASSERT_NE(nullptr, calls[3]);
  EXPECT_EQ(4, calls[3]->id);
  EXPECT_EQ(3u, q.size());
  std::unique_ptr<TestCall> got;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(q.Take(&got, i == 0 ? -1 : 1000));
    EXPECT_EQ(i, got->id);
  }
  (void)q.Shutdown();
  calls.clear();
  calls.push_back(std::make_unique<TestCall>(9));
  q.PutAll(&calls, &results);
  EXPECT_EQ(Queue::PutResult::kShuttingDown, results[0]);
  EXPECT_NE(nullptr, calls[0]);
}

// Slow handlers: each call of a batch wakes a sleeping worker of its own,
// as a Put() of each would.
TEST(ServiceQueueTest, PutAllWakesAWorkerForEachCall) {
  Queue q(10);
  // The queue learns the handlers are slow (above its fast threshold).
  auto warm = std::make_unique<TestCall>(-1);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&warm));
  std::unique_ptr<TestCall> got;
  ASSERT_TRUE(q.Take(&got, -1));
  for (int i = 0; i < 8; ++i) {
    warm = std::make_unique<TestCall>(-1);
    ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&warm));
    ASSERT_TRUE(q.Take(&got, 1000000000));
  }
  std::vector<int> ran(2, -1);
  CountDownLatch both(2);
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::unique_ptr<TestCall> c;
      // Its handler blocks until both calls run: only a worker woken for
      // the other call can take it.
      if (q.Take(&c, -1)) {
        ran[w] = c->id;
        both.CountDown();
        (void)both.WaitFor(MonoDelta::FromSeconds(10));
        std::unique_ptr<TestCall> next;
        while (q.Take(&next, 1000000000)) {
        }
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return q.sleeping_workers() == 2; }));
  std::vector<std::unique_ptr<TestCall>> calls;
  calls.push_back(std::make_unique<TestCall>(1));
  calls.push_back(std::make_unique<TestCall>(2));
  std::vector<Queue::PutResult> results;
  q.PutAll(&calls, &results);
  EXPECT_TRUE(both.WaitFor(MonoDelta::FromSeconds(10)));
  (void)q.Shutdown();
  for (auto& t : workers) t.join();
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ((std::vector<int>{1, 2}), ran);
}

// Handlers look fast, so a queued call is left to the running worker
// rather than waking another; but that worker's handler blocks. The
// watchdog, a worker woken to watch, must take the call within a few
// milliseconds anyway.
TEST(ServiceQueueTest, WatchdogTakesACallABlockedWorkerWouldStarve) {
  Queue q(10);
  CountDownLatch release(1), second_taken(1);
  std::atomic<int> next_worker{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([&] {
      std::unique_ptr<TestCall> c;
      int64_t took = -1;
      while (q.Take(&c, took)) {
        if (c->id == 1) release.Wait();  // blocks, as a handler waiting on another call
        if (c->id == 2) second_taken.CountDown();
        took = 1000;  // fast
        next_worker++;
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return q.sleeping_workers() == 2; }));
  auto first = std::make_unique<TestCall>(1);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&first));
  ASSERT_TRUE(Eventually([&] { return q.running_workers() == 1 && q.size() == 0; }));
  auto second = std::make_unique<TestCall>(2);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&second));
  EXPECT_TRUE(second_taken.WaitFor(MonoDelta::FromSeconds(5)))
      << "the call behind a blocked worker was never taken";
  release.CountDown();
  (void)q.Shutdown();
  for (auto& w : workers) w.join();
}

// A worker polling a socket (BeginPoll) is an idle worker: a call that no
// sleeping worker will take writes its eventfd; once it woke (EndPoll) the
// next call is left to it, not to another worker.
struct EventFd {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ~EventFd() { ::close(fd); }
  bool Written() const {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  void Drain() const {
    uint64_t v;
    ssize_t n = ::read(fd, &v, sizeof(v));
    (void)n;
  }
};

TEST(ServiceQueueTest, APollingWorkerIsWokenByACallNoSleeperTakes) {
  Queue q(10);
  EventFd poller;
  ASSERT_TRUE(q.BeginPoll(poller.fd, -1));
  EXPECT_FALSE(poller.Written());
  auto c = std::make_unique<TestCall>(1);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&c));
  EXPECT_TRUE(poller.Written());
  q.EndPoll(poller.fd);  // already taken off the list by Put: nothing to do
  std::unique_ptr<TestCall> got;
  ASSERT_TRUE(q.Take(&got, -1, /*from_poll=*/true));
  EXPECT_EQ(1, got->id);
}

TEST(ServiceQueueTest, NoPollingWithACallQueuedOrWhileShuttingDown) {
  Queue q(10);
  EventFd poller;
  auto c = std::make_unique<TestCall>(1);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&c));
  EXPECT_FALSE(q.BeginPoll(poller.fd, -1));  // take it instead
  std::unique_ptr<TestCall> got;
  ASSERT_TRUE(q.Take(&got, -1));
  EXPECT_TRUE(q.BeginPoll(poller.fd, 1000));
  // Shutdown wakes the poller, and refuses new pollers.
  q.Shutdown();
  EXPECT_TRUE(poller.Written());
  EventFd late;
  EXPECT_FALSE(q.BeginPoll(late.fd, -1));
  EXPECT_FALSE(q.Take(&got, -1, /*from_poll=*/true));
}

TEST(ServiceQueueTest, AWorkerBackFromPollingTakesTheCallItReadNoOtherIsWoken) {
  Queue q(10);
  EventFd poller, other;
  std::atomic<int> other_took{-1};
  // Another worker, asleep in Take.
  std::thread sleeper([&] {
    std::unique_ptr<TestCall> got;
    if (q.Take(&got, -1)) other_took = got->id;
  });
  ASSERT_TRUE(Eventually([&] { return q.sleeping_workers() == 1; }));
  ASSERT_TRUE(q.BeginPoll(poller.fd, -1));
  // Its socket turned readable: it ends polling, then reads a call in.
  q.EndPoll(poller.fd);
  auto c = std::make_unique<TestCall>(7);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&c));
  EXPECT_FALSE(poller.Written());
  std::unique_ptr<TestCall> got;
  ASSERT_TRUE(q.Take(&got, -1, /*from_poll=*/true));
  EXPECT_EQ(7, got->id);
  EXPECT_EQ(1, q.sleeping_workers());  // the sleeper was not woken for it
  // With no worker coming, the next call wakes the sleeper.
  auto d = std::make_unique<TestCall>(8);
  ASSERT_EQ(Queue::PutResult::kQueued, q.Put(&d));
  sleeper.join();
  EXPECT_EQ(8, other_took.load());
}

}  // namespace
}  // namespace osprey
