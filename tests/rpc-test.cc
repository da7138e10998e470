// End-to-end tests of the RPC core over loopback: a server Messenger with
// CalculatorService and client Messengers calling it through generated
// proxies. RpcTest runs over TCPv4, TCPv6 and a Unix socket.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "osprey/base/countdown_latch.h"
#include "osprey/base/socket.h"
#include "osprey/base/user.h"
#include "osprey/rpc/message_pool.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

class RpcTest : public ::testing::TestWithParam<TestTransport> {
 protected:
  void SetUp() override {
    Status s = server_.Start(2, ServicePoolOptions(), MessengerBuilder("server"),
                             ListenAddressFor(GetParam()));
    ASSERT_TRUE(s.ok()) << s.ToString();
    client_ = MakeClient(1);
  }
  CalculatorServiceProxy MakeProxy() { return CalculatorServiceProxy(client_, server_.address); }

  TestServer server_;
  std::shared_ptr<Messenger> client_;
};

TEST_P(RpcTest, SyncAdd) {
  auto proxy = MakeProxy();
  AddRequestPB req;
  req.set_x(20);
  req.set_y(22);
  AddResponsePB resp;
  RpcController ctl;
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(42u, resp.result());
  EXPECT_TRUE(ctl.finished());

  // The controller is reusable after Reset().
  ctl.Reset();
  req.set_x(1);
  ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok());
  EXPECT_EQ(23u, resp.result());
}

TEST_P(RpcTest, AsyncAdd) {
  auto proxy = MakeProxy();
  AddRequestPB req;
  req.set_x(5);
  req.set_y(6);
  AddResponsePB resp;
  RpcController ctl;
  CountDownLatch done(1);
  proxy.AddAsync(req, &resp, &ctl, [&] { done.CountDown(); });
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ(11u, resp.result());
}

TEST_P(RpcTest, ServerSeesUserAddressAndDeadline) {
  auto proxy = MakeProxy();
  WhoAmIRequestPB req;
  WhoAmIResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(proxy.WhoAmI(req, &resp, &ctl).ok());
  EXPECT_EQ(CurrentUserName(), resp.user());
  // The client's address as the server sees it: a Unix client's socket has
  // no name.
  const char* expected = GetParam() == TestTransport::kTcp4   ? "127.0.0.1:"
                         : GetParam() == TestTransport::kTcp6 ? "[::1]:"
                                                              : "unix:(unnamed)";
  EXPECT_EQ(0u, resp.address().rfind(expected, 0)) << resp.address();
  EXPECT_GT(resp.client_deadline_ms_left(), 20000u);
  EXPECT_LE(resp.client_deadline_ms_left(), 30000u);
}

OSPREY_INSTANTIATE_OVER_TRANSPORTS(RpcTest);

