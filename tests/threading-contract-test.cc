// The threading and lifetime contract of messenger.h, tried the way users
// break it: sync calls from callbacks, Cancel() racing Shutdown(),
// messengers shut down or dropped inside their own callbacks and handlers,
// handlers that throw or answer twice, answers after the server is gone,
// oversized requests, clients that vanish with calls queued. Each test is
// bounded in calls and time; a watchdog fails it instead of hanging.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "contract_test_util.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/socket.h"
#include "osprey/transport/reactor.h"
#include "rpc_test_util.h"
#include "wire_test_util.h"

namespace osprey::rpc_test {
namespace {

using std::chrono::milliseconds;

// A sync caller that borrows an idle reactor while its connection fails:
// the other calls' callbacks must still run on the reactor thread, where a
// sync call is refused at once, and never on the borrower holding the
// loop, where it deadlocked. Rounds of 5 sync threads and 100 async calls
// whose callbacks try a sync call, with the server shut down mid-round.
TEST(ThreadingContractTest, CallbacksRunOnReactorsWhenTheConnectionFailsMidBorrow) {
  Watchdog dog(std::chrono::seconds(120));
  constexpr int kRounds = 15, kAsync = 100, kSyncThreads = 5;
  for (int round = 0; round < kRounds; ++round) {
    TestServer server;
    ServicePoolOptions pool;
    pool.worker_threads = 2;
    pool.queue_length = 1000;
    ASSERT_TRUE(server.Start(1, pool).ok());
    auto client = MakeClient(1);
    CalculatorServiceProxy proxy(client, server.address);

    CallbackLedger ledger(kAsync);
    std::atomic<int> refused_sync{0}, other_sync{0};
    std::vector<SleepRequestPB> reqs(kAsync);
    std::vector<SleepResponsePB> resps(kAsync);
    std::vector<RpcController> ctls(kAsync);
    CountDownLatch done(kAsync);
    for (int i = 0; i < kAsync; ++i) {
      reqs[i].set_sleep_micros(1000 + 100 * (i % 10));
      ctls[i].set_timeout(MonoDelta::FromSeconds(10));
      proxy.SleepAsync(reqs[i], &resps[i], &ctls[i], [&, i] {
        ledger.Ran(i);
        AddRequestPB add;
        add.set_x(1);
        add.set_y(2);
        AddResponsePB sum;
        RpcController ctl;
        ctl.set_timeout(MonoDelta::FromSeconds(5));
        Status s = proxy.Add(add, &sum, &ctl);
        (s.IsIllegalState() ? refused_sync : other_sync).fetch_add(1);
        done.CountDown();
      });
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> syncs;
    for (int t = 0; t < kSyncThreads; ++t) {
      syncs.emplace_back([&] {
        for (int k = 0; k < 200 && !stop.load(); ++k) {
          EchoRequestPB req;
          req.set_data(std::string(static_cast<size_t>(100 + 3000 * (k % 40)), 'x'));
          EchoResponsePB resp;
          RpcController ctl;
          ctl.set_timeout(MonoDelta::FromSeconds(5));
          (void)proxy.Echo(req, &resp, &ctl);
        }
      });
    }
    std::this_thread::sleep_for(milliseconds(2 + round % 7));
    server.messenger->Shutdown();
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(30))) << "round " << round;
    stop = true;
    for (auto& t : syncs) t.join();
    EXPECT_TRUE(ledger.EachExactlyOnce()) << "round " << round;
    EXPECT_EQ(0, ledger.off_reactor.load()) << "round " << round;
    // On a reactor thread every sync call is refused, never attempted.
    EXPECT_EQ(kAsync, refused_sync.load()) << "round " << round;
    EXPECT_EQ(0, other_sync.load()) << "round " << round;
    client->Shutdown();
  }
}

// The case that deadlocked every time: a server that negotiates (Kudu's
// recorded answers) and then stops reading, so the client's outbound queue
// holds bytes; async calls whose callbacks try a sync call; then a sync
// call that pushes the queue over its limit, sent by the caller's thread
// in place of the sleeping reactor. The connection fails inside that
// borrow, yet every callback runs once, on the reactor, where its sync
// call is refused at once.
TEST(ThreadingContractTest, ConnectionFailingInsideABorrowRunsCallbacksOnTheReactor) {
  Watchdog dog(std::chrono::seconds(60));
  const std::string s2c = Golden("s2c.bin");
  ASSERT_GE(s2c.size(), 53u);
  // A small receive buffer, set before listen() so that accepted sockets
  // take it: the client's bytes back up into its own queue sooner.
  Socket listener;
  Sockaddr addr;
  ASSERT_TRUE(ListenOnLoopback(&listener, &addr, 1, /*receive_buffer=*/4096).ok());

  constexpr size_t kLimit = 256 * 1024;
  auto client = MakeClient(
      1,
      MessengerBuilder("client").set_max_frame_size(kLimit).set_max_outbound_queue_bytes(kLimit));
  CalculatorServiceProxy proxy(client, addr);
  constexpr int kMaxAsync = 200;
  CallbackLedger ledger(kMaxAsync);
  std::vector<EchoRequestPB> reqs(kMaxAsync);
  std::vector<EchoResponsePB> resps(kMaxAsync);
  std::vector<RpcController> ctls(kMaxAsync);
  std::atomic<int> refused_sync{0}, callbacks{0};

  Socket conn;
  auto issue = [&](int i, size_t bytes) {
    reqs[i].set_data(std::string(bytes, 'a'));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&, i] {
      ledger.Ran(i);
      AddRequestPB add;
      add.set_x(1);
      add.set_y(1);
      AddResponsePB sum;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(2));
      if (proxy.Add(add, &sum, &ctl).IsIllegalState()) refused_sync.fetch_add(1);
      callbacks.fetch_add(1);
    });
  };
  issue(0, 10);
  ASSERT_TRUE(PlayRecordedNegotiation(&listener, s2c, &conn).ok());
  // From here on the server reads nothing. Fill the socket buffers, then
  // the client's queue, to somewhere below the limit.
  int issued = 1;
  size_t queued = 0;
  for (; issued < kMaxAsync; ++issued) {
    std::vector<ConnectionInfo> conns;
    ASSERT_TRUE(client->DumpConnections(&conns).ok());
    ASSERT_EQ(1u, conns.size());
    queued = conns[0].outbound_queued_bytes;
    if (queued > kLimit / 2) break;
    issue(issued, 20 * 1024);
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_GT(queued, kLimit / 2) << "the client's queue never filled";
  ASSERT_LE(queued, kLimit);
  // The reactor, with nothing it can write, goes to sleep: the call below
  // is then sent by this thread in its place.
  ASSERT_TRUE(WaitUntilAsleepInEpoll("osp-reactor-0", std::chrono::seconds(10)));
  auto borrows = [&] {
    for (const MetricValue& v : client->metrics()->Snapshot()) {
      if (v.name == "osprey_reactor_borrows_total") return v.value;
    }
    return -1.0;
  };
  const double borrows_before = borrows();
  EchoRequestPB over;
  over.set_data(std::string(kLimit - queued + 1000, 'o'));
  EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  Status s = proxy.Echo(over, &resp, &ctl);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("peer is not reading")) << s.ToString();
  // The case this test is for: the sync call was sent by this thread in the
  // sleeping reactor's place, and the connection failed inside that borrow.
  EXPECT_EQ(borrows_before + 1, borrows());
  for (int i = 0; i < 1000 && callbacks.load() < issued; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(issued, callbacks.load());
  EXPECT_EQ(0, ledger.off_reactor.load());
  EXPECT_EQ(issued, refused_sync.load());
  for (int i = 0; i < issued; ++i) EXPECT_EQ(1, ledger.runs[i].load()) << "callback " << i;
}

