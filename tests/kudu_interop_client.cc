// kudu-interop-client CHECK HOST:PORT [--rpc_encryption=disabled|optional|required]
//                     [--rpc_encrypt_loopback_connections] [--calls=N]
//
// An Osprey client that checks, against a live Apache Kudu server
// (kudu-calc-server, built from Kudu's source), what a user relies on
// beyond the handshake. scripts/kudu-interop.sh runs it; each CHECK prints
// "PASS <check>: <what was seen>" or "FAIL <check>: <why>" per assertion
// and exits 0 only if every one passed (2: usage).
//
//   deadline        a call's deadline reaches Kudu's service, and a Sleep
//                   longer than the timeout ends TimedOut on time
//   queue           the server runs with --service_queue_length=1: a burst
//                   is partly refused ServiceUnavailable, and with retries
//                   every call of the same burst succeeds
//   no-such-method  ERROR_NO_SUCH_METHOD, and for an unknown service Kudu's
//                   answer naming it
//   sidecars        calls carrying request sidecars (1 B to 1 MiB) are
//                   taken and answered
//   large           8 MiB out and 8 MiB back, byte for byte
//   exactly-once    --calls tracked AddExactlyOnce calls, 8 at a time,
//                   through a proxy that cuts every connection 150 ms after
//                   it opens; retried, Kudu's running total must grow by
//                   exactly --calls

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kudu_rtest_wire.pb.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/proxy.h"
#include "osprey/rpc/rpc_controller.h"
#include "recording_proxy.h"
#include "rpc_bench.osprey.h"