// A large call's request and response are kept, cleared, for the method's
// next large call (MessagePool): nothing of one call reaches the next.
TEST(LargeMessageReuseTest, KeptMessagesCarryNothingOfTheLastCall) {
  TestServer server;
  ASSERT_TRUE(server.Start().ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  const ServiceMethod* echo = server.service->FindMethod("Echo");
  ASSERT_NE(echo, nullptr);
  {
    EchoRequestPB req;
    req.set_data(std::string(64 * 1024, 'a'));
    req.set_echo_sidecars(true);
    RpcController ctl;
    ASSERT_TRUE(ctl.AddOutboundSidecar("car", nullptr).ok());
    EchoResponsePB resp;
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
    EXPECT_EQ(ctl.num_inbound_sidecars(), 1);
  }
  // The server frees its call just after answering it.
  ASSERT_TRUE(WaitUntil(
      [&] { return echo->request_pool->kept() == 1 && echo->response_pool->kept() == 1; }));
  EXPECT_GE(MessagePool::total_kept_bytes(), 2 * 64 * 1024u);
  {
    // Parsed into the kept request: echo_sidecars must not survive from the
    // last call, nor the 'a's past this call's shorter data.
    EchoRequestPB req;
    std::string data(40 * 1024, 'b');
    data[100] = 'c';
    req.set_data(data);
    RpcController ctl;
    ASSERT_TRUE(ctl.AddOutboundSidecar("car", nullptr).ok());
    EchoResponsePB resp;
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
    EXPECT_EQ(ctl.num_inbound_sidecars(), 0);
    EXPECT_TRUE(resp.data() == data);
  }
  // Small calls never go near the pools.
  const ServiceMethod* add = server.service->FindMethod("Add");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(CheckedAdd(proxy, i, i).ok());
  EXPECT_EQ(add->request_pool->kept(), 0u);
  EXPECT_EQ(add->response_pool->kept(), 0u);
}

// Many large calls at once: each pool keeps at most its bound, and what
// the process keeps is the gauge's figure.
TEST(LargeMessageReuseTest, ManyLargeCallsAtOnceLeaveThePoolsWithinTheirBounds) {
  TestServer server;
  ServicePoolOptions options;
  options.worker_threads = 4;
  ASSERT_TRUE(server.Start(2, options).ok());
  auto client = MakeClient(2);
  CalculatorServiceProxy proxy(client, server.address);
  constexpr int kCalls = 40;
  struct Call {
    EchoRequestPB req;
    EchoResponsePB resp;
    RpcController ctl;
  };
  std::vector<Call> calls(kCalls);
  CountDownLatch done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    calls[i].req.set_data(std::string(200 * 1024, static_cast<char>('a' + i % 26)));
    calls[i].ctl.set_timeout(MonoDelta::FromSeconds(30));
    proxy.EchoAsync(calls[i].req, &calls[i].resp, &calls[i].ctl, [&] { done.CountDown(); });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(calls[i].ctl.status().ok()) << calls[i].ctl.status().ToString();
    EXPECT_TRUE(calls[i].resp.data() == calls[i].req.data()) << "call " << i;
  }
  const ServiceMethod* echo = server.service->FindMethod("Echo");
  ASSERT_TRUE(WaitUntil([&] { return echo->response_pool->kept() > 0; }));
  EXPECT_LE(echo->request_pool->kept(), MessagePool::kMaxKept);
  EXPECT_LE(echo->response_pool->kept(), MessagePool::kMaxKept);
  EXPECT_LE(echo->request_pool->kept_bytes() + echo->response_pool->kept_bytes(),
            MessagePool::total_kept_bytes());
}

TEST(RpcManyCallsTest, TenThousandAsyncCallsOverFourClientReactors) {
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 2;
  pool.queue_length = 20000;
  ASSERT_TRUE(server.Start(2, pool).ok());
  auto client = MakeClient(4);
  // Four proxies at four users: four connections, spread over the reactors.
  std::vector<std::unique_ptr<CalculatorServiceProxy>> proxies;
  for (int i = 0; i < 4; ++i) {
    proxies.push_back(std::make_unique<CalculatorServiceProxy>(client, server.address));
    proxies.back()->set_user("user" + std::to_string(i));
  }
  constexpr int kCalls = 10000;
  struct Call {
    AddRequestPB req;
    AddResponsePB resp;
    RpcController ctl;
  };
  std::vector<Call> calls(kCalls);
  CountDownLatch done(kCalls);
  std::atomic<int> callbacks{0};
  for (int i = 0; i < kCalls; ++i) {
    calls[i].req.set_x(i);
    calls[i].req.set_y(2 * i);
    calls[i].ctl.set_timeout(MonoDelta::FromSeconds(60));
    proxies[i % 4]->AddAsync(calls[i].req, &calls[i].resp, &calls[i].ctl, [&] {
      callbacks++;
      done.CountDown();
    });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(calls[i].ctl.status().ok()) << i << ": " << calls[i].ctl.status().ToString();
    ASSERT_EQ(static_cast<uint32_t>(3 * i), calls[i].resp.result()) << "call " << i;
  }
  EXPECT_EQ(kCalls, callbacks.load());
}

TEST_P(RpcTest, ThreadsShareOneProxy) {
  auto proxy = MakeProxy();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        AddRequestPB req;
        req.set_x(t);
        req.set_y(i);
        AddResponsePB resp;
        RpcController ctl;
        if (proxy.Add(req, &resp, &ctl).ok() && resp.result() == static_cast<uint32_t>(t + i)) {
          ok++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(8 * 200, ok.load());
}

TEST_P(RpcTest, TimeoutThenLateResponseIsDropped) {
  auto proxy = MakeProxy();
  // Connected and negotiated first: a first call's timeout counts those
  // too, and a slow host could spend it before the call is sent.
  ASSERT_TRUE(CheckedAdd(proxy, 1, 1).ok());
  SleepRequestPB req;
  req.set_sleep_micros(CalculatorService::kHeldSleep);  // answers once released
  SleepResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(1));
  MonoTime start = MonoTime::Now();
  Status s = proxy.Sleep(req, &resp, &ctl);
  MonoDelta took = MonoTime::Now() - start;
  ASSERT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("Sleep")) << s.ToString();
  // Where it was: written out, its answer not come (nothing unread).
  EXPECT_NE(std::string::npos, s.message().find(" (sent, no answer)")) << s.ToString();
  // Ended by its timeout, not by the answer (held up to 60 s).
  EXPECT_LT(took, MonoDelta::FromSeconds(5));
  // The late response arrives while the connection is in use by the next
  // call; it must be dropped without disturbing that call.
  AddRequestPB add;
  add.set_x(1);
  add.set_y(2);
  AddResponsePB add_resp;
  RpcController ctl2;
  ctl2.set_timeout(MonoDelta::FromSeconds(10));
  ASSERT_TRUE(server_.service->WaitForSleepsStarted(1));
  server_.service->ReleaseHeldSleeps();
  ASSERT_TRUE(server_.service->WaitForSleepsFinished(1));
  ASSERT_TRUE(proxy.Add(add, &add_resp, &ctl2).ok());
  EXPECT_EQ(3u, add_resp.result());
}