// Cancel() from another thread, racing both the call's start and the
// client messenger's Shutdown(): every callback exactly once (never twice
// from a refused call and its abort), and no cancel lost (none of the
// 200 ms sleeps completes).
TEST(ThreadingContractTest, CancelRacingShutdownCompletesEachCallOnce) {
  Watchdog dog(std::chrono::seconds(120));
  TestServer server;
  ServicePoolOptions pool;
  pool.queue_length = 5000;
  ASSERT_TRUE(server.Start(1, pool).ok());
  for (int round = 0; round < 20; ++round) {
    auto client = MakeClient(1);
    CalculatorServiceProxy proxy(client, server.address);
    constexpr int kCalls = 300;
    CallbackLedger ledger(kCalls);
    std::vector<SleepRequestPB> reqs(kCalls);
    std::vector<SleepResponsePB> resps(kCalls);
    std::vector<RpcController> ctls(kCalls);
    CountDownLatch done(kCalls);
    std::atomic<bool> all_done{false};
    std::thread canceller([&] {
      while (!all_done.load()) {
        for (auto& c : ctls) c.Cancel();
        std::this_thread::yield();
      }
    });
    std::thread shutter([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 10)));
      client->Shutdown();
    });
    for (int i = 0; i < kCalls; ++i) {
      reqs[i].set_sleep_micros(200000);  // outlives the test unless cancelled
      proxy.SleepAsync(reqs[i], &resps[i], &ctls[i], [&, i] {
        ledger.Ran(i);
        done.CountDown();
      });
    }
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(20))) << "round " << round;
    all_done = true;
    canceller.join();
    shutter.join();
    EXPECT_TRUE(ledger.EachExactlyOnce()) << "round " << round;
    for (int i = 0; i < kCalls; ++i) {
      EXPECT_TRUE(ctls[i].status().IsAborted() || ctls[i].status().IsNetworkError())
          << "round " << round << ", call " << i << ": " << ctls[i].status().ToString();
    }
  }
}

