// Shared fixtures for the end-to-end RPC tests: a CalculatorService
// implementation and a server Messenger on a loopback port.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "osprey/base/socket.h"
#include "osprey/rpc/messenger.h"
#include "rpc_test.osprey.h"

namespace osprey::rpc_test {

// What the end-to-end suites run over, as Kudu's rpc-test does.
enum class TestTransport { kTcp4, kTcp6, kUnix };

inline std::string TransportName(const ::testing::TestParamInfo<TestTransport>& info) {
  switch (info.param) {
    case TestTransport::kTcp4:
      return "TCPv4";
    case TestTransport::kTcp6:
      return "TCPv6";
    case TestTransport::kUnix:
      return "Unix";
  }
  return "?";
}

// Where a server of `t` listens: a free port on 127.0.0.1 or ::1, or a new
// Unix socket file under $TMPDIR (the listener removes it when it stops).
inline Sockaddr ListenAddressFor(TestTransport t) {
  static std::atomic<int> next{0};
  std::string spec;
  switch (t) {
    case TestTransport::kTcp4:
      spec = "127.0.0.1:0";
      break;
    case TestTransport::kTcp6:
      spec = "[::1]:0";
      break;
    case TestTransport::kUnix: {
      const char* tmp = getenv("TMPDIR");
      spec = "unix:" + std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/osprey-" +
             std::to_string(getpid()) + "-" + std::to_string(next++) + ".sock";
      break;
    }
  }
  Sockaddr a;
  Status s = Sockaddr::Parse(spec, &a);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return a;
}

#define OSPREY_INSTANTIATE_OVER_TRANSPORTS(fixture)                                     \
  INSTANTIATE_TEST_SUITE_P(Transports, fixture,                                         \
                           ::testing::Values(::osprey::rpc_test::TestTransport::kTcp4,  \
                                             ::osprey::rpc_test::TestTransport::kTcp6,  \
                                             ::osprey::rpc_test::TestTransport::kUnix), \
                           ::osprey::rpc_test::TransportName)

constexpr int kCalculatorErrorExtension = 100;

class CalculatorService : public CalculatorServiceIf {
 public:
  void Add(const AddRequestPB* req, AddResponsePB* resp, RpcContext* ctx) override {
    ++adds_run;
    resp->set_result(req->x() + req->y());
    ctx->RespondSuccess();
  }
  void Sleep(const SleepRequestPB* req, SleepResponsePB*, RpcContext* ctx) override {
    Count(&sleeps_started);
    if (req->sleep_micros() == kHeldSleep) {
      // Held until the test lets it go (ReleaseHeldSleeps), at most 60 s.
      std::unique_lock<std::mutex> l(count_mu_);
      count_cv_.wait_for(l, std::chrono::seconds(60), [this] { return held_released_; });
    } else {
      std::this_thread::sleep_for(
          std::chrono::microseconds(uint64_t{req->sleep_micros()} * sleep_factor.load()));
    }
    ctx->RespondSuccess();
    Count(&sleeps_finished);
  }
  void Echo(const EchoRequestPB* req, EchoResponsePB* resp, RpcContext* ctx) override {
    resp->set_data(req->data());
    if (req->echo_sidecars()) {
      for (int i = 0; i < ctx->num_inbound_sidecars(); ++i) {
        Slice s;
        ASSERT_TRUE(ctx->GetInboundSidecar(i, &s).ok());
        ASSERT_TRUE(ctx->AddOutboundSidecar(s.ToString(), nullptr).ok());
      }
    }
    ctx->RespondSuccess();
  }
  void Fail(const FailRequestPB* req, FailResponsePB*, RpcContext* ctx) override {
    ctx->RespondFailure(Status::InvalidArgument(req->message()));
  }
  void AppError(const FailRequestPB* req, FailResponsePB*, RpcContext* ctx) override {
    CalculatorErrorPB err;
    err.set_extra_error_data("details: " + req->message());
    ctx->RespondApplicationError(kCalculatorErrorExtension, req->message(), err);
  }
  void WhoAmI(const WhoAmIRequestPB*, WhoAmIResponsePB* resp, RpcContext* ctx) override {
    resp->set_user(ctx->remote_user());
    resp->set_address(ctx->remote_address().ToString());
    resp->set_principal(ctx->remote_principal());
    resp->set_authentication(AuthenticationMethodName(ctx->authentication_method()));
    if (!ctx->GetClientDeadline().IsMax()) {
      resp->set_client_deadline_ms_left(
          (ctx->GetClientDeadline() - MonoTime::Now()).ToMilliseconds());
    }
    ctx->RespondSuccess();
  }

