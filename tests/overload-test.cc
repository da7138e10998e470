// Overload: thousands of connections at once, a cap on server connections,
// and a storm of calls against a small service queue. The server keeps
// serving, answers the excess at once, and every callback runs exactly once.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "hostile_test_util.h"
#include "osprey/base/countdown_latch.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

// Raises the soft descriptor limit to the hard one (up to `want`); false if
// the hard limit is below `need`.
bool RaiseFdLimit(rlim_t need, rlim_t want) {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) return false;
  rlim_t target = rl.rlim_max == RLIM_INFINITY ? want : std::min(rl.rlim_max, want);
  if (rl.rlim_cur < target) {
    rl.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  }
  return true;
}

struct AddCall {
  AddRequestPB req;
  AddResponsePB resp;
  RpcController ctl;
};

// One Add call per proxy, all at once; returns how many succeeded.
int CallEach(const std::vector<std::unique_ptr<CalculatorServiceProxy>>& proxies, size_t begin,
             size_t end, std::string* first_error) {
  std::vector<AddCall> calls(end - begin);
  CountDownLatch done(static_cast<int>(calls.size()));
  for (size_t i = begin; i < end; ++i) {
    AddCall& c = calls[i - begin];
    c.req.set_x(static_cast<uint32_t>(i));
    c.req.set_y(1);
    c.ctl.set_timeout(MonoDelta::FromSeconds(60));
    proxies[i]->AddAsync(c.req, &c.resp, &c.ctl, [&done] { done.CountDown(); });
  }
  EXPECT_TRUE(done.WaitFor(MonoDelta::FromSeconds(90)));
  int ok = 0;
  for (size_t i = begin; i < end; ++i) {
    AddCall& c = calls[i - begin];
    if (c.ctl.status().ok() && c.resp.result() == i + 1) {
      ++ok;
    } else if (first_error->empty()) {
      *first_error = "call " + std::to_string(i) + ": " + c.ctl.status().ToString();
    }
  }
  return ok;
}

std::vector<std::unique_ptr<CalculatorServiceProxy>> MakeProxies(
    const std::shared_ptr<Messenger>& client, const Sockaddr& addr, int n) {
  std::vector<std::unique_ptr<CalculatorServiceProxy>> proxies;
  for (int i = 0; i < n; ++i) {
    proxies.push_back(std::make_unique<CalculatorServiceProxy>(client, addr));
    // A user of its own: a connection of its own.
    proxies.back()->set_user("flood-" + std::to_string(i));
  }
  return proxies;
}

TEST(ConnectionFloodTest, TwoThousandConcurrentConnectionsEachMakeACall) {
  constexpr int kConns = 2000;
  // 4,000 sockets, and worker sets (two descriptors per server connection,
  // up to an eighth of the limit) for as many as the limit allows.
  if (!RaiseFdLimit(6000, 16384)) GTEST_SKIP() << "hard RLIMIT_NOFILE below 6000";
  TestServer server;
  ServicePoolOptions pool;
  pool.queue_length = kConns;
  ASSERT_TRUE(server.Start(2, pool).ok());
  int baseline = CountOpenFds();
  {
    auto client = MakeClient(2);
    auto proxies = MakeProxies(client, server.address, kConns);
    // Open them a few hundred at a time (the listen backlog is 1024), each
    // with a call; they all stay open.
    std::string err;
    int ok = 0;
    for (size_t b = 0; b < kConns; b += 250) ok += CallEach(proxies, b, b + 250, &err);
    ASSERT_EQ(kConns, ok) << err;
    // Both ends of all 2,000 are open at once.
    EXPECT_GE(CountOpenFds(), baseline + 2 * kConns);
    // And every one of them still works, all calls at once.
    ok = CallEach(proxies, 0, kConns, &err);
    EXPECT_EQ(kConns, ok) << err;
    client->Shutdown();
  }
  // The server lets go of every connection the client closed.
  EXPECT_LE(WaitForFdCountAtMost(baseline, MonoDelta::FromSeconds(20)), baseline);
}