// The last reference to a client messenger dropped inside one of its own
// callbacks, and Shutdown() called there: no crash, no hang, every other
// callback once, and its threads and descriptors go away.
TEST(ThreadingContractTest, MessengerDroppedOrShutDownInItsOwnCallback) {
  Watchdog dog(std::chrono::seconds(60));
  TestServer server;
  ASSERT_TRUE(server.Start(1).ok());
  const int threads = ThreadCount(), fds = FdCount();
  for (bool drop : {true, false}) {
    auto client = MakeClient(2);
    auto proxy = std::make_unique<CalculatorServiceProxy>(client, server.address);
    constexpr int kCalls = 50;
    CallbackLedger ledger(kCalls);
    std::vector<AddRequestPB> reqs(kCalls);
    std::vector<AddResponsePB> resps(kCalls);
    std::vector<RpcController> ctls(kCalls);
    CountDownLatch done(kCalls);
    std::mutex mu;
    std::shared_ptr<Messenger> held = client;  // the one reference the callbacks share
    client.reset();
    // Callback 0 drops the proxy: it waits until every call was issued.
    std::unique_lock<std::mutex> issuing(mu);
    for (int i = 0; i < kCalls; ++i) {
      reqs[i].set_x(i);
      reqs[i].set_y(1);
      proxy->AddAsync(reqs[i], &resps[i], &ctls[i], [&, i] {
        ledger.Ran(i);
        if (i == 0) {
          std::lock_guard<std::mutex> l(mu);
          if (drop) {
            proxy.reset();
            held.reset();  // the last reference, on the messenger's own reactor
          } else {
            held->Shutdown();
          }
        }
        done.CountDown();
      });
    }
    issuing.unlock();
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(20)));
    EXPECT_TRUE(ledger.EachExactlyOnce());
    {
      std::lock_guard<std::mutex> l(mu);
      if (held) {
        // A second Shutdown() waits for the one the callback began.
        held->Shutdown();
        Status s = held->Listen(Sockaddr::Loopback(0));
        EXPECT_TRUE(s.IsIllegalState()) << s.ToString();
        proxy.reset();
        held.reset();
      }
    }
    EXPECT_TRUE(BackTo(threads, fds)) << (drop ? "dropped" : "shut down") << " in a callback";
  }
}

