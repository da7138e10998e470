// Peer loss: a server process killed with calls in flight (its clients fail
// fast and reconnect to its successor), a client that vanishes while the
// server works on its calls, and shutdown with many calls queued.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "child_server.h"
#include "hostile_test_util.h"
#include "osprey/base/countdown_latch.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

TEST(PeerLossTest, ServerProcessKilledWithCallsInFlight) {
  ChildServer child;
  Sockaddr addr;
  Status s = child.Spawn(0, &addr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, addr);
  s = CheckedAdd(proxy, 3, 4, MonoDelta::FromSeconds(20));
  ASSERT_TRUE(s.ok()) << s.ToString();

  constexpr int kPending = 5;
  SleepRequestPB req;
  req.set_sleep_micros(20 * 1000 * 1000);
  std::vector<SleepResponsePB> resps(kPending);
  std::vector<RpcController> ctls(kPending);
  std::vector<std::atomic<int>> callbacks(kPending);
  CountDownLatch done(kPending);
  for (int i = 0; i < kPending; ++i) {
    ctls[i].set_timeout(MonoDelta::FromSeconds(30));
    proxy.SleepAsync(req, &resps[i], &ctls[i], [&, i] {
      callbacks[i]++;
      done.CountDown();
    });
  }
  // Until they are on the wire: in flight, nothing left to send.
  ASSERT_TRUE(WaitUntil([&] {
    std::vector<ConnectionInfo> conns;
    return client->DumpConnections(&conns).ok() && conns.size() == 1 &&
           conns[0].calls_in_flight == kPending && conns[0].outbound_queued_bytes == 0;
  }));
  ASSERT_EQ(kPending, done.count());

  MonoTime killed = MonoTime::Now();
  child.Kill();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  MonoDelta took = MonoTime::Now() - killed;
  EXPECT_LT(took.ToMilliseconds(), 5000) << "pending calls waited for their timeouts";
  for (int i = 0; i < kPending; ++i) {
    EXPECT_EQ(1, callbacks[i].load());
    EXPECT_TRUE(ctls[i].status().IsNetworkError()) << i << ": " << ctls[i].status().ToString();
  }

  // With nobody listening, a new call fails fast, long before its timeout.
  MonoTime start = MonoTime::Now();
  s = CheckedAdd(proxy, 3, 4, MonoDelta::FromSeconds(20));
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_LT((MonoTime::Now() - start).ToMilliseconds(), 5000);

  // A new server process on the same port: the next call reconnects.
  ChildServer again;
  Sockaddr addr2;
  s = again.Spawn(addr.port(), &addr2);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(addr.port(), addr2.port());
  s = CheckedAdd(proxy, 3, 4, MonoDelta::FromSeconds(20));
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int i = 0; i < kPending; ++i) EXPECT_EQ(1, callbacks[i].load());
}

TEST(PeerLossTest, ClientDisconnectsWhileServerWorksOnItsCalls) {
  std::shared_ptr<Messenger> server;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(2).Build(&server).ok());
  auto svc = std::make_unique<CalculatorService>();
  CalculatorService* calc = svc.get();
  ASSERT_TRUE(server->RegisterService(std::move(svc)).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, addr);
  ASSERT_TRUE(CheckedAdd(proxy, 3, 4, MonoDelta::FromSeconds(20)).ok());
  int baseline = CountOpenFds();

  constexpr int kCalls = 3;
  {
    RawConn c;
    ASSERT_TRUE(c.Connect(addr).ok());
    Status s = c.Negotiate();
    ASSERT_TRUE(s.ok()) << s.ToString();
    SleepRequestPB req;
    // Held until the connection is gone, however slow the host.
    req.set_sleep_micros(CalculatorService::kHeldSleep);
    for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(c.Send(CallFrame(i, "Sleep", req)).ok());
    ASSERT_TRUE(calc->WaitForSleepsStarted(1));
    ASSERT_EQ(1, calc->sleeps_started.load());
    c.Close();  // gone while the server works
  }
  // The server lets go of the connection while its call runs...
  EXPECT_LE(WaitForFdCountAtMost(baseline), baseline);
  // ...finishes that call (its answer goes nowhere) and drops the two
  // still queued unrun: nobody can read them...
  calc->ReleaseHeldSleeps();
  EXPECT_TRUE(calc->WaitForSleepsFinished(1));
  // ...and serves others. Its one worker takes calls in order, so by the
  // time this one ran, the two queued before it were dropped, not run.
  Status s = CheckedAdd(proxy, 3, 4, MonoDelta::FromSeconds(20));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(1, calc->sleeps_started.load());
  EXPECT_EQ(1, calc->sleeps_finished.load());
}

