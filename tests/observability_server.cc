// A server for observability-tools-test.sh: a messenger with HTTP endpoints
// on 127.0.0.1:<free port> serving CalculatorService (1 worker, queue of 5),
// driven by a client of its own to known counts:
//
//   1. exactly --adds Add calls, all answered;
//   2. --busy calls refused ERROR_SERVER_TOO_BUSY: one 3 s Sleep runs and
//      five more wait, so the queue is full, and then --busy Add calls come;
//   3. a 2 s Sleep in flight for /rpcz (it lands among the slow calls).
//
// It prints "listening on <host:port>", then "ready adds=<n> busy=<n>"
// once the counts are in, and serves until its standard input closes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "osprey/base/countdown_latch.h"
#include "rpc_test_util.h"

using namespace osprey;
using namespace osprey::rpc_test;

int main(int argc, char** argv) {
  int adds = 1000, busy = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--adds") == 0) adds = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--busy") == 0) busy = atoi(argv[i + 1]);
  }
  TestServer server;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  pool.queue_length = 5;
  Status s = server.Start(1, pool,
                          MessengerBuilder("observed")
                              .set_http_endpoints(true)
                              .set_slow_call_threshold(MonoDelta::FromSeconds(1)));
  if (!s.ok()) {
    fprintf(stderr, "observability_server: %s\n", s.ToString().c_str());
    return 1;
  }
  printf("listening on %s\n", server.address.ToString().c_str());
  fflush(stdout);

  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, server.address);
  for (int i = 0; i < adds; ++i) {
    AddRequestPB req;
    req.set_x(i);
    req.set_y(1);
    AddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    s = proxy.Add(req, &resp, &ctl);
    if (!s.ok() || resp.result() != static_cast<uint32_t>(i + 1)) {
      fprintf(stderr, "observability_server: Add %d: %s\n", i, s.ToString().c_str());
      return 1;
    }
  }

  // Fill the worker and the queue, then knock.
  constexpr int kFill = 6;
  std::vector<SleepRequestPB> sleeps(kFill);
  std::vector<SleepResponsePB> slept(kFill);
  std::vector<RpcController> sleep_ctls(kFill);
  CountDownLatch fill_done(kFill);
  // The long one first, and running, so that the five after it wait in
  // the queue (sent together, the worker might not have taken the first
  // before the sixth arrived).
  for (int i = 0; i < kFill; ++i) {
    sleeps[i].set_sleep_micros(i == 0 ? 3000000 : 1000);
    sleep_ctls[i].set_timeout(MonoDelta::FromSeconds(30));
    proxy.SleepAsync(sleeps[i], &slept[i], &sleep_ctls[i], [&] { fill_done.CountDown(); });
    if (i == 0 && !server.service->WaitForSleepsStarted(1)) {
      fprintf(stderr, "observability_server: the first Sleep did not start\n");
      return 1;
    }
  }
  if (!WaitUntil([&] {
        for (const MetricValue& v : server.messenger->metrics()->Snapshot()) {
          if (v.name == "osprey_server_calls_received_total" && !v.labels.empty() &&
              v.labels[0].second == "osprey.rpc_test.CalculatorService.Sleep") {
            return v.value >= kFill;
          }
        }
        return false;
      })) {
    fprintf(stderr, "observability_server: the queue did not fill\n");
    return 1;
  }
  int refused = 0;
  for (int i = 0; i < busy; ++i) {
    AddRequestPB req;
    req.set_x(1);
    req.set_y(1);
    AddResponsePB resp;
    RpcController ctl;
    // Due after the queued Sleeps: a call due sooner would push one of them
    // out of the full queue (deadline order) rather than be refused.
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status st = proxy.Add(req, &resp, &ctl);
    if (st.IsServiceUnavailable()) {
      ++refused;
    } else {
      fprintf(stderr, "observability_server: a call meant to be refused: %s\n",
              st.ToString().c_str());
    }
  }
  fill_done.Wait();
  if (refused != busy) {
    fprintf(stderr, "observability_server: %d of %d calls refused\n", refused, busy);
    return 1;
  }

  // One long call in flight, for /rpcz and its slow-call list.
  SleepRequestPB long_sleep;
  long_sleep.set_sleep_micros(2000000);
  SleepResponsePB long_slept;
  RpcController long_ctl;
  long_ctl.set_timeout(MonoDelta::FromSeconds(30));
  CountDownLatch long_done(1);
  proxy.SleepAsync(long_sleep, &long_slept, &long_ctl, [&] { long_done.CountDown(); });
  long_done.Wait();

  printf("ready adds=%d busy=%d\n", adds, refused);
  fflush(stdout);
  char c;
  while (read(STDIN_FILENO, &c, 1) > 0) {
  }
  server.messenger->Shutdown();
  return 0;
}