// A server connection's worker set (Connection::ParkForWorker) costs two
// descriptors; a process keeps at most an eighth of RLIMIT_NOFILE of them,
// so that they cannot starve its sockets. Past that, connections open
// without one and are served as any other.
TEST(ConnectionFloodTest, WorkerSetsStopAtAnEighthOfTheDescriptorLimit) {
  rlimit saved{};
  ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &saved));
  constexpr rlim_t kLimit = 320;  // room for 40 worker sets
  constexpr int kConns = 60;
  if (saved.rlim_cur < kLimit) GTEST_SKIP() << "soft RLIMIT_NOFILE below " << kLimit;
  TestServer server;
  ServicePoolOptions pool;
  pool.queue_length = 1000;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto client = MakeClient(1);
  const int baseline = CountOpenFds();
  struct Restore {
    rlimit limit;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{saved};
  rlimit low = saved;
  low.rlim_cur = kLimit;
  ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &low));
  {
    auto proxies = MakeProxies(client, server.address, kConns);
    std::string err;
    EXPECT_EQ(kConns, CallEach(proxies, 0, kConns, &err)) << err;
    // Both ends of each connection, and 40 worker sets of two.
    EXPECT_TRUE(WaitUntil([&] { return CountOpenFds() == baseline + 2 * kConns + 2 * 40; },
                          MonoDelta::FromSeconds(10)))
        << CountOpenFds() << " descriptors, " << baseline << " before";
    // Every one still works, the ones without a set included.
    EXPECT_EQ(kConns, CallEach(proxies, 0, kConns, &err)) << err;
    client->Shutdown();
  }
  // The server let go of every socket and set (the client's own
  // descriptors went with it).
  EXPECT_LE(WaitForFdCountAtMost(baseline, MonoDelta::FromSeconds(20)), baseline);
}

TEST(ConnectionFloodTest, ConnectionsPastTheMaximumAreClosedAtOnce) {
  constexpr int kMax = 100;
  TestServer server;
  ServicePoolOptions pool;
  pool.queue_length = 1000;
  // All from one address, all negotiating at once: as many may be (the
  // bound per address before authentication is pre-auth-test's).
  ASSERT_TRUE(server
                  .Start(2, pool,
                         MessengerBuilder("server")
                             .set_max_server_connections(kMax)
                             .set_unauthenticated_limits(kMax, kMax, 0))
                  .ok());
  auto client = MakeClient(2);
  auto proxies = MakeProxies(client, server.address, kMax);
  std::string err;
  ASSERT_EQ(kMax, CallEach(proxies, 0, kMax, &err)) << err;

  // Twenty more: each is accepted and closed at once, before it says a word.
  int fds_before_extra = CountOpenFds();
  for (int i = 0; i < 20; ++i) {
    RawConn c;
    ASSERT_TRUE(c.Connect(server.address).ok());
    MonoTime start = MonoTime::Now();
    ASSERT_TRUE(c.WaitForClose(MonoDelta::FromSeconds(5))) << "extra connection " << i;
    EXPECT_LT((MonoTime::Now() - start).ToMilliseconds(), 3000);
  }
  EXPECT_LE(WaitForFdCountAtMost(fds_before_extra), fds_before_extra) << "a refused socket leaked";
  // A proxy call past the maximum fails rather than hangs.
  {
    CalculatorServiceProxy extra(client, server.address);
    extra.set_user("one-too-many");
    AddRequestPB req;
    req.set_x(1);
    req.set_y(1);
    AddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    Status s = extra.Add(req, &resp, &ctl);
    EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  }
  // The first hundred keep working.
  EXPECT_EQ(kMax, CallEach(proxies, 0, kMax, &err)) << err;
}