// Listen() from a callback would wait on the reactor it runs on.
TEST(ThreadingContractTest, ListenFromAReactorThreadIsAnError) {
  Watchdog dog(std::chrono::seconds(30));
  TestServer server;
  ASSERT_TRUE(server.Start(1).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  AddRequestPB req;
  req.set_x(1);
  req.set_y(1);
  AddResponsePB resp;
  RpcController ctl;
  CountDownLatch done(1);
  Status listen;
  proxy.AddAsync(req, &resp, &ctl, [&] {
    listen = client->Listen(Sockaddr::Loopback(0));
    done.CountDown();
  });
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_TRUE(listen.IsIllegalState()) << listen.ToString();
  EXPECT_TRUE(client->Listen(Sockaddr::Loopback(0)).ok());  // from here it works
}

// A service whose handlers misbehave on request.
class MisbehavingService : public CalculatorService {
 public:
  void Fail(const FailRequestPB* req, FailResponsePB*, RpcContext* ctx) override {
    if (req->message() == "throw") throw std::runtime_error("the handler gave up");
    if (req->message() == "throw-int") throw 42;
    if (req->message() == "respond-then-throw") {
      ctx->RespondFailure(Status::InvalidArgument("answered first"));
      throw std::runtime_error("and then threw");
    }
    if (req->message() == "twice") {
      ctx->RespondFailure(Status::InvalidArgument("first answer"));
      ctx->RespondFailure(Status::InvalidArgument("second answer"));
      return;
    }
    if (req->message() == "shutdown") {
      shutdown_server();
      ctx->RespondFailure(Status::Aborted("shut down from the handler"));
      return;
    }
    if (req->message() == "hold") {
      std::lock_guard<std::mutex> l(mu);
      held = ctx;
      return;
    }
    ctx->RespondFailure(Status::InvalidArgument(req->message()));
  }
  std::function<void()> shutdown_server;
  std::mutex mu;
  RpcContext* held = nullptr;
};

struct MisbehavingServer {
  std::shared_ptr<Messenger> messenger;
  MisbehavingService* service = nullptr;
  Sockaddr address;
  Status Start(int workers) {
    OSPREY_RETURN_NOT_OK(MessengerBuilder("server").set_num_reactors(1).Build(&messenger));
    auto svc = std::make_unique<MisbehavingService>();
    service = svc.get();
    ServicePoolOptions pool;
    pool.worker_threads = workers;
    OSPREY_RETURN_NOT_OK(messenger->RegisterService(std::move(svc), pool));
    return messenger->Listen(Sockaddr::Loopback(0), &address);
  }
};

Status CallFail(const std::shared_ptr<Messenger>& client, const Sockaddr& addr,
                const std::string& what) {
  CalculatorServiceProxy proxy(client, addr);
  FailRequestPB req;
  req.set_message(what);
  FailResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  return proxy.Fail(req, &resp, &ctl);
}

// A handler that throws answers its call with a RemoteError naming the
// exception, and the server keeps serving; one that answered first keeps
// its answer.
TEST(ThreadingContractTest, HandlerThatThrowsAnswersWithTheException) {
  Watchdog dog(std::chrono::seconds(30));
  for (int workers : {1, 0}) {
    MisbehavingServer server;
    ASSERT_TRUE(server.Start(workers).ok());
    auto client = MakeClient(1);
    Status s = CallFail(client, server.address, "throw");
    ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find("Fail handler threw an exception: the handler "
                                                  "gave up"))
        << s.ToString();
    s = CallFail(client, server.address, "throw-int");
    ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find("not derived from std::exception"))
        << s.ToString();
    s = CallFail(client, server.address, "respond-then-throw");
    ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find("answered first")) << s.ToString();
    // Still serving.
    s = CallFail(client, server.address, "ordinary");
    EXPECT_NE(std::string::npos, s.message().find("ordinary")) << s.ToString();
  }
}

#ifdef NDEBUG
// A second answer is ignored and logged; the client gets the first.
TEST(ThreadingContractTest, SecondResponseIsIgnored) {
  MisbehavingServer server;
  ASSERT_TRUE(server.Start(1).ok());
  auto client = MakeClient(1);
  Status s = CallFail(client, server.address, "twice");
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("first answer")) << s.ToString();
  s = CallFail(client, server.address, "ordinary");
  EXPECT_NE(std::string::npos, s.message().find("ordinary")) << s.ToString();
}
#else
// With assertions on, a second answer is a programming error caught at once.
TEST(ThreadingContractDeathTest, SecondResponseIsCaughtByAnAssertion) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        MisbehavingServer server;
        if (!server.Start(1).ok()) std::abort();
        auto client = MakeClient(1);
        (void)CallFail(client, server.address, "twice");
      },
      "answered twice");
}
#endif

// A handler may shut down its own server, on a worker or on the reactor
// (worker_threads = 0); a concurrent Shutdown() from another thread waits
// for that one to finish.
TEST(ThreadingContractTest, HandlerShutsDownItsOwnServer) {
  Watchdog dog(std::chrono::seconds(60));
  for (int workers : {1, 0}) {
    MisbehavingServer server;
    ASSERT_TRUE(server.Start(workers).ok());
    server.service->shutdown_server = [m = server.messenger.get()] { m->Shutdown(); };
    auto client = MakeClient(1);
    Status s = CallFail(client, server.address, "shutdown");
    // The answer may or may not get out before the connection closes.
    EXPECT_FALSE(s.ok());
    server.messenger->Shutdown();  // waits for the handler's shutdown
    s = CallFail(client, server.address, "after");
    EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
    server.messenger.reset();
  }
}