TEST_P(RpcTest, CancelCompletesWithAborted) {
  auto proxy = MakeProxy();
  SleepRequestPB req;
  req.set_sleep_micros(500000);
  SleepResponsePB resp;
  RpcController ctl;
  CountDownLatch done(1);
  std::atomic<int> callbacks{0};
  proxy.SleepAsync(req, &resp, &ctl, [&] {
    callbacks++;
    done.CountDown();
  });
  ASSERT_TRUE(server_.service->WaitForSleepsStarted(1));
  ctl.Cancel();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(5)));
  EXPECT_TRUE(ctl.status().IsAborted()) << ctl.status().ToString();
  ctl.Cancel();  // a second cancel after completion is harmless
  // The late answer comes ahead of the next call's on the connection: once
  // that call returns, the late one was read, and dropped.
  ASSERT_TRUE(server_.service->WaitForSleepsFinished(1));
  AddRequestPB add;
  add.set_x(1);
  add.set_y(2);
  AddResponsePB sum;
  RpcController next;
  ASSERT_TRUE(proxy.Add(add, &sum, &next).ok());
  EXPECT_EQ(1, callbacks.load());
}

TEST(RpcQueueTest, FullQueueGivesServiceUnavailable) {
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  pool.queue_length = 2;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  constexpr int kCalls = 10;
  SleepRequestPB req;
  req.set_sleep_micros(100000);
  std::vector<SleepResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    proxy.SleepAsync(req, &resps[i], &ctls[i], [&] { done.CountDown(); });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(20)));
  int ok = 0, busy = 0;
  for (auto& c : ctls) {
    if (c.status().ok()) ok++;
    if (c.status().IsServiceUnavailable()) {
      busy++;
      ASSERT_NE(nullptr, c.error_response());
      EXPECT_EQ(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY, c.error_response()->code());
    }
  }
  EXPECT_EQ(kCalls, ok + busy);
  EXPECT_GE(busy, kCalls - 3);  // one running, two queued
  EXPECT_GE(ok, 1);
}

TEST_P(RpcTest, UnknownServiceAndMethod) {
  OtherServiceProxy other(client_, server_.address);
  AddRequestPB req;
  req.set_x(1);
  req.set_y(1);
  AddResponsePB resp;
  RpcController ctl;
  Status s = other.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_NO_SUCH_SERVICE, ctl.error_response()->code());
  EXPECT_NE(std::string::npos, s.message().find("osprey.rpc_test.OtherService")) << s.ToString();

  Proxy raw(client_, server_.address, "osprey.rpc_test.CalculatorService");
  RpcController ctl2;
  s = raw.SyncRequest("NoSuchMethod", req, &resp, &ctl2);
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_NO_SUCH_METHOD, ctl2.error_response()->code());

  // A body that is not the method's request type.
  FailRequestPB wrong;
  wrong.set_message(std::string(3, '\xff'));
  RpcController ctl3;
  s = raw.SyncRequest("Add", wrong, &resp, &ctl3);
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_INVALID_REQUEST, ctl3.error_response()->code());

  // The connection survived all of that.
  RpcController ctl4;
  auto proxy = MakeProxy();
  ASSERT_TRUE(proxy.Add(req, &resp, &ctl4).ok());
}