TEST(OverloadTest, CallStormAgainstSmallQueue) {
  constexpr int kCalls = 5000;
  constexpr int kSleepMicros = 20000;
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  pool.queue_length = 50;
  // The full queue's refusals, first in first out: 20 ms handlers are far
  // over the overload control's delay target, which would refuse queued
  // calls too (ServiceQueueOverloadTest, OverloadControlTest).
  pool.overload_control = false;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  {
    // Warm up, so RSS counts the connection and threads already.
    SleepRequestPB req;
    req.set_sleep_micros(1);
    SleepResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Sleep(req, &resp, &ctl).ok());
  }
  int64_t rss_before = ReadRssKiB();

  struct Call {
    SleepResponsePB resp;
    RpcController ctl;
    std::atomic<int> callbacks{0};
    std::atomic<int64_t> done_at_us{0};
  };
  auto calls = std::make_unique<Call[]>(kCalls);
  SleepRequestPB req;
  req.set_sleep_micros(kSleepMicros);
  CountDownLatch done(kCalls);
  MonoTime start = MonoTime::Now();
  for (int i = 0; i < kCalls; ++i) {
    Call* c = &calls[i];
    c->ctl.set_timeout(MonoDelta::FromSeconds(120));
    proxy.SleepAsync(req, &c->resp, &c->ctl, [c, start, &done] {
      c->done_at_us.store((MonoTime::Now() - start).ToMicroseconds());
      c->callbacks++;
      done.CountDown();
    });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));

  int ok = 0, busy = 0;
  std::vector<int64_t> busy_at;
  int64_t last_ok_at = 0;
  for (int i = 0; i < kCalls; ++i) {
    Call& c = calls[i];
    ASSERT_EQ(1, c.callbacks.load()) << "call " << i;
    Status s = c.ctl.status();
    if (s.ok()) {
      ++ok;
      last_ok_at = std::max(last_ok_at, c.done_at_us.load());
    } else {
      ASSERT_TRUE(s.IsServiceUnavailable()) << "call " << i << ": " << s.ToString();
      // The reason, said once: "Service unavailable: the service queue of ...".
      EXPECT_EQ(0u, s.message().rfind("the service queue of ", 0)) << s.ToString();
      ASSERT_NE(nullptr, c.ctl.error_response());
      EXPECT_EQ(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY, c.ctl.error_response()->code());
      ++busy;
      busy_at.push_back(c.done_at_us.load());
    }
  }
  EXPECT_EQ(kCalls, ok + busy);
  EXPECT_GE(ok, 50) << "a full queue's worth is served";
  EXPECT_GT(busy, kCalls / 2) << "the excess is turned away";
  // Turned away promptly: most rejections land before the queued calls are
  // done (those take at least 50 x 20 ms once the queue filled).
  std::sort(busy_at.begin(), busy_at.end());
  int64_t busy_p90 = busy_at[busy_at.size() * 9 / 10];
  EXPECT_LT(busy_p90, last_ok_at) << "rejections are not prompt: p90 " << busy_p90
                                  << " us, last success " << last_ok_at << " us";

  // Memory is back near where it was.
  int64_t rss_after = ReadRssKiB();
  EXPECT_LT(rss_after, rss_before + 200 * 1024)
      << "RSS grew from " << rss_before << " KiB to " << rss_after << " KiB";

  // And a normal call works afterwards.
  AddRequestPB add;
  add.set_x(2);
  add.set_y(3);
  AddResponsePB add_resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(20));
  Status s = proxy.Add(add, &add_resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(5u, add_resp.result());

  // The callbacks never run again: once the client has shut down (its
  // reactors joined), none can, so a second run would show now.
  client->Shutdown();
  for (int i = 0; i < kCalls; ++i) ASSERT_EQ(1, calls[i].callbacks.load()) << "call " << i;
}

double MetricOf(Messenger* m, const std::string& name, const MetricLabels& labels) {
  for (const MetricValue& v : m->metrics()->Snapshot()) {
    if (v.name == name && v.labels == labels) return v.value;
  }
  return -1;
}

