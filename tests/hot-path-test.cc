// The hot path's ownership rules, each tried as a user would break them:
//
//  - an eventfd lent to a blocking caller is written only while that
//    caller holds it: never after the reactor could have closed it and
//    the number gone to a socket (WakeFdLease);
//  - a thread reading in a reactor's place holds its loop lock, and user
//    code it runs (a reactor-run service's handler) is refused blocking
//    calls as on the reactor thread, instead of waiting for itself.
//
// Each test is bounded by a watchdog, and each load loop by a count and a
// time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "child_server.h"
#include "contract_test_util.h"
#include "recording_proxy.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

// Four blocking callers on one reactor, each through its own proxy that
// cuts its connection at 3% of reads; their calls are idempotent and
// retried. A caller whose connection is cut while it reads gives its
// eventfd back, and the retry's end is written to it: before the lease,
// that write could land on whatever the number named by then, such as a
// new socket to a proxy, whose framing check sees an eventfd's 8 bytes.
// The server is another process, so no descriptor of its can take the
// number.
TEST(WakeFdLeaseTest, ACallersEventfdIsNeverWrittenOnceGivenBack) {
  Watchdog dog(std::chrono::seconds(90));
  ChildServer server;
  Sockaddr server_addr;
  ASSERT_TRUE(server.Spawn(0, &server_addr).ok());
  auto client = MakeClient(1);
  constexpr int kCallers = 4;
  std::vector<std::unique_ptr<RecordingProxy>> proxies;
  std::vector<Sockaddr> via(kCallers);
  for (int i = 0; i < kCallers; ++i) {
    proxies.push_back(std::make_unique<RecordingProxy>(server_addr));
    proxies.back()->CutAtRandomReads(0.03, /*seed=*/1000 + i);
    proxies.back()->CheckFraming(1 << 20);
    ASSERT_TRUE(proxies.back()->Start(&via[i]).ok());
  }
  RetryPolicy retry;
  retry.max_attempts = 20;
  retry.initial_backoff = MonoDelta::FromMicroseconds(100);
  retry.max_backoff = MonoDelta::FromMilliseconds(2);
  std::atomic<int> calls{0}, failed{0};
  std::string first_failure;
  std::mutex failure_mu;
  // At least 4 s, and on until the proxies cut 60 connections (a slow host
  // cuts fewer a second), at most 60 s.
  const MonoTime start = MonoTime::Now();
  auto total_cuts = [&] {
    int n = 0;
    for (auto& p : proxies) n += p->cuts();
    return n;
  };
  auto go_on = [&] {
    const MonoDelta ran = MonoTime::Now() - start;
    return ran < MonoDelta::FromSeconds(4) ||
           (ran < MonoDelta::FromSeconds(60) && total_cuts() < 60);
  };
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      CalculatorServiceProxy proxy(client, via[i]);
      ASSERT_TRUE(proxy.set_retry_policy(retry).ok());
      for (int n = 0; n < 20000 && go_on(); ++n) {
        AddRequestPB req;
        req.set_x(static_cast<uint32_t>(n));
        req.set_y(static_cast<uint32_t>(i));
        AddResponsePB resp;
        RpcController ctl;
        ctl.set_timeout(MonoDelta::FromSeconds(10));
        ctl.set_idempotent(true);
        Status s = proxy.Add(req, &resp, &ctl);
        calls.fetch_add(1);
        if (s.ok() && resp.result() == req.x() + req.y()) continue;
        failed.fetch_add(1);
        std::lock_guard<std::mutex> l(failure_mu);
        if (first_failure.empty()) {
          first_failure = s.ToString() + ", after " + std::to_string(ctl.attempts()) +
                          " attempts, " + std::to_string(ctl.attempts_sent()) + " of them sent";
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  int cuts = 0, foreign = 0;
  for (auto& p : proxies) {
    cuts += p->cuts();
    foreign += p->foreign_frames();
  }
  EXPECT_EQ(0, foreign) << "frames that were not the connections' own, over " << cuts
                        << " cuts and " << calls.load() << " calls";
  EXPECT_EQ(0, failed.load()) << first_failure;
  // The loop must have cut connections under parked callers to mean anything.
  EXPECT_GT(cuts, 50) << calls.load() << " calls";
  client->Shutdown();
}

// A service run on the reactor (worker_threads = 0) whose handler makes a
// blocking call through the server's own messenger, which must be refused
// (IllegalState) wherever the handler runs: the answer's result is 1 if it
// was, 2 if the call succeeded, 3 for any other end.
class BlockingOtherService : public OtherServiceIf {
 public:
  BlockingOtherService(std::shared_ptr<Messenger>* messenger, Sockaddr* address)
      : messenger_(messenger), address_(address) {}
  void Add(const AddRequestPB*, AddResponsePB* resp, RpcContext* ctx) override {
    CalculatorServiceProxy self(*messenger_, *address_);
    AddRequestPB req;
    req.set_x(1);
    req.set_y(2);
    AddResponsePB sum;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(3));
    Status s = self.Add(req, &sum, &ctl);
    resp->set_result(s.IsIllegalState() ? 1 : s.ok() ? 2 : 3);
    if (!s.IsIllegalState()) {
      std::lock_guard<std::mutex> l(mu);
      unexpected = s.ToString();
    }
    ctx->RespondSuccess();
  }
  std::mutex mu;
  std::string unexpected;

 private:
  std::shared_ptr<Messenger>* const messenger_;
  Sockaddr* const address_;
};

// One server reactor, a pooled service and a reactor-run one; a client
// alternates them on one connection. The worker that answered the pooled
// call waits on the connection and reads the next request itself, running
// the reactor-run handler while it holds the reactor's loop lock: its
// blocking call must be refused at once, as it is on the reactor thread,
// not wait for a reactor its own thread holds.
TEST(ReactorRunHandlerTest, ABlockingCallFromAHandlerAWorkerReadIsRefusedNotDeadlocked) {
  Watchdog dog(std::chrono::seconds(60));
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  ASSERT_TRUE(server.Start(1, pool).ok());
  auto other = std::make_unique<BlockingOtherService>(&server.messenger, &server.address);
  BlockingOtherService* handler = other.get();
  ServicePoolOptions on_reactor;
  on_reactor.worker_threads = 0;
  ASSERT_TRUE(server.messenger->RegisterService(std::move(other), on_reactor).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy calculator(client, server.address);
  OtherServiceProxy other_proxy(client, server.address);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(CheckedAdd(calculator, i, 1, MonoDelta::FromSeconds(5)).ok());
    AddRequestPB req;
    req.set_x(0);
    req.set_y(0);
    AddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(5));
    Status s = other_proxy.Add(req, &resp, &ctl);
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.ToString();
    std::lock_guard<std::mutex> l(handler->mu);
    ASSERT_EQ(1u, resp.result()) << "call " << i << ": " << handler->unexpected;
  }
  client->Shutdown();
}

}  // namespace
}  // namespace osprey::rpc_test