// RpcController::RequireServerFeature sends required_feature_flags; the
// server refuses a call that needs a flag its service lacks, as Kudu's do,
// without running the handler, and the client learns which flags.
TEST_P(RpcTest, RequiredFeatureFlags) {
  auto proxy = MakeProxy();
  AddRequestPB req;
  req.set_x(1);
  req.set_y(2);

  // Supported: the call runs.
  AddResponsePB resp;
  RpcController ctl;
  ctl.RequireServerFeature(1);
  ctl.RequireServerFeature(2);
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(3u, resp.result());
  EXPECT_EQ(1, server_.service->adds_run.load());

  // One supported, two not: refused, naming the two, sync and async.
  for (bool async : {false, true}) {
    RpcController refused;
    refused.RequireServerFeature(2);
    refused.RequireServerFeature(7);
    refused.RequireServerFeature(4000000000u);
    if (async) {
      CountDownLatch done(1);
      proxy.AddAsync(req, &resp, &refused, [&] { done.CountDown(); });
      ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
      s = refused.status();
    } else {
      s = proxy.Add(req, &resp, &refused);
    }
    ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
    EXPECT_NE(std::string::npos,
              s.message().find("server does not support required feature flag(s) 7, 4000000000"))
        << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find("ERROR_INVALID_REQUEST")) << s.ToString();
    ASSERT_NE(nullptr, refused.error_response());
    EXPECT_EQ(wire::ErrorStatusPB::ERROR_INVALID_REQUEST, refused.error_response()->code());
    std::vector<uint32_t> unsupported(refused.error_response()->unsupported_feature_flags().begin(),
                                      refused.error_response()->unsupported_feature_flags().end());
    EXPECT_EQ((std::vector<uint32_t>{7, 4000000000u}), unsupported);
  }
  EXPECT_EQ(1, server_.service->adds_run.load());

  // The flags stay on the controller until Reset(); then the call runs.
  RpcController reused;
  reused.RequireServerFeature(9);
  reused.RequireServerFeature(9);
  EXPECT_EQ(std::vector<uint32_t>{9}, reused.required_server_features());
  EXPECT_FALSE(proxy.Add(req, &resp, &reused).ok());
  EXPECT_FALSE(proxy.Add(req, &resp, &reused).ok());
  reused.Reset();
  EXPECT_TRUE(reused.required_server_features().empty());
  s = proxy.Add(req, &resp, &reused);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(2, server_.service->adds_run.load());
}

TEST_P(RpcTest, ApplicationErrors) {
  auto proxy = MakeProxy();
  FailRequestPB req;
  req.set_message("no such thing");
  FailResponsePB resp;
  RpcController ctl;
  Status s = proxy.Fail(req, &resp, &ctl);
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("no such thing"));
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_APPLICATION, ctl.error_response()->code());

  RpcController ctl2;
  s = proxy.AppError(req, &resp, &ctl2);
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  // The extension arrives as field 100 of ErrorStatusPB.
  const auto& unknown =
      ctl2.error_response()->GetReflection()->GetUnknownFields(*ctl2.error_response());
  ASSERT_EQ(1, unknown.field_count());
  EXPECT_EQ(kCalculatorErrorExtension, unknown.field(0).number());
  CalculatorErrorPB app;
  ASSERT_TRUE(app.ParseFromString(unknown.field(0).length_delimited()));
  EXPECT_EQ("details: no such thing", app.extra_error_data());
}

TEST_P(RpcTest, RequestMissingRequiredFieldsFailsLocally) {
  auto proxy = MakeProxy();
  AddRequestPB req;
  req.set_x(1);  // y missing
  AddResponsePB resp;
  RpcController ctl;
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("y")) << s.ToString();
}

