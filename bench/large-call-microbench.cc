// Microbenchmarks of the pieces a large call and a blocking call run
// through (part of osprey-microbench):
//   - a large frame's buffer from the process's BufferPool, against a plain
//     allocation of the same size (what the frame encoder did before);
//   - a large request parsed into a pooled message, against a new one;
//   - one blocking call at a time over loopback, in process: the caller
//     parks on its connection's socket and reads its own response, so this
//     is the parking path end to end.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>

#include "bench_service.h"
#include "osprey/base/buffer_pool.h"
#include "osprey/rpc/message_pool.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/rpc_controller.h"
#include "osprey/wire/frame_encoder.h"

namespace osprey {
namespace {

using kudu::rpc_test::EchoRequestPB;

// Each iteration writes every byte, as the encoder does.
void BM_LargeBufferFromPool(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    BufferPool::Buffer b = BufferPool::Default()->Take(n);
    std::memset(b.data(), 1, n);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_LargeBufferFromPool)->Arg(64 << 10)->Arg(1 << 20);

// A zero-filled string of the frame's size, freed after: the old way.
void BM_LargeBufferFromString(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    std::string s;
    s.resize(n);
    std::memset(s.data(), 1, n);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_LargeBufferFromString)->Arg(64 << 10)->Arg(1 << 20);

// A whole response frame of a large Echo, encoded and dropped.
void BM_EncodeLargeResponseFrame(benchmark::State& state) {
  EchoRequestPB msg;
  msg.set_data(std::string(static_cast<size_t>(state.range(0)), 'e'));
  int32_t id = 0;
  for (auto _ : state) {
    std::unique_ptr<wire::OutboundFrame> f;
    benchmark::DoNotOptimize(wire::OutboundFrame::EncodeResponse(id++, false, msg, {}, &f));
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_EncodeLargeResponseFrame)->Arg(64 << 10)->Arg(1 << 20);

// Parsing a large request into a message from the method's pool (given
// back after), against a new message each time.
template <bool kPooled>
void BM_ParseLargeRequest(benchmark::State& state) {
  EchoRequestPB src;
  src.set_data(std::string(static_cast<size_t>(state.range(0)), 'r'));
  const std::string wire = src.SerializeAsString();
  MessagePool pool(&EchoRequestPB::default_instance());
  for (auto _ : state) {
    std::unique_ptr<google::protobuf::Message> m =
        kPooled
            ? pool.TakeFor(wire.size())
            : std::unique_ptr<google::protobuf::Message>(EchoRequestPB::default_instance().New());
    benchmark::DoNotOptimize(m->ParseFromString(wire));
    if (kPooled) pool.Give(std::move(m), wire.size());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(wire.size()));
}
BENCHMARK_TEMPLATE(BM_ParseLargeRequest, true)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_ParseLargeRequest, false)->Arg(64 << 10)->Arg(1 << 20);

// One blocking Add at a time, client and server in this process (one
// reactor each, one worker): the caller reads its own response.
void BM_BlockingCallOneInFlight(benchmark::State& state) {
  std::shared_ptr<Messenger> server, client;
  Sockaddr bound;
  ServicePoolOptions pool;
  pool.worker_threads = 1;
  Status s = MessengerBuilder("bench-server").set_num_reactors(1).Build(&server);
  if (s.ok()) s = server->RegisterService(std::make_unique<bench::BenchService>(), pool);
  if (s.ok()) s = server->Listen(Sockaddr::Loopback(0), &bound);
  if (s.ok()) s = MessengerBuilder("bench-client").set_num_reactors(1).Build(&client);
  if (!s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  kudu::rpc_test::CalculatorServiceProxy proxy(client, bound);
  kudu::rpc_test::AddRequestPB req;
  req.set_x(1);
  req.set_y(2);
  kudu::rpc_test::AddResponsePB resp;
  for (auto _ : state) {
    RpcController ctl;
    s = proxy.Add(req, &resp, &ctl);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  client->Shutdown();
  server->Shutdown();
}
BENCHMARK(BM_BlockingCallOneInFlight)->UseRealTime();

}  // namespace
}  // namespace osprey