namespace {

using kudu::rpc_test::AddRequestPB;
using kudu::rpc_test::AddResponsePB;
using kudu::rpc_test::CalculatorServiceProxy;
using kudu::rpc_test::EchoRequestPB;
using kudu::rpc_test::EchoResponsePB;
using kudu::rpc_test::ExactlyOnceRequestPB;
using kudu::rpc_test::ExactlyOnceResponsePB;
using kudu::rpc_test::SleepRequestPB;
using kudu::rpc_test::SleepResponsePB;
using osprey::CountDownLatch;
using osprey::Messenger;
using osprey::MessengerBuilder;
using osprey::MonoDelta;
using osprey::MonoTime;
using osprey::RetryPolicy;
using osprey::RpcController;
using osprey::RpcEncryption;
using osprey::Sockaddr;
using osprey::Socket;
using osprey::Status;
using osprey::rpc_test::RecordingProxy;

int g_failures = 0;

// For settings this program makes itself: one that is refused is a bug here.
#define CHECK_OK_OR_DIE(expr)                                                   \
  do {                                                                          \
    Status _s = (expr);                                                         \
    if (!_s.ok()) {                                                             \
      std::fprintf(stderr, "kudu-interop-client: %s\n", _s.ToString().c_str()); \
      std::exit(2);                                                             \
    }                                                                           \
  } while (0)

void Report(bool pass, const std::string& check, const std::string& detail) {
  std::printf("%s %s: %s\n", pass ? "PASS" : "FAIL", check.c_str(), detail.c_str());
  std::fflush(stdout);
  if (!pass) ++g_failures;
}

std::string Describe(const RpcController& ctl) {
  std::string s = ctl.status().ToString();
  if (const auto* err = ctl.error_response()) {
    s += " [" + osprey::wire::ErrorStatusPB::RpcErrorCodePB_Name(err->code()) + "]";
  }
  return s;
}

// Kudu's Sleep, called by name.
Status Sleep(const CalculatorServiceProxy& proxy, const SleepRequestPB& req, SleepResponsePB* resp,
             RpcController* ctl) {
  return proxy.SyncRequest("Sleep", req, resp, ctl);
}

void CheckDeadline(const std::shared_ptr<Messenger>& m, const Sockaddr& addr) {
  CalculatorServiceProxy proxy(m, addr);
  SleepRequestPB req;
  SleepResponsePB resp;
  req.set_sleep_micros(1000);
  req.set_client_timeout_defined(true);  // Kudu answers an error if no deadline came
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  Status s = Sleep(proxy, req, &resp, &ctl);
  Report(s.ok(), "deadline-sent",
         s.ok() ? "Kudu's Sleep saw the call's deadline" : "Sleep: " + Describe(ctl));

  req.set_sleep_micros(3'000'000);
  RpcController late;
  late.set_timeout(MonoDelta::FromMilliseconds(300));
  MonoTime start = MonoTime::Now();
  s = Sleep(proxy, req, &resp, &late);
  double took = (MonoTime::Now() - start).ToSeconds();
  Report(s.IsTimedOut() && took < 2.0, "deadline-timeout",
         s.ToString() + " after " + std::to_string(took) + " s (timeout 0.3 s, Sleep 3 s)");
}

// A burst of `n` Sleep calls of 20 ms at a server with a queue of one.
struct Burst {
  int ok = 0, unavailable = 0, other = 0, retried = 0;
  std::string first_other;
};
Burst SleepBurst(const std::shared_ptr<Messenger>& m, const Sockaddr& addr, int n, bool retry) {
  CalculatorServiceProxy proxy(m, addr);
  SleepRequestPB req;
  req.set_sleep_micros(20'000);
  std::vector<SleepResponsePB> resps(static_cast<size_t>(n));
  std::vector<RpcController> ctls(static_cast<size_t>(n));
  CountDownLatch done(n);
  for (int i = 0; i < n; ++i) {
    RpcController& ctl = ctls[static_cast<size_t>(i)];
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    if (retry) {
      RetryPolicy p = RetryPolicy::Default();
      p.max_attempts = 100;
      p.max_backoff = MonoDelta::FromMilliseconds(200);
      CHECK_OK_OR_DIE(ctl.set_retry_policy(p));
    }
    proxy.AsyncRequest("Sleep", req, &resps[static_cast<size_t>(i)], &ctl,
                       [&done] { done.CountDown(); });
  }
  Burst b;
  if (!done.WaitFor(MonoDelta::FromSeconds(60))) {
    b.other = n;
    b.first_other = "calls still unanswered after 60 s";
    return b;
  }
  for (const RpcController& ctl : ctls) {
    if (ctl.attempts() > 1) ++b.retried;
    if (ctl.status().ok()) {
      ++b.ok;
    } else if (ctl.status().IsServiceUnavailable()) {
      ++b.unavailable;
    } else {
      if (b.other++ == 0) b.first_other = Describe(ctl);
    }
  }
  return b;
}

void CheckQueue(const std::shared_ptr<Messenger>& m, const Sockaddr& addr) {
  constexpr int kCalls = 40;
  Burst plain = SleepBurst(m, addr, kCalls, false);
  Report(plain.unavailable > 0 && plain.other == 0, "queue-full",
         std::to_string(plain.unavailable) + " of " + std::to_string(kCalls) +
             " refused ServiceUnavailable, " + std::to_string(plain.ok) + " ok" +
             (plain.other ? ", other failures: " + plain.first_other : ""));
  Burst retried = SleepBurst(m, addr, kCalls, true);
  Report(retried.ok == kCalls && retried.retried > 0, "queue-full-retried",
         std::to_string(retried.ok) + " of " + std::to_string(kCalls) + " ok, " +
             std::to_string(retried.retried) + " after more than one attempt" +
             (retried.other + retried.unavailable ? ", failures: " + retried.first_other : ""));
}

void CheckNoSuchMethod(const std::shared_ptr<Messenger>& m, const Sockaddr& addr) {
  AddRequestPB req;
  req.set_x(1);
  req.set_y(2);
  AddResponsePB resp;
  {
    CalculatorServiceProxy proxy(m, addr);
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    Status s = proxy.SyncRequest("MethodKuduDoesNotHave", req, &resp, &ctl);
    const auto* err = ctl.error_response();
    Report(s.IsRemoteError() && err != nullptr &&
               err->code() == osprey::wire::ErrorStatusPB::ERROR_NO_SUCH_METHOD,
           "no-such-method", Describe(ctl));
  }
  {
    osprey::Proxy proxy(m, addr, "kudu.rpc_test.ServiceKuduDoesNotHave");
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    Status s = proxy.SyncRequest("Add", req, &resp, &ctl);
    const auto* err = ctl.error_response();
    // A Kudu server answers ERROR_NO_SUCH_SERVICE once it has said all its
    // services are registered (Messenger::SetServicesRegistered, as Kudu's
    // master and tablet server do), ERROR_UNAVAILABLE before: a client may
    // retry that. kudu-calc-server never says it, so either is Kudu's.
    const bool code_ok =
        err != nullptr && (err->code() == osprey::wire::ErrorStatusPB::ERROR_NO_SUCH_SERVICE ||
                           err->code() == osprey::wire::ErrorStatusPB::ERROR_UNAVAILABLE);
    Report((s.IsRemoteError() || s.IsServiceUnavailable()) && code_ok &&
               s.message().find("ServiceKuduDoesNotHave not registered") != std::string::npos,
           "no-such-service", Describe(ctl));
  }
}

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

void CheckSidecars(const std::shared_ptr<Messenger>& m, const Sockaddr& addr) {
  CalculatorServiceProxy proxy(m, addr);
  for (size_t size : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    EchoRequestPB req;
    EchoResponsePB resp;
    req.set_data("with sidecars of " + std::to_string(size) + " bytes");
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(20));
    int idx;
    for (uint32_t i = 0; i < 3; ++i) (void)ctl.AddOutboundSidecar(Pattern(size, i), &idx);
    Status s = proxy.Echo(req, &resp, &ctl);
    Report(s.ok() && resp.data() == req.data(), "sidecars-" + std::to_string(size),
           s.ok() ? "3 request sidecars taken, call answered" : Describe(ctl));
  }
}

void CheckLarge(const std::shared_ptr<Messenger>& m, const Sockaddr& addr) {
  CalculatorServiceProxy proxy(m, addr);
  EchoRequestPB req;
  EchoResponsePB resp;
  // Printable, since Kudu's EchoRequestPB.data is a proto2 string.
  std::string data = Pattern(8 << 20, 7);
  for (char& c : data) c = static_cast<char>('a' + (static_cast<uint8_t>(c) % 26));
  req.set_data(data);
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = proxy.Echo(req, &resp, &ctl);
  Report(s.ok() && resp.data() == data, "large-8MiB",
         s.ok() ? (resp.data() == data
                       ? "8 MiB sent and the same 8 MiB back"
                       : "answer differs (" + std::to_string(resp.data().size()) + " bytes)")
                : Describe(ctl));
}

void CheckExactlyOnce(const std::shared_ptr<Messenger>& m, const Sockaddr& addr, int calls) {
  RecordingProxy cutter(addr);
  cutter.CutEachConnectionAfter(MonoDelta::FromMilliseconds(150));
  Sockaddr via;
  Status s = cutter.Start(&via);
  if (!s.ok()) {
    Report(false, "exactly-once", "proxy: " + s.ToString());
    return;
  }
  RetryPolicy policy = RetryPolicy::Default();
  policy.max_attempts = 50;
  policy.max_backoff = MonoDelta::FromMilliseconds(200);

  CalculatorServiceProxy proxy(m, via);
  CHECK_OK_OR_DIE(proxy.set_retry_policy(policy));
  ExactlyOnceResponsePB before;
  {
    RpcController ctl;
    ExactlyOnceRequestPB req;
    req.set_value_to_add(0);
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    s = proxy.AddExactlyOnce(req, &before, &ctl);
    if (!s.ok()) {
      Report(false, "exactly-once", "first call: " + Describe(ctl));
      return;
    }
  }
  constexpr int kInFlight = 8;
  int failed = 0, retried = 0, sent = 0;
  std::string first_failure;
  while (sent < calls) {
    const size_t batch = static_cast<size_t>(std::min(kInFlight, calls - sent));
    std::vector<ExactlyOnceRequestPB> reqs(batch);
    std::vector<ExactlyOnceResponsePB> resps(batch);
    std::vector<RpcController> ctls(batch);
    CountDownLatch done(static_cast<int>(batch));
    for (size_t i = 0; i < batch; ++i) {
      reqs[i].set_value_to_add(1);
      reqs[i].set_sleep_for_ms(5);  // in flight when a cut comes
      ctls[i].set_timeout(MonoDelta::FromSeconds(60));
      proxy.AddExactlyOnceAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
    }
    if (!done.WaitFor(MonoDelta::FromSeconds(120))) {
      Report(false, "exactly-once", "calls unanswered after 120 s");
      return;
    }
    for (RpcController& ctl : ctls) {
      if (ctl.attempts() > 1) ++retried;
      if (!ctl.status().ok() && failed++ == 0) first_failure = Describe(ctl);
    }
    sent += static_cast<int>(batch);
  }
  ExactlyOnceResponsePB after;
  RpcController last;
  ExactlyOnceRequestPB zero;
  zero.set_value_to_add(0);
  last.set_timeout(MonoDelta::FromSeconds(60));
  s = proxy.AddExactlyOnce(zero, &after, &last);
  uint32_t grew = s.ok() ? after.current_val() - before.current_val() : 0;
  Report(
      s.ok() && failed == 0 && grew == static_cast<uint32_t>(calls) && retried > 0, "exactly-once",
      std::to_string(calls) + " tracked calls, " + std::to_string(failed) + " failed" +
          (failed ? " (" + first_failure + ")" : "") + ", " + std::to_string(retried) +
          " retried, " + std::to_string(cutter.cuts()) + " connections cut; Kudu's total grew by " +
          std::to_string(grew) + (s.ok() ? "" : " (last call: " + Describe(last) + ")"));
}

int Usage() {
  std::fprintf(stderr,
               "usage: kudu-interop-client deadline|queue|no-such-method|sidecars|large|"
               "exactly-once HOST:PORT [--rpc_encryption=disabled|optional|required] "
               "[--rpc_encrypt_loopback_connections] [--calls=N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const std::string check = argv[1];
  Sockaddr addr;
  Status s = Sockaddr::Parse(argv[2], &addr);
  if (!s.ok()) {
    std::fprintf(stderr, "kudu-interop-client: bad address %s: %s\n", argv[2],
                 s.ToString().c_str());
    return 2;
  }
  RpcEncryption encryption = RpcEncryption::kDisabled;
  bool encrypt_loopback = false;
  int calls = 200;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rpc_encryption=disabled") {
      encryption = RpcEncryption::kDisabled;
    } else if (a == "--rpc_encryption=optional") {
      encryption = RpcEncryption::kOptional;
    } else if (a == "--rpc_encryption=required") {
      encryption = RpcEncryption::kRequired;
    } else if (a == "--rpc_encrypt_loopback_connections") {
      encrypt_loopback = true;
    } else if (a.rfind("--calls=", 0) == 0 && std::atoi(a.c_str() + 8) > 0) {
      calls = std::atoi(a.c_str() + 8);
    } else {
      std::fprintf(stderr, "kudu-interop-client: unknown argument %s\n", a.c_str());
      return Usage();
    }
  }
  std::shared_ptr<Messenger> m;
  // No retry budget: these checks ask whether every call that may be
  // retried is retried until it succeeds against Kudu's server (cut
  // connections, a full queue); the budget would end some on purpose
  // (issue 42, ClientGuardsTest).
  s = MessengerBuilder("kudu-interop-client")
          .set_rpc_encryption(encryption)
          .set_rpc_encrypt_loopback(encrypt_loopback)
          .set_retry_budget(false)
          .Build(&m);
  if (!s.ok()) {
    std::fprintf(stderr, "kudu-interop-client: %s\n", s.ToString().c_str());
    return 2;
  }
  if (check == "deadline") {
    CheckDeadline(m, addr);
  } else if (check == "queue") {
    CheckQueue(m, addr);
  } else if (check == "no-such-method") {
    CheckNoSuchMethod(m, addr);
  } else if (check == "sidecars") {
    CheckSidecars(m, addr);
  } else if (check == "large") {
    CheckLarge(m, addr);
  } else if (check == "exactly-once") {
    CheckExactlyOnce(m, addr, calls);
  } else {
    return Usage();
  }
  m->Shutdown();
  return g_failures == 0 ? 0 : 1;
}