TEST_P(RpcTest, EightMebibyteRequestAndResponse) {
  auto proxy = MakeProxy();
  EchoRequestPB req;
  std::string data(8 * 1024 * 1024, 'a');
  for (size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>(i / 4096);
  req.set_data(data);
  EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  Status s = proxy.Echo(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(resp.data() == data);
}

TEST_P(RpcTest, SidecarsBothWays) {
  auto proxy = MakeProxy();
  EchoRequestPB req;
  req.set_data("main");
  req.set_echo_sidecars(true);
  RpcController ctl;
  std::vector<std::string> cars = {"first", "", std::string(100000, 'z'), "last"};
  for (size_t i = 0; i < cars.size(); ++i) {
    int idx;
    ASSERT_TRUE(ctl.AddOutboundSidecar(cars[i], &idx).ok());
    EXPECT_EQ(static_cast<int>(i), idx);
  }
  EchoResponsePB resp;
  ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
  EXPECT_EQ("main", resp.data());
  ASSERT_EQ(static_cast<int>(cars.size()), ctl.num_inbound_sidecars());
  for (size_t i = 0; i < cars.size(); ++i) {
    Slice s;
    ASSERT_TRUE(ctl.GetInboundSidecar(static_cast<int>(i), &s).ok());
    EXPECT_EQ(cars[i], s.ToString());
  }
  Slice none;
  EXPECT_TRUE(ctl.GetInboundSidecar(4, &none).IsInvalidArgument());
}

TEST(RpcRestartTest, ServerStoppedAndStartedAgain) {
  TestServer server;
  ASSERT_TRUE(server.Start().ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  AddRequestPB add;
  add.set_x(1);
  add.set_y(1);
  AddResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(proxy.Add(add, &resp, &ctl).ok());

  // Shut the server down with one call running and more queued: the running
  // one finishes, the queued ones are answered FATAL_SERVER_SHUTTING_DOWN.
  SleepRequestPB sleep;
  sleep.set_sleep_micros(300000);
  constexpr int kPending = 5;
  std::vector<SleepResponsePB> sleep_resps(kPending);
  std::vector<RpcController> sleep_ctls(kPending);
  CountDownLatch done(kPending);
  for (int i = 0; i < kPending; ++i) {
    sleep_ctls[i].set_timeout(MonoDelta::FromSeconds(30));
    proxy.SleepAsync(sleep, &sleep_resps[i], &sleep_ctls[i], [&] { done.CountDown(); });
  }
  ASSERT_TRUE(server.service->WaitForSleepsStarted(1));
  Sockaddr addr = server.address;
  server.messenger->Shutdown();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  // The one running (one worker) finished. Which of the five it is, their
  // deadlines decide (earliest first): each request carries the time its
  // call had left when it was sent, in whole milliseconds, so a call sent
  // a little later may carry a millisecond less than the one made before
  // it (once in CI, under ASan, the second ran and the first was queued).
  int finished = 0;
  for (int i = 0; i < kPending; ++i) {
    const Status& st = sleep_ctls[i].status();
    if (st.ok()) {
      ++finished;
      continue;
    }
    ASSERT_TRUE(st.IsRemoteError() || st.IsNetworkError()) << i << ": " << st.ToString();
    if (st.IsRemoteError()) {
      EXPECT_EQ(wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN,
                sleep_ctls[i].error_response()->code());
    }
  }
  EXPECT_EQ(1, finished) << "the call running when the server shut down, and only it, finishes";

  // With no server, calls fail fast.
  ctl.Reset();
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  Status s = proxy.Add(add, &resp, &ctl);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();

  // A new server on the same port: the next call reconnects.
  TestServer again;
  ASSERT_TRUE(again.Start(2, ServicePoolOptions(), MessengerBuilder("server2"), addr).ok());
  ctl.Reset();
  s = proxy.Add(add, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(2u, resp.result());
}

TEST(RpcWorkerlessTest, HandlersOnReactorThread) {
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 0;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  AddRequestPB req;
  req.set_x(2);
  req.set_y(3);
  AddResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok());
  EXPECT_EQ(5u, resp.result());
}

// One Add to `addr` from a new client, ended within `timeout`.
Status AddOnceTo(const Sockaddr& addr, MonoDelta timeout) {
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, addr);
  AddRequestPB req;
  req.set_x(1);
  req.set_y(1);
  AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(timeout);
  return proxy.Add(req, &resp, &ctl);
}

TEST(RpcConnectTest, RefusedConnectionFailsWithNetworkError) {
  // Bind a port, then close it, so nothing listens there.
  Socket s;
  ASSERT_TRUE(s.Init(Sockaddr::Loopback(0)).ok());
  ASSERT_TRUE(s.Bind(Sockaddr::Loopback(0)).ok());
  Sockaddr addr;
  ASSERT_TRUE(s.GetLocalAddress(&addr).ok());
  s.Close();
  Status st = AddOnceTo(addr, MonoDelta::FromSeconds(5));
  ASSERT_TRUE(st.IsNetworkError()) << st.ToString();
  EXPECT_NE(std::string::npos, st.ToString().find("refused")) << st.ToString();
}

// A server that accepts the connection (the kernel does, into the
// listen queue) but never negotiates: the call's timeout says it never got
// past the negotiation, not that the server was slow to answer it.
TEST(RpcConnectTest, ACallToAServerThatNeverNegotiatesTimesOutSayingSo) {
  Socket listener;
  ASSERT_TRUE(listener.Init(Sockaddr::Loopback(0)).ok());
  ASSERT_TRUE(listener.Bind(Sockaddr::Loopback(0)).ok());
  ASSERT_TRUE(listener.Listen(4).ok());
  Sockaddr addr;
  ASSERT_TRUE(listener.GetLocalAddress(&addr).ok());
  // Less than the negotiation's own timeout (3 s).
  Status st = AddOnceTo(addr, MonoDelta::FromMilliseconds(300));
  ASSERT_TRUE(st.IsTimedOut()) << st.ToString();
  EXPECT_NE(std::string::npos, st.ToString().find("(negotiating the connection)")) << st.ToString();
}

TEST(RpcUnixSocketTest, AStaleSocketFileIsReplacedALiveOneRefusedAndTheFileGoesAtShutdown) {
  Sockaddr path = ListenAddressFor(TestTransport::kUnix);
  {
    // What a crashed server leaves: a socket file nobody accepts on.
    Socket stale;
    ASSERT_TRUE(stale.Init(path).ok());
    ASSERT_TRUE(stale.Bind(path).ok());
  }
  ASSERT_TRUE(std::filesystem::exists(path.unix_path()));
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), MessengerBuilder("server"), path);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(path, server.address);

  // A second server on the same path is refused, and the first keeps it.
  TestServer second;
  s = second.Start(1, ServicePoolOptions(), MessengerBuilder("second"), path);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("another process listens on it")) << s.ToString();
  auto client = MakeClient();
  CalculatorServiceProxy proxy(client, path);
  s = CheckedAdd(proxy, 2, 3);
  ASSERT_TRUE(s.ok()) << s.ToString();

  server.messenger->Shutdown();
  EXPECT_FALSE(std::filesystem::exists(path.unix_path()));
}

