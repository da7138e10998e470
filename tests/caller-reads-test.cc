// A sync caller whose call is the only one its connection awaits reads the
// answer from the socket itself (Reactor::ParkForCaller, WaitAsReader):
// the reactor is not woken for it. Every way such a wait can end other than
// by its answer: a deadline, Cancel(), the connection cut, the messenger
// shut down; and other calls on the same connection meanwhile, whose
// callbacks must still run on the reactor thread. Each test is bounded by a
// watchdog.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "contract_test_util.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/transport/reactor.h"
#include "recording_proxy.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

double CallerReads(const std::shared_ptr<Messenger>& m) {
  for (const MetricValue& v : m->metrics()->Snapshot()) {
    if (v.name == "osprey_caller_reads_total") return v.value;
  }
  return -1;
}

Status SyncSleep(CalculatorServiceProxy& proxy, int64_t micros, RpcController* ctl) {
  SleepRequestPB req;
  req.set_sleep_micros(micros);
  SleepResponsePB resp;
  return proxy.Sleep(req, &resp, ctl);
}

class CallerReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServicePoolOptions pool;
    pool.worker_threads = 2;
    pool.queue_length = 1000;
    ASSERT_TRUE(server_.Start(1, pool).ok());
    client_ = MakeClient(1);
  }
  void TearDown() override {
    if (client_ != nullptr) client_->Shutdown();
  }
  TestServer server_;
  std::shared_ptr<Messenger> client_;
  Watchdog dog_{std::chrono::seconds(60)};
};

TEST_F(CallerReadsTest, SyncCallsReadTheirOwnAnswers) {
  CalculatorServiceProxy proxy(client_, server_.address);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 2).ok());  // connects and negotiates
  const double before = CallerReads(client_);
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) {
    Status s = CheckedAdd(proxy, i, 2 * i);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // The reactor sleeps between calls here, so each caller sent its own call
  // and waited on the socket; on a busy machine a few may have found the
  // reactor awake and waited as any other.
  EXPECT_GE(CallerReads(client_) - before, kCalls * 0.8);
  // The connection went back to its reactor after each: async calls work.
  AddRequestPB req;
  req.set_x(20);
  req.set_y(22);
  AddResponsePB resp;
  RpcController ctl;
  CountDownLatch done(1);
  std::atomic<bool> on_reactor{false};
  proxy.AddAsync(req, &resp, &ctl, [&] {
    on_reactor = transport::Reactor::OnAnyReactorThread();
    done.CountDown();
  });
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ(42u, resp.result());
  EXPECT_TRUE(on_reactor.load());
}

TEST_F(CallerReadsTest, ADeadlineEndsAParkedWaitAndTheLateAnswerIsDropped) {
  CalculatorServiceProxy proxy(client_, server_.address);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 2).ok());
  const double before = CallerReads(client_);
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromMilliseconds(100));
  Status s = SyncSleep(proxy, 1'000'000, &ctl);
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_EQ(before + 1, CallerReads(client_));
  // The same connection serves the next call; the late answer to the
  // first finds no call and is dropped.
  ASSERT_TRUE(server_.service->WaitForSleepsFinished(1));
  s = CheckedAdd(proxy, 3, 4);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(CallerReadsTest, CancelEndsAParkedWait) {
  CalculatorServiceProxy proxy(client_, server_.address);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 2).ok());
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  std::thread canceller([&] {
    ASSERT_TRUE(server_.service->WaitForSleepsStarted(1));
    ctl.Cancel();
  });
  Status s = SyncSleep(proxy, 1'500'000, &ctl);
  canceller.join();
  EXPECT_TRUE(s.IsAborted()) << s.ToString();
  s = CheckedAdd(proxy, 3, 4);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(CallerReadsTest, AConnectionCutUnderAParkedWaitFailsTheCall) {
  RecordingProxy middle(server_.address);
  middle.CutEachConnectionAfter(MonoDelta::FromMilliseconds(300));
  Sockaddr via;
  ASSERT_TRUE(middle.Start(&via).ok());
  CalculatorServiceProxy proxy(client_, via);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 2).ok());
  const double before = CallerReads(client_);
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  Status s = SyncSleep(proxy, 1'500'000, &ctl);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_EQ(before + 1, CallerReads(client_));
  EXPECT_GE(middle.cuts(), 1);
}

