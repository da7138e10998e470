// A Kudu client for the drain cell of scripts/kudu-interop.sh (issue 49),
// built there against the Kudu peer's own RPC library
// (../shared/peers/kudu): what a Kudu client sees when an Osprey server it
// calls is draining, decoded by Kudu's code, and what Kudu's own clients do
// with it.
//
//   kudu-drain-client ADDR[,ADDR...] N [HOLD_MICROS]
//
// With HOLD_MICROS it makes one Sleep call of that length on the first
// address and prints "HELD ok" or "HELD failed: ..." (a call that keeps a
// drain open). Otherwise it makes N Add calls, the first on the first
// address, each next one where the last was answered, and applies to every answer the rule by which
// Kudu's clients retry at the RPC layer (client/master_proxy_rpc.cc:259-265,
// client/batcher.cc:461-462, client/scanner-internal.cc:326-327 at Kudu
// 22028a29f): a remote error whose ErrorStatusPB code is
// ERROR_SERVER_TOO_BUSY or ERROR_UNAVAILABLE is tried again after Kudu's
// backoff (rpc/rpc.cc's ComputeExponentialBackoff), here on the next
// address as a Kudu client with several masters does; anything else is a
// failure. Each retried answer is printed as
//   RETRIED code=ERROR_UNAVAILABLE server=ADDR message=...
// and the run ends with
//   DONE calls=N failures=F retried=R
// (exit 0 iff F = 0). Every call has a 10 s timeout and at most 10 attempts.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kudu/rpc/messenger.h"
#include "kudu/rpc/rpc.h"
#include "kudu/rpc/rpc_controller.h"
#include "kudu/rpc/rpc_header.pb.h"
#include "kudu/rpc/rtest.pb.h"
#include "kudu/rpc/rtest.proxy.h"
#include "kudu/util/monotime.h"
#include "kudu/util/net/net_util.h"
#include "kudu/util/net/sockaddr.h"
#include "kudu/util/status.h"

using kudu::HostPort;
using kudu::MonoDelta;
using kudu::Sockaddr;
using kudu::Status;
using kudu::rpc::ErrorStatusPB;
using kudu::rpc::Messenger;
using kudu::rpc::MessengerBuilder;
using kudu::rpc::RpcController;
using kudu::rpc_test::AddRequestPB;
using kudu::rpc_test::AddResponsePB;
using kudu::rpc_test::CalculatorServiceProxy;

namespace {

struct Server {
  std::string name;
  std::unique_ptr<CalculatorServiceProxy> proxy;
};

// The rule of Kudu's clients: which RPC-layer refusals they try again.
bool KuduRetries(const Status& s, const ErrorStatusPB* err) {
  return s.IsRemoteError() && err != nullptr && err->has_code() &&
         (err->code() == ErrorStatusPB::ERROR_SERVER_TOO_BUSY ||
          err->code() == ErrorStatusPB::ERROR_UNAVAILABLE);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ADDR[,ADDR...] N [HOLD_MICROS]\n", argv[0]);
    return 2;
  }
  const int64_t n = std::strtoll(argv[2], nullptr, 10);
  const int64_t hold_micros = argc > 3 ? std::strtoll(argv[3], nullptr, 10) : 0;

  MessengerBuilder builder("kudu-drain-client");
  builder.set_num_reactors(1);
  std::shared_ptr<Messenger> messenger;
  Status s = builder.Build(&messenger);
  if (!s.ok()) {
    std::fprintf(stderr, "ERROR: cannot build messenger: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<Server> servers;
  std::string list = argv[1];
  for (size_t from = 0; from <= list.size();) {
    size_t comma = list.find(',', from);
    if (comma == std::string::npos) comma = list.size();
    std::string one = list.substr(from, comma - from);
    from = comma + 1;
    HostPort hp;
    std::vector<Sockaddr> addrs;
    s = hp.ParseString(one, 0);
    if (s.ok()) s = hp.ResolveAddresses(&addrs);
    if (s.ok() && addrs.empty()) s = Status::NotFound("no address for", one);
    if (!s.ok()) {
      std::fprintf(stderr, "ERROR: cannot resolve %s: %s\n", one.c_str(), s.ToString().c_str());
      return 1;
    }
    servers.push_back(
        {one, std::make_unique<CalculatorServiceProxy>(messenger, addrs[0], hp.host())});
  }

  if (hold_micros > 0) {
    kudu::rpc_test::SleepRequestPB req;
    kudu::rpc_test::SleepResponsePB resp;
    req.set_sleep_micros(static_cast<uint32_t>(hold_micros));
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    s = servers[0].proxy->Sleep(req, &resp, &ctl);
    if (s.ok()) {
      std::printf("HELD ok\n");
    } else {
      std::printf("HELD failed: %s\n", s.ToString().c_str());
    }
    messenger->Shutdown();
    return s.ok() ? 0 : 1;
  }

  int64_t failures = 0;
  int64_t retried = 0;
  size_t at = 0;  // where the next call goes: the last server that answered
  for (int64_t i = 0; i < n; i++) {
    AddRequestPB req;
    req.set_x(static_cast<int32_t>(i));
    req.set_y(1);
    bool done = false;
    for (int attempt = 1; attempt <= 10 && !done; attempt++) {
      AddResponsePB resp;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(10));
      Server& server = servers[at];
      s = server.proxy->Add(req, &resp, &ctl);
      if (s.ok()) {
        if (resp.result() != i + 1) {
          std::printf("WRONG call=%" PRId64 " server=%s result=%d\n", i, server.name.c_str(),
                      resp.result());
          failures++;
        }
        done = true;
      } else if (KuduRetries(s, ctl.error_response())) {
        std::printf("RETRIED code=%s server=%s message=%s\n",
                    ErrorStatusPB::RpcErrorCodePB_Name(ctl.error_response()->code()).c_str(),
                    server.name.c_str(), ctl.error_response()->message().c_str());
        retried++;
        at = (at + 1) % servers.size();
        kudu::SleepFor(kudu::rpc::ComputeExponentialBackoff(attempt));
      } else {
        std::printf("FAILED call=%" PRId64 " server=%s: %s\n", i, server.name.c_str(),
                    s.ToString().c_str());
        failures++;
        done = true;
      }
    }
    if (!done) {
      std::printf("FAILED call=%" PRId64 ": 10 attempts refused\n", i);
      failures++;
    }
  }
  std::printf("DONE calls=%" PRId64 " failures=%" PRId64 " retried=%" PRId64 "\n", n, failures,
              retried);
  messenger->Shutdown();
  return failures == 0 ? 0 : 1;
}