TEST(RpcNamedProxyTest, LocalhostByNameAndANameThatDoesNotResolve) {
  TestServer server;
  ASSERT_TRUE(server.Start().ok());
  auto client = MakeClient();
  // localhost may list ::1 first, where nothing listens: the call goes on
  // to 127.0.0.1.
  CalculatorServiceProxy proxy(client, "localhost:" + std::to_string(server.address.port()));
  Status s = CheckedAdd(proxy, 2, 3);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(proxy.remote().IsLoopback()) << proxy.remote().ToString();

  CalculatorServiceProxy nowhere(client, "no-such-host.invalid:7050");
  s = CheckedAdd(nowhere, 2, 3);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("cannot reach no-such-host.invalid:7050"))
      << s.ToString();
}

// Issue 48, item 4: a server pinned to one CPU with the default 4 reactors
// takes turns on it, a context switch each; its default is then 1.
TEST(RpcBuilderTest, TheDefaultReactorsAreAtMostTheCpusTheProcessMayRunOn) {
  cpu_set_t all;
  ASSERT_EQ(0, sched_getaffinity(0, sizeof(all), &all));
  const int cpus = CPU_COUNT(&all);
  auto reactors_of = [](MessengerBuilder b) {
    std::shared_ptr<Messenger> m;
    Status s = b.Build(&m);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return -1;
    int n = m->num_reactors();
    m->Shutdown();
    return n;
  };
  EXPECT_EQ(std::min(cpus, 4), reactors_of(MessengerBuilder("all")));
  // This thread pinned to its first CPU: Build reads the mask of the thread
  // that calls it (the reactors it starts inherit it).
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(0, sched_setaffinity(0, sizeof(one), &one));
  const int pinned = reactors_of(MessengerBuilder("pinned"));
  const int asked = reactors_of(MessengerBuilder("asked").set_num_reactors(3));
  ASSERT_EQ(0, sched_setaffinity(0, sizeof(all), &all));
  EXPECT_EQ(1, pinned);
  EXPECT_EQ(3, asked);  // a number set is kept, CPUs or not
}