// Server shutdown with a thousand calls queued: every callback runs exactly
// once, with success (it ran) or FATAL_SERVER_SHUTTING_DOWN / a network
// error (it did not).
TEST(PeerLossTest, ServerShutdownWithThousandQueuedCallsEveryCallbackOnce) {
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  pool.queue_length = 2000;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  constexpr int kCalls = 1000;
  SleepRequestPB req;
  req.set_sleep_micros(2000);
  std::vector<SleepResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  std::vector<std::atomic<int>> counts(kCalls);
  CountDownLatch done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    proxy.SleepAsync(req, &resps[i], &ctls[i], [&, i] {
      counts[i]++;
      done.CountDown();
    });
  }
  ASSERT_TRUE(server.service->WaitForSleepsStarted(5));
  server.messenger->Shutdown();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(30)));
  client->Shutdown();  // with its reactors joined, a second callback would have run by now
  int ok = 0, shutting_down = 0, network = 0;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(1, counts[i].load()) << "callback of call " << i;
    const Status& st = ctls[i].status();
    if (st.ok()) {
      ++ok;
    } else if (ctls[i].error_response() && ctls[i].error_response()->code() ==
                                               wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN) {
      ++shutting_down;
    } else if (st.IsNetworkError()) {
      ++network;
    } else {
      ADD_FAILURE() << "call " << i << ": " << st.ToString();
    }
  }
  EXPECT_GE(ok, 5);
  EXPECT_EQ(kCalls, ok + shutting_down + network);
}

// Client shutdown with a thousand calls in flight on a slow server: every
// callback exactly once, all with Aborted or a network error; a call made
// after shutdown fails at once with Aborted.
TEST(PeerLossTest, ClientShutdownWithThousandCallsInFlightEveryCallbackOnce) {
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  pool.queue_length = 2000;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto client = MakeClient(2);
  CalculatorServiceProxy proxy(client, server.address);
  constexpr int kCalls = 1000;
  SleepRequestPB req;
  req.set_sleep_micros(5000);
  std::vector<SleepResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  std::vector<std::atomic<int>> counts(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    proxy.SleepAsync(req, &resps[i], &ctls[i], [&counts, i] { counts[i]++; });
  }
  ASSERT_TRUE(server.service->WaitForSleepsStarted(3));
  client->Shutdown();
  int ok = 0;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(1, counts[i].load()) << "callback of call " << i;
    const Status& st = ctls[i].status();
    if (st.ok()) {
      ++ok;
    } else {
      EXPECT_TRUE(st.IsAborted() || st.IsNetworkError()) << i << ": " << st.ToString();
    }
  }
  EXPECT_LT(ok, kCalls);
  // After shutdown a call fails at once, and its callback still runs once.
  RpcController late;
  std::atomic<int> late_count{0};
  SleepResponsePB late_resp;
  proxy.SleepAsync(req, &late_resp, &late, [&] { late_count++; });
  EXPECT_EQ(1, late_count.load());
  EXPECT_TRUE(late.status().IsAborted()) << late.status().ToString();
  // The server, left with calls whose client is gone, still shuts down cleanly.
  server.messenger->Shutdown();
  for (int i = 0; i < kCalls; ++i) ASSERT_EQ(1, counts[i].load()) << "callback of call " << i;
}

}  // namespace
}  // namespace osprey::rpc_test
