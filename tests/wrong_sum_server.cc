// A Kudu-protocol CalculatorService that answers the first 100 Add calls
// right and every later one wrong (x + y + 1): what rpc-bench must catch in
// the middle of a run. Prints "listening on <host:port>" once ready; exits
// by itself after 120 s in case the test that started it does not end it.
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "bench_service.h"
#include "osprey/rpc/messenger.h"

namespace {

class WrongSums : public osprey::bench::BenchService {
 public:
  void Add(const kudu::rpc_test::AddRequestPB* req, kudu::rpc_test::AddResponsePB* resp,
           osprey::RpcContext* ctx) override {
    bool wrong = calls_.fetch_add(1) >= 100;
    resp->set_result(req->x() + req->y() + (wrong ? 1 : 0));
    ctx->RespondSuccess();
  }

 private:
  std::atomic<int64_t> calls_{0};
};

}  // namespace

int main() {
  std::shared_ptr<osprey::Messenger> server;
  osprey::Sockaddr bound;
  osprey::Status s = osprey::MessengerBuilder("wrong-sums").set_num_reactors(1).Build(&server);
  if (s.ok()) s = server->RegisterService(std::make_unique<WrongSums>());
  if (s.ok()) s = server->Listen(osprey::Sockaddr::Loopback(0), &bound);
  if (!s.ok()) {
    std::fprintf(stderr, "wrong_sum_server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", bound.ToString().c_str());
  std::fflush(stdout);
  sleep(120);
  return 0;
}