  // Application feature flags this service supports: 1 and 2.
  static constexpr uint32_t kSupportedFeatures[] = {1, 2};
  bool SupportsFeature(uint32_t feature) const override {
    for (uint32_t f : kSupportedFeatures) {
      if (f == feature) return true;
    }
    return false;
  }

  // Blocks until `n` Sleep calls have started (finished), at most `timeout`.
  bool WaitForSleepsStarted(int n, MonoDelta timeout = MonoDelta::FromSeconds(20)) {
    return WaitForCount(sleeps_started, n, timeout);
  }
  bool WaitForSleepsFinished(int n, MonoDelta timeout = MonoDelta::FromSeconds(20)) {
    return WaitForCount(sleeps_finished, n, timeout);
  }

  // A Sleep of this many microseconds waits for ReleaseHeldSleeps instead.
  static constexpr uint32_t kHeldSleep = 0xffffffff;
  void ReleaseHeldSleeps() {
    std::lock_guard<std::mutex> l(count_mu_);
    held_released_ = true;
    count_cv_.notify_all();
  }

  std::atomic<int> sleeps_started{0};
  std::atomic<int> sleeps_finished{0};  // the sleep is over, its answer queued
  std::atomic<int> adds_run{0};
  // A slow server's Sleep: set once it serves (test_server --sleep-factor),
  // so atomic.
  std::atomic<uint32_t> sleep_factor{1};

 private:
  void Count(std::atomic<int>* counter) {
    std::lock_guard<std::mutex> l(count_mu_);
    ++*counter;
    count_cv_.notify_all();
  }
  bool WaitForCount(const std::atomic<int>& counter, int n, MonoDelta timeout) {
    std::unique_lock<std::mutex> l(count_mu_);
    return count_cv_.wait_for(l, std::chrono::nanoseconds(timeout.ToNanoseconds()),
                              [&] { return counter.load() >= n; });
  }
  std::mutex count_mu_;
  std::condition_variable count_cv_;
  bool held_released_ = false;  // guarded by count_mu_
};

// A server Messenger with a CalculatorService on 127.0.0.1:<free port>.
struct TestServer {
  std::shared_ptr<Messenger> messenger;
  Sockaddr address;
  CalculatorService* service = nullptr;  // owned by the messenger

  Status Start(int reactors = 2, ServicePoolOptions pool = ServicePoolOptions(),
               MessengerBuilder builder = MessengerBuilder("server"),
               const Sockaddr& bind = Sockaddr::Loopback(0)) {
    builder.set_num_reactors(reactors);
    OSPREY_RETURN_NOT_OK(builder.Build(&messenger));
    auto svc = std::make_unique<CalculatorService>();
    service = svc.get();
    OSPREY_RETURN_NOT_OK(messenger->RegisterService(std::move(svc), pool));
    return messenger->Listen(bind, &address);
  }
};

// Polls `condition` until it holds, at most `timeout`: for states no event
// announces (a connection's counters, say).
template <class Condition>
bool WaitUntil(Condition condition, MonoDelta timeout = MonoDelta::FromSeconds(20)) {
  MonoTime deadline = MonoTime::Now() + timeout;
  while (!condition()) {
    if (MonoTime::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A loopback address nothing listens on: a port the kernel gave, closed
// again (connecting to it is refused, unless another test takes it first).
inline Sockaddr ClosedLoopbackPort() {
  Sockaddr addr;
  Socket probe;
  EXPECT_TRUE(probe.Init(Sockaddr::Loopback(0)).ok());
  EXPECT_TRUE(probe.Bind(Sockaddr::Loopback(0)).ok());
  EXPECT_TRUE(probe.GetLocalAddress(&addr).ok());
  return addr;
}

// One Add of `x` + `y` through `proxy` within `timeout`: its status, or
// Corruption if the sum comes back wrong.
inline Status CheckedAdd(CalculatorServiceProxy& proxy, uint32_t x, uint32_t y,
                         MonoDelta timeout = MonoDelta::FromSeconds(10)) {
  AddRequestPB req;
  req.set_x(x);
  req.set_y(y);
  AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(timeout);
  Status s = proxy.Add(req, &resp, &ctl);
  if (s.ok() && resp.result() != x + y) {
    return Status::Corruption("wrong sum: " + std::to_string(x) + " + " + std::to_string(y) +
                              " came back " + std::to_string(resp.result()));
  }
  return s;
}

inline std::shared_ptr<Messenger> MakeClient(
    int reactors = 1, MessengerBuilder builder = MessengerBuilder("client")) {
  std::shared_ptr<Messenger> m;
  builder.set_num_reactors(reactors);
  Status s = builder.Build(&m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m;
}

}  // namespace osprey::rpc_test