// Issue 42: a client that sends 500 calls and vanishes left the queue (60)
// full of calls nobody would read, and the next live client's call was
// refused ERROR_SERVER_TOO_BUSY. Its calls now leave the queue when its
// connection closes. Failed on the old code: the live call was refused.
TEST(OverloadControlTest, AVanishedClientsCallsLeaveTheQueueAtOnce) {
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  pool.queue_length = 60;
  ASSERT_TRUE(server.Start(1, pool).ok());
  Messenger* s = server.messenger.get();
  const MetricLabels sleep_method = {{"method", "osprey.rpc_test.CalculatorService.Sleep"}};

  // The only worker is held.
  auto holder = MakeClient(1);
  CalculatorServiceProxy holder_proxy(holder, server.address);
  SleepRequestPB held;
  held.set_sleep_micros(CalculatorService::kHeldSleep);
  SleepResponsePB held_resp;
  RpcController held_ctl;
  held_ctl.set_timeout(MonoDelta::FromSeconds(60));
  CountDownLatch held_done(1);
  holder_proxy.SleepAsync(held, &held_resp, &held_ctl, [&] { held_done.CountDown(); });
  ASSERT_TRUE(server.service->WaitForSleepsStarted(1));

  // 500 calls, then the client is gone.
  constexpr int kVanishing = 500;
  {
    auto vanishing = MakeClient(1);
    CalculatorServiceProxy proxy(vanishing, server.address);
    struct Call {
      SleepResponsePB resp;
      RpcController ctl;
    };
    auto calls = std::make_unique<Call[]>(kVanishing);
    SleepRequestPB req;
    req.set_sleep_micros(10);
    CountDownLatch done(kVanishing);
    for (int i = 0; i < kVanishing; ++i) {
      calls[i].ctl.set_timeout(MonoDelta::FromSeconds(60));
      proxy.SleepAsync(req, &calls[i].resp, &calls[i].ctl, [&done] { done.CountDown(); });
    }
    ASSERT_TRUE(WaitUntil([&] {
      return MetricOf(s, "osprey_server_calls_received_total", sleep_method) == kVanishing + 1;
    })) << MetricOf(s, "osprey_server_calls_received_total", sleep_method);
    vanishing->Shutdown();
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(30)));
  }
  // The server saw it go: only the holder's connection is left.
  ASSERT_TRUE(WaitUntil([&] {
    std::vector<ConnectionInfo> conns;
    return s->DumpConnections(&conns).ok() && conns.size() == 1;
  }));

  // A live client's call is queued, not refused, and answered once the
  // worker is free.
  auto live = MakeClient(1);
  CalculatorServiceProxy live_proxy(live, server.address);
  AddRequestPB add;
  add.set_x(2);
  add.set_y(3);
  AddResponsePB sum;
  RpcController live_ctl;
  live_ctl.set_timeout(MonoDelta::FromSeconds(60));
  CountDownLatch live_done(1);
  live_proxy.AddAsync(add, &sum, &live_ctl, [&] { live_done.CountDown(); });
  ASSERT_TRUE(WaitUntil([&] {
    return MetricOf(s, "osprey_server_calls_received_total",
                    {{"method", "osprey.rpc_test.CalculatorService.Add"}}) == 1;
  }));
  EXPECT_EQ(1, MetricOf(s, "osprey_server_queue_length",
                        {{"service", "osprey.rpc_test.CalculatorService"}}));
  server.service->ReleaseHeldSleeps();
  ASSERT_TRUE(live_done.WaitFor(MonoDelta::FromSeconds(30)));
  EXPECT_TRUE(live_ctl.status().ok()) << live_ctl.status().ToString();
  EXPECT_EQ(5u, sum.result());
  ASSERT_TRUE(held_done.WaitFor(MonoDelta::FromSeconds(30)));
  EXPECT_TRUE(held_ctl.status().ok()) << held_ctl.status().ToString();
  // None of the vanished client's calls ran.
  EXPECT_EQ(1, server.service->sleeps_started.load());
}