// A handler blocked on something the test controls. The latches are shared
// with the test, not on its stack: the worker that runs this outlives the
// test's scope once it is let go.
struct BlockedSleepLatches {
  CountDownLatch started{1}, release{1}, destroyed{1};
};
class BlockedSleep : public CalculatorService {
 public:
  explicit BlockedSleep(std::shared_ptr<BlockedSleepLatches> l) : l_(std::move(l)) {}
  ~BlockedSleep() override { l_->destroyed.CountDown(); }
  void Sleep(const SleepRequestPB*, SleepResponsePB*, RpcContext* ctx) override {
    l_->started.CountDown();
    l_->release.Wait();
    ctx->RespondSuccess();  // after the shutdown: goes nowhere
  }

 private:
  std::shared_ptr<BlockedSleepLatches> l_;
};

// Shutdown(handler_wait) with a handler that does not return: it gives up
// waiting at the deadline, fails what is left (each callback once), and the
// handler, once it returns, answers into nothing and takes its service and
// thread with it.
TEST(ThreadingContractTest, ShutdownWithADeadlineDoesNotWaitForABlockedHandler) {
  Watchdog dog(std::chrono::seconds(60));
  const int threads = ThreadCount(), fds = FdCount();
  auto latches = std::make_shared<BlockedSleepLatches>();
  {
    std::shared_ptr<Messenger> server;
    ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
    ServicePoolOptions pool;
    pool.worker_threads = 1;
    ASSERT_TRUE(server->RegisterService(std::make_unique<BlockedSleep>(latches), pool).ok());
    Sockaddr addr;
    ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
    auto client = MakeClient(1);
    CalculatorServiceProxy proxy(client, addr);
    SleepRequestPB sleep;
    sleep.set_sleep_micros(0);
    SleepResponsePB sleep_resp;
    AddRequestPB add;
    add.set_x(1);
    add.set_y(2);
    AddResponsePB add_resp;
    RpcController sleep_ctl, add_ctl;
    CallbackLedger ledger(2);
    CountDownLatch done(2);
    proxy.SleepAsync(sleep, &sleep_resp, &sleep_ctl, [&] {
      ledger.Ran(0);
      done.CountDown();
    });
    ASSERT_TRUE(latches->started.WaitFor(MonoDelta::FromSeconds(10)));
    proxy.AddAsync(add, &add_resp, &add_ctl, [&] {  // queued behind the blocked one
      ledger.Ran(1);
      done.CountDown();
    });
    MonoTime begin = MonoTime::Now();
    server->Shutdown(MonoDelta::FromMilliseconds(300));
    MonoDelta took = MonoTime::Now() - begin;
    EXPECT_GE(took, MonoDelta::FromMilliseconds(290));
    EXPECT_LT(took, MonoDelta::FromSeconds(10));
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
    EXPECT_TRUE(ledger.EachExactlyOnce());
    EXPECT_FALSE(sleep_ctl.status().ok());
    EXPECT_FALSE(add_ctl.status().ok());
    server->Shutdown();  // a second one returns at once: nothing left to wait for
    server.reset();
    client->Shutdown();
  }
  latches->release.CountDown();  // the handler returns; its thread and service go
  EXPECT_TRUE(latches->destroyed.WaitFor(MonoDelta::FromSeconds(10)))
      << "the abandoned service was never freed";
  EXPECT_TRUE(BackTo(threads, fds));
}

