// Microbenchmark of the service queue hand-off: calls queued to a
// ServicePool from this thread (standing in for a reactor), run by its
// workers, answered into a connection that has closed (so responses are
// encoded and handed back, then dropped).
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <thread>

#include "bench_service.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/rpc/inbound_call.h"
#include "osprey/rpc/service_pool.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/reactor.h"

namespace osprey {
namespace {

class CountingCalculator : public bench::BenchService {
 public:
  void Add(const kudu::rpc_test::AddRequestPB* req, kudu::rpc_test::AddResponsePB* resp,
           RpcContext* ctx) override {
    BenchService::Add(req, resp, ctx);
    done.fetch_add(1, std::memory_order_release);
  }
  std::atomic<int64_t> done{0};
};

void BM_ServiceQueueHandoff(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  auto reactor_ptr =
      std::make_shared<transport::Reactor>("bench", transport::ConnectionOptions(), nullptr);
  transport::Reactor& reactor = *reactor_ptr;
  if (!reactor.Start().ok()) {
    state.SkipWithError("reactor did not start");
    return;
  }
  auto conn = std::make_shared<transport::Connection>(
      &reactor, transport::Connection::Role::kServer, Socket(), Sockaddr::Loopback(1), "bench");
  CountDownLatch closed(1);
  reactor.Schedule([&] {
    conn->Shutdown(Status::Aborted("benchmark connection"));
    closed.CountDown();
  });
  closed.Wait();

  auto service = std::make_unique<CountingCalculator>();
  CountingCalculator* svc = service.get();
  const ServiceMethod* add = svc->FindMethod("Add");
  ServicePoolOptions opts;
  opts.worker_threads = static_cast<int>(state.range(1));
  opts.queue_length = 100000;
  ServicePool pool(std::move(service), opts);
  if (!pool.Start().ok()) {
    state.SkipWithError("pool did not start");
    return;
  }
  static const std::string body("\x08\x01\x10\x02", 4);  // x=1, y=2
  int64_t issued = 0;
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) {
      wire::InboundRequest frame;
      frame.main_message = Slice(body);
      auto call = std::make_unique<InboundCall>(conn, std::move(frame));
      call->set_method(add, nullptr, nullptr);
      pool.QueueInboundCall(std::move(call));
    }
    issued += batch;
    while (svc->done.load(std::memory_order_acquire) < issued) std::this_thread::yield();
  }
  state.SetItemsProcessed(state.iterations() * batch);
  pool.Shutdown();
  reactor.Shutdown();
}
// Args: calls per batch, worker threads.
BENCHMARK(BM_ServiceQueueHandoff)->Args({1, 1})->Args({64, 1})->Args({64, 4})->UseRealTime();

}  // namespace
}  // namespace osprey