// Work wasted: a handler that answers after its client's deadline is
// counted in osprey_server_calls_answered_after_deadline_total.
TEST(OverloadControlTest, AnAnswerSentAfterItsDeadlineIsCounted) {
  TestServer server;
  ASSERT_TRUE(server.Start(1).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  const MetricLabels sleep_method = {{"method", "osprey.rpc_test.CalculatorService.Sleep"}};
  Messenger* s = server.messenger.get();
  SleepRequestPB req;
  req.set_sleep_micros(1000);
  SleepResponsePB resp;
  RpcController in_time;
  in_time.set_timeout(MonoDelta::FromSeconds(10));
  ASSERT_TRUE(proxy.Sleep(req, &resp, &in_time).ok());
  // Held until its caller gave up; a timeout long enough that a slow host
  // still starts it before its deadline (or it would be dropped unrun).
  req.set_sleep_micros(CalculatorService::kHeldSleep);
  RpcController late;
  late.set_timeout(MonoDelta::FromSeconds(1));
  EXPECT_TRUE(proxy.Sleep(req, &resp, &late).IsTimedOut());
  ASSERT_TRUE(server.service->WaitForSleepsStarted(2));
  // Its deadline on the server counts from when the server read it, after
  // the client sent it: a second more, so that it has passed there too.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  server.service->ReleaseHeldSleeps();
  ASSERT_TRUE(server.service->WaitForSleepsFinished(2));
  EXPECT_TRUE(WaitUntil([&] {
    return MetricOf(s, "osprey_server_calls_answered_after_deadline_total", sleep_method) == 1;
  })) << MetricOf(s, "osprey_server_calls_answered_after_deadline_total", sleep_method);
}

// A server that refuses every call ERROR_SERVER_TOO_BUSY: its one worker
// and its one queue place are held, by calls due in 60 s. A call due later
// is refused; one due sooner would push the queued one out (deadline
// order), so the tests' calls are due later.
constexpr MonoDelta kAfterTheHolders = MonoDelta::FromSeconds(120);
struct RefusingServer {
  TestServer server;
  std::shared_ptr<Messenger> holder;
  std::unique_ptr<CalculatorServiceProxy> proxy;
  SleepRequestPB held;
  SleepResponsePB resp[2];
  RpcController ctl[2];
  std::unique_ptr<CountDownLatch> done;

  void Start() {
    ServicePoolOptions pool;
    pool.worker_threads = 1;
    pool.queue_length = 1;
    ASSERT_TRUE(server.Start(1, pool).ok());
    holder = MakeClient(1);
    proxy = std::make_unique<CalculatorServiceProxy>(holder, server.address);
    held.set_sleep_micros(CalculatorService::kHeldSleep);
    done = std::make_unique<CountDownLatch>(2);
    for (int i = 0; i < 2; ++i) {
      ctl[i].set_timeout(MonoDelta::FromSeconds(60));
      proxy->SleepAsync(held, &resp[i], &ctl[i], [this] { done->CountDown(); });
      if (i == 0) {
        ASSERT_TRUE(server.service->WaitForSleepsStarted(1));
      }
    }
    ASSERT_TRUE(WaitUntil([&] {
      return MetricOf(server.messenger.get(), "osprey_server_queue_length",
                      {{"service", "osprey.rpc_test.CalculatorService"}}) == 1;
    }));
  }
  double AddsReceived() {
    return MetricOf(server.messenger.get(), "osprey_server_calls_received_total",
                    {{"method", "osprey.rpc_test.CalculatorService.Add"}});
  }
  ~RefusingServer() {
    if (server.service != nullptr) server.service->ReleaseHeldSleeps();
    if (done != nullptr) {
      EXPECT_TRUE(done->WaitFor(MonoDelta::FromSeconds(30)));
    }
  }
};

RetryPolicy QuickRetries() {
  RetryPolicy p;
  p.max_attempts = 10;
  p.initial_backoff = MonoDelta::FromMicroseconds(100);
  p.max_backoff = MonoDelta::FromMilliseconds(1);
  return p;
}

// Calls `n` Adds one after another, each with QuickRetries; returns how
// many ended with a message containing `said`.
int AddsWithRetries(const std::shared_ptr<Messenger>& client, const Sockaddr& to, int n,
                    const std::string& said) {
  CalculatorServiceProxy proxy(client, to);
  EXPECT_TRUE(proxy.set_retry_policy(QuickRetries()).ok());
  int matched = 0;
  for (int i = 0; i < n; ++i) {
    Status s = CheckedAdd(proxy, 1, 2, kAfterTheHolders);
    EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
    if (s.message().find(said) != std::string::npos) matched++;
  }
  return matched;
}

// Retries stay within about 10% of the calls: a refusing server is sent
// at most 1.1 x the calls offered (plus the budget's minimum), not ten
// attempts each.
TEST(ClientGuardsTest, TheRetryBudgetCapsRetriesToARefusingServer) {
  RefusingServer refusing;
  ASSERT_NO_FATAL_FAILURE(refusing.Start());
  constexpr int kCalls = 200;
  auto client = MakeClient(1, MessengerBuilder("client").set_retry_budget(true, 0.1, 0));
  int spent = AddsWithRetries(client, refusing.server.address, kCalls, "retry budget is spent");
  double sent = refusing.AddsReceived();
  EXPECT_GE(sent, kCalls);
  EXPECT_LE(sent, kCalls * 1.1 + 1) << "attempts sent for " << kCalls << " calls";
  EXPECT_GE(spent, kCalls - kCalls / 10 - 1);
}

TEST(ClientGuardsTest, WithoutTheBudgetEveryCallIsRetriedToItsLastAttempt) {
  RefusingServer refusing;
  ASSERT_NO_FATAL_FAILURE(refusing.Start());
  constexpr int kCalls = 20;
  auto client = MakeClient(1, MessengerBuilder("client").set_retry_budget(false));
  EXPECT_EQ(0, AddsWithRetries(client, refusing.server.address, kCalls, "retry budget"));
  EXPECT_EQ(kCalls * QuickRetries().max_attempts, refusing.AddsReceived());
}

// Adaptive throttling: once the server refuses nearly everything, calls are
// refused on the client and never sent.
TEST(ClientGuardsTest, ThrottlingRefusesLocallyWhatTheServerWouldRefuse) {
  RefusingServer refusing;
  ASSERT_NO_FATAL_FAILURE(refusing.Start());
  constexpr int kCalls = 1000;
  auto client = MakeClient(1, MessengerBuilder("client").set_client_throttling(true));
  CalculatorServiceProxy proxy(client, refusing.server.address);
  int local = 0;
  for (int i = 0; i < kCalls; ++i) {
    Status s = CheckedAdd(proxy, 1, 2, kAfterTheHolders);
    ASSERT_TRUE(s.IsServiceUnavailable()) << s.ToString();
    if (s.message().find("adaptive throttling") != std::string::npos) local++;
  }
  // With no call accepted the probability is r / (r + 1): after the first
  // few nearly every call stays on the client.
  EXPECT_GE(local, kCalls - 100);
  EXPECT_EQ(kCalls - local, refusing.AddsReceived());
}

// RpcController::attempts_sent(): what each call cost the server, in
// requests. Its sum over the calls is the server's count of calls
// received, with retries, with the budget cutting them short, and with
// calls the throttle kept on the client (sent 0, attempts 1).
TEST(ClientGuardsTest, AttemptsSentAddUpToWhatTheServerReceived) {
  struct Case {
    const char* name;
    MessengerBuilder builder;
    bool retries;
  };
  for (Case c :
       {Case{"retries, no budget", MessengerBuilder("client").set_retry_budget(false), true},
        Case{"retries within the budget", MessengerBuilder("client").set_retry_budget(true, 0.1, 0),
             true},
        Case{"throttling, no retries", MessengerBuilder("client").set_client_throttling(true),
             false}}) {
    SCOPED_TRACE(c.name);
    RefusingServer refusing;
    ASSERT_NO_FATAL_FAILURE(refusing.Start());
    auto client = MakeClient(1, c.builder);
    CalculatorServiceProxy proxy(client, refusing.server.address);
    if (c.retries) {
      ASSERT_TRUE(proxy.set_retry_policy(QuickRetries()).ok());
    }
    int sent = 0, unsent = 0;
    for (int i = 0; i < 100; ++i) {
      AddRequestPB req;
      req.set_x(1);
      req.set_y(2);
      AddResponsePB resp;
      RpcController ctl;
      ctl.set_timeout(kAfterTheHolders);
      ASSERT_TRUE(proxy.Add(req, &resp, &ctl).IsServiceUnavailable());
      EXPECT_LE(ctl.attempts_sent(), ctl.attempts());
      if (ctl.attempts_sent() == 0) {
        // Only the throttle keeps a call from being sent here.
        EXPECT_NE(std::string::npos, ctl.status().message().find("adaptive throttling"))
            << ctl.status().ToString();
        EXPECT_EQ(1, ctl.attempts());
        EXPECT_EQ(nullptr, ctl.error_response());
        unsent++;
      } else {
        // Refused by the server: every attempt was sent.
        EXPECT_EQ(ctl.attempts(), ctl.attempts_sent());
        ASSERT_NE(nullptr, ctl.error_response());
      }
      sent += ctl.attempts_sent();
    }
    EXPECT_EQ(sent, refusing.AddsReceived());
    if (c.retries) {
      EXPECT_EQ(0, unsent);
      EXPECT_GT(sent, 100);
    } else {
      EXPECT_GT(unsent, 50);
    }
  }
}

TEST(ClientGuardsTest, ThrottlingIsOffByDefault) {
  RefusingServer refusing;
  ASSERT_NO_FATAL_FAILURE(refusing.Start());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, refusing.server.address);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(CheckedAdd(proxy, 1, 2, kAfterTheHolders).IsServiceUnavailable());
  }
  EXPECT_EQ(50, refusing.AddsReceived());
}

}  // namespace
}  // namespace osprey::rpc_test