// An RpcContext answered after its server messenger was destroyed: the
// answer goes nowhere, safely.
TEST(ThreadingContractTest, AnswerAfterTheServerIsGoneIsANoOp) {
  Watchdog dog(std::chrono::seconds(30));
  MisbehavingServer server;
  ASSERT_TRUE(server.Start(1).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  FailRequestPB req;
  req.set_message("hold");
  FailResponsePB resp;
  RpcController ctl;
  CountDownLatch done(1);
  proxy.FailAsync(req, &resp, &ctl, [&] { done.CountDown(); });
  RpcContext* held = nullptr;
  for (int i = 0; i < 1000 && held == nullptr; ++i) {
    {
      std::lock_guard<std::mutex> l(server.service->mu);
      held = server.service->held;
    }
    if (held == nullptr) std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_NE(nullptr, held);
  server.service = nullptr;
  server.messenger.reset();  // the service and its messenger are gone
  held->RespondFailure(Status::InvalidArgument("too late"));
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_FALSE(ctl.status().ok());
  EXPECT_FALSE(ctl.status().IsRemoteError()) << ctl.status().ToString();
}

// A request over the maximum frame size, or over the outbound limit, fails
// alone with InvalidArgument naming the sizes; the connection and its other
// calls go on.
TEST(ThreadingContractTest, OversizedRequestFailsAlone) {
  Watchdog dog(std::chrono::seconds(30));
  TestServer server;
  ASSERT_TRUE(server.Start(1).ok());
  // The outbound limit is never below the frame size (Build checks), so a
  // frame that fits the one fits the other.
  for (bool outbound_limit : {false, true}) {
    MessengerBuilder b("client");
    b.set_max_frame_size(64 * 1024);
    if (outbound_limit) b.set_max_outbound_queue_bytes(64 * 1024);
    auto client = MakeClient(1, b);
    CalculatorServiceProxy proxy(client, server.address);
    // Calls in flight on the same connection.
    constexpr int kCalls = 20;
    std::vector<SleepRequestPB> reqs(kCalls);
    std::vector<SleepResponsePB> resps(kCalls);
    std::vector<RpcController> ctls(kCalls);
    CountDownLatch done(kCalls);
    std::atomic<int> refused_sync{0};
    for (int i = 0; i < kCalls; ++i) {
      reqs[i].set_sleep_micros(20000);
      ctls[i].set_timeout(MonoDelta::FromSeconds(10));
      proxy.SleepAsync(reqs[i], &resps[i], &ctls[i], [&] {
        // Where the whole connection used to fail inside the big call's
        // borrow, this ran on the borrower and deadlocked.
        AddRequestPB add;
        add.set_x(1);
        add.set_y(1);
        AddResponsePB sum;
        RpcController ctl;
        if (proxy.Add(add, &sum, &ctl).IsIllegalState()) refused_sync.fetch_add(1);
        done.CountDown();
      });
    }
    EchoRequestPB big;
    big.set_data(std::string(100 * 1000, 'b'));
    EchoResponsePB resp;
    RpcController ctl;
    Status s = proxy.Echo(big, &resp, &ctl);
    ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find("exceeds the maximum frame size of 65536"))
        << s.ToString();
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(20)));
    for (int i = 0; i < kCalls; ++i) {
      EXPECT_TRUE(ctls[i].status().ok()) << ctls[i].status().ToString();
    }
    EXPECT_EQ(kCalls, refused_sync.load());
    EchoRequestPB small;
    small.set_data("still here");
    RpcController ctl2;
    s = proxy.Echo(small, &resp, &ctl2);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// A client that vanishes with many calls queued: the server drops them
// unrun, so the next client is served at once, not after all of them.
TEST(ThreadingContractTest, QueuedCallsOfAVanishedClientAreDropped) {
  Watchdog dog(std::chrono::seconds(60));
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  pool.queue_length = 1000;
  ASSERT_TRUE(server.Start(1, pool).ok());
  {
    auto doomed = MakeClient(1);
    CalculatorServiceProxy proxy(doomed, server.address);
    constexpr int kCalls = 500;
    std::vector<SleepRequestPB> reqs(kCalls);
    std::vector<SleepResponsePB> resps(kCalls);
    std::vector<RpcController> ctls(kCalls);
    CountDownLatch done(kCalls);
    for (int i = 0; i < kCalls; ++i) {
      reqs[i].set_sleep_micros(20000);  // 10 s of work for the one worker
      proxy.SleepAsync(reqs[i], &resps[i], &ctls[i], [&] { done.CountDown(); });
    }
    ASSERT_TRUE(server.service->WaitForSleepsStarted(1));
    doomed->Shutdown();
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  }
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  AddRequestPB req;
  req.set_x(1);
  req.set_y(2);
  AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(3));
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(server.service->sleeps_started.load(), 100);
}

// A negotiation that times out names its connection once.
TEST(ThreadingContractTest, ErrorMessagesNameTheirConnectionOnce) {
  Socket listener;
  Sockaddr addr;
  ASSERT_TRUE(ListenOnLoopback(&listener, &addr).ok());  // never accepts: never answers
  auto client = MakeClient(
      1, MessengerBuilder("client").set_negotiation_timeout(MonoDelta::FromMilliseconds(200)));
  Status s = CallFail(client, addr, "x");
  ASSERT_TRUE(s.IsTimedOut() || s.IsNetworkError()) << s.ToString();
  const std::string prefix = "client connection to " + addr.ToString();
  size_t first = s.message().find(prefix);
  ASSERT_NE(std::string::npos, first) << s.ToString();
  EXPECT_EQ(std::string::npos, s.message().find(prefix, first + 1)) << s.ToString();
}

}  // namespace
}  // namespace osprey::rpc_test