TEST(RpcBuilderTest, BadSettingsAreRejected) {
  std::shared_ptr<Messenger> m;
  TcpKeepalive no_probes;
  no_probes.count = 0;
  EXPECT_TRUE(MessengerBuilder("x").set_tcp_keepalive(no_probes).Build(&m).IsInvalidArgument());
  TcpKeepalive negative;
  negative.user_timeout = MonoDelta::FromSeconds(-1);
  EXPECT_TRUE(MessengerBuilder("x").set_tcp_keepalive(negative).Build(&m).IsInvalidArgument());
  EXPECT_TRUE(MessengerBuilder("x").set_num_reactors(0).Build(&m).IsInvalidArgument());
  EXPECT_TRUE(MessengerBuilder("x").set_max_frame_size(1).Build(&m).IsInvalidArgument());
  // Issue 40, finding 6: Kudu's cap, so that no frame or header length
  // turns negative in an int.
  Status big = MessengerBuilder("x").set_max_frame_size(size_t{INT32_MAX} + 1).Build(&m);
  EXPECT_TRUE(big.IsInvalidArgument()) << big.ToString();
  EXPECT_NE(std::string::npos, big.message().find("INT32_MAX")) << big.ToString();
  EXPECT_TRUE(
      MessengerBuilder("x").set_max_negotiation_frame_size(10).Build(&m).IsInvalidArgument());
  ASSERT_TRUE(MessengerBuilder("x")
                  .set_max_frame_size(INT32_MAX)
                  .set_max_outbound_queue_bytes(INT32_MAX)
                  .Build(&m)
                  .ok());
  m->Shutdown();
  EXPECT_TRUE(MessengerBuilder("x")
                  .set_negotiation_timeout(MonoDelta::FromSeconds(0))
                  .Build(&m)
                  .IsInvalidArgument());
  ASSERT_TRUE(MessengerBuilder("x").Build(&m).ok());
  Sockaddr bound;
  ASSERT_TRUE(m->Listen(Sockaddr::Loopback(0), &bound).ok());
  EXPECT_NE(0, bound.port());
  EXPECT_TRUE(m->Listen(Sockaddr::Loopback(0), &bound).IsIllegalState());
  m->Shutdown();
  m->Shutdown();  // idempotent
}

TEST(RpcIdleTest, IdleConnectionIsClosedAndNextCallReconnects) {
  TestServer server;
  MessengerBuilder b("server");
  // Long enough that a slow host still counts the connection on both ends
  // before it goes (the reactors look for idle connections each second).
  b.set_idle_timeout(MonoDelta::FromSeconds(2));
  ASSERT_TRUE(server.Start(1, ServicePoolOptions(), b).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  AddRequestPB req;
  req.set_x(1);
  req.set_y(1);
  AddResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok());
  // Both ends show the connection, then the server closes it as idle, and
  // the client sees it go (bounded wait: at most 30 s).
  auto count = [](const std::shared_ptr<Messenger>& m) {
    std::vector<ConnectionInfo> conns;
    EXPECT_TRUE(m->DumpConnections(&conns).ok());
    return conns.size();
  };
  EXPECT_EQ(1u, count(client));
  EXPECT_EQ(1u, count(server.messenger));
  MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while ((count(server.messenger) > 0 || count(client) > 0) && MonoTime::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(0u, count(server.messenger)) << "the server did not close the idle connection";
  EXPECT_EQ(0u, count(client)) << "the client did not see the connection close";
  ctl.Reset();
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(1u, count(client));  // a new connection
}

}  // namespace
}  // namespace osprey::rpc_test

namespace osprey::rpc_test {
namespace {

// A handler that blocks until another call to the same service arrives:
// with more than one worker the second call must run, even though the pool
// prefers to leave calls to a running worker while handlers look fast.
class BlockingCalculator : public CalculatorService {
 public:
  void Sleep(const SleepRequestPB*, SleepResponsePB*, RpcContext* ctx) override {
    sleeping.CountDown();
    released_ok = release.WaitFor(MonoDelta::FromSeconds(20));
    ctx->RespondSuccess();
  }
  void Add(const AddRequestPB* req, AddResponsePB* resp, RpcContext* ctx) override {
    if (req->x() == 999) release.CountDown();
    CalculatorService::Add(req, resp, ctx);
  }
  CountDownLatch sleeping{1};
  CountDownLatch release{1};
  std::atomic<bool> released_ok{false};
};

TEST(RpcPoolTest, BlockedHandlerDoesNotStarveQueuedCalls) {
  std::shared_ptr<Messenger> server;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
  auto svc = std::make_unique<BlockingCalculator>();
  BlockingCalculator* raw = svc.get();
  ServicePoolOptions pool;
  pool.worker_threads = 2;
  ASSERT_TRUE(server->RegisterService(std::move(svc), pool).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, addr);

  // Many fast calls first, so the pool sees handlers as fast.
  AddRequestPB add;
  add.set_x(1);
  add.set_y(2);
  AddResponsePB add_resp;
  for (int i = 0; i < 200; ++i) {
    RpcController ctl;
    ASSERT_TRUE(proxy.Add(add, &add_resp, &ctl).ok());
  }
  SleepRequestPB sleep;
  sleep.set_sleep_micros(0);
  SleepResponsePB sleep_resp;
  RpcController sleep_ctl;
  CountDownLatch sleep_done(1);
  proxy.SleepAsync(sleep, &sleep_resp, &sleep_ctl, [&] { sleep_done.CountDown(); });
  ASSERT_TRUE(raw->sleeping.WaitFor(MonoDelta::FromSeconds(20)));
  add.set_x(999);
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  Status s = proxy.Add(add, &add_resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(sleep_done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_TRUE(raw->released_ok.load());
  EXPECT_TRUE(sleep_ctl.status().ok());
}

}  // namespace
}  // namespace osprey::rpc_test

namespace osprey::rpc_test {
namespace {

// A call whose client deadline passes while it waits in the service queue
// is answered without running its handler.
TEST(RpcQueueTest, CallPastItsDeadlineInTheQueueIsNotRun) {
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);