TEST_F(CallerReadsTest, ShutdownEndsAParkedWait) {
  CalculatorServiceProxy proxy(client_, server_.address);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 2).ok());
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  std::thread stopper([&] {
    ASSERT_TRUE(server_.service->WaitForSleepsStarted(1));
    client_->Shutdown();
  });
  Status s = SyncSleep(proxy, 1'500'000, &ctl);
  stopper.join();
  EXPECT_TRUE(s.IsAborted()) << s.ToString();
}

// While one caller waits on the socket, others call on the same connection:
// its reading thread takes their answers too, and hands each async
// callback to the reactor thread, as the threading contract says.
TEST_F(CallerReadsTest, OtherCallsAnsweredDuringAParkedWaitKeepTheirThreads) {
  CalculatorServiceProxy proxy(client_, server_.address);
  ASSERT_TRUE(CheckedAdd(proxy, 1, 2).ok());
  constexpr int kAsync = 50;
  std::atomic<int> on_reactor{0}, ok{0};
  CountDownLatch async_done(kAsync);
  std::vector<AddRequestPB> reqs(kAsync);
  std::vector<AddResponsePB> resps(kAsync);
  std::vector<RpcController> ctls(kAsync);
  std::thread sync_caller([&] {
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    Status s = SyncSleep(proxy, 300'000, &ctl);
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  ASSERT_TRUE(server_.service->WaitForSleepsStarted(1));
  std::vector<std::thread> sync_adders;
  for (int t = 0; t < 2; ++t) {
    sync_adders.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Status s = CheckedAdd(proxy, t, i);
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    });
  }
  for (int i = 0; i < kAsync; ++i) {
    reqs[i].set_x(i);
    reqs[i].set_y(1);
    ctls[i].set_timeout(MonoDelta::FromSeconds(30));
    proxy.AddAsync(reqs[i], &resps[i], &ctls[i], [&, i] {
      if (transport::Reactor::OnAnyReactorThread()) on_reactor.fetch_add(1);
      if (ctls[i].status().ok() && resps[i].result() == static_cast<uint32_t>(i + 1)) {
        ok.fetch_add(1);
      }
      async_done.CountDown();
    });
  }
  ASSERT_TRUE(async_done.WaitFor(MonoDelta::FromSeconds(30)));
  for (auto& t : sync_adders) t.join();
  sync_caller.join();
  EXPECT_EQ(kAsync, ok.load());
  EXPECT_EQ(kAsync, on_reactor.load());
}

// Many callers at once, each on a connection of its own (users differ):
// each may park its own; every call is answered, and when the messenger is
// gone so are the eventfds the parked callers were lent.
TEST_F(CallerReadsTest, ManyParkedCallersAtOnceLeaveNothingBehind) {
  const int fds_before = FdCount();
  {
    auto client = MakeClient(2);
    constexpr int kThreads = 6, kCalls = 100;
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        CalculatorServiceProxy proxy(client, server_.address);
        proxy.set_user("user" + std::to_string(t));
        for (int i = 0; i < kCalls; ++i) {
          if (!CheckedAdd(proxy, t, i).ok()) failures.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(0, failures.load());
    EXPECT_GT(CallerReads(client), 0);
    client->Shutdown();
  }
  EXPECT_TRUE(WaitUntil([&] { return FdCount() <= fds_before; }))
      << FdCount() << " descriptors, " << fds_before << " before";
}

}  // namespace
}  // namespace osprey::rpc_test