  SleepRequestPB sleep;
  sleep.set_sleep_micros(400000);
  SleepResponsePB sleep_resp;
  RpcController sleep_ctl;
  CountDownLatch sleep_done(1);
  proxy.SleepAsync(sleep, &sleep_resp, &sleep_ctl, [&] { sleep_done.CountDown(); });
  ASSERT_TRUE(server.service->WaitForSleepsStarted(1));
  // The only worker is busy for 400 ms; this call gives up after 50 ms.
  AddRequestPB add;
  add.set_x(1);
  add.set_y(2);
  AddResponsePB add_resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromMilliseconds(50));
  Status s = proxy.Add(add, &add_resp, &ctl);
  ASSERT_TRUE(s.IsTimedOut()) << s.ToString();
  ASSERT_TRUE(sleep_done.WaitFor(MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(sleep_ctl.status().ok());

  // The server reached the queued Add only after its deadline: not run.
  RpcController ctl2;
  ASSERT_TRUE(proxy.Add(add, &add_resp, &ctl2).ok());
  EXPECT_EQ(1, server.service->adds_run.load());
}

}  // namespace
}  // namespace osprey::rpc_test

namespace osprey::rpc_test {
namespace {

// RpcContext may answer from any thread after the handler has returned.
class DeferredEcho : public CalculatorService {
 public:
  ~DeferredEcho() override {
    for (auto& t : threads_) t.join();
  }
  void Echo(const EchoRequestPB* req, EchoResponsePB* resp, RpcContext* ctx) override {
    resp->set_data(req->data());
    ASSERT_TRUE(ctx->AddOutboundSidecar("late", nullptr).ok());
    std::lock_guard<std::mutex> l(mu_);
    threads_.emplace_back([this, ctx] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      answered_after_return = handler_returned.load();
      ctx->RespondSuccess();
    });
    handler_returned = true;
  }
  std::atomic<bool> handler_returned{false};
  std::atomic<bool> answered_after_return{false};

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

TEST(RpcContextTest, RespondsFromAnotherThreadAfterTheHandlerReturned) {
  std::shared_ptr<Messenger> server;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
  auto svc = std::make_unique<DeferredEcho>();
  DeferredEcho* raw = svc.get();
  ASSERT_TRUE(server->RegisterService(std::move(svc)).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, addr);
  EchoRequestPB req;
  req.set_data("deferred");
  EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ("deferred", resp.data());
  EXPECT_TRUE(raw->answered_after_return.load());
  Slice car;
  ASSERT_TRUE(ctl.GetInboundSidecar(0, &car).ok());
  EXPECT_EQ("late", car.ToString());
}

// Proxies to one (address, user) share one connection, whatever proxy
// object they are; another user gets its own. The server sees the client's
// port of the connection each call came on.
TEST(RpcConnectionTest, ProxiesShareTheConnectionOfTheirAddressAndUser) {
  TestServer server;
  ASSERT_TRUE(server.Start().ok());
  auto client = MakeClient(2);
  auto port_of = [&](CalculatorServiceProxy& proxy) {
    WhoAmIRequestPB req;
    WhoAmIResponsePB resp;
    RpcController ctl;
    EXPECT_TRUE(proxy.WhoAmI(req, &resp, &ctl).ok()) << ctl.status().ToString();
    return resp.address();
  };
  CalculatorServiceProxy a(client, server.address);
  CalculatorServiceProxy b(client, server.address);
  CalculatorServiceProxy other_user(client, server.address);
  other_user.set_user("someone-else");
  std::string first = port_of(a);
  EXPECT_EQ(first, port_of(b));
  EXPECT_EQ(first, port_of(a));
  EXPECT_NE(first, port_of(other_user));
}

}  // namespace
}  // namespace osprey::rpc_test
