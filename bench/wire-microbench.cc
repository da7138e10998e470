// Microbenchmarks of the per-call hot pieces, run by hand (not by CTest):
//   build/bench/osprey-microbench [--benchmark_filter=REGEX]
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <unordered_map>
#include <vector>

#include "osprey/base/countdown_latch.h"
#include "osprey/rpc/remote_method.h"
#include "osprey/transport/reactor.h"
#include "osprey/wire/frame_decoder.h"
#include "osprey/wire/frame_encoder.h"

namespace osprey {
namespace {

const RemoteMethod& AddMethod() {
  static const RemoteMethod m("kudu.rpc_test.CalculatorService", "Add");
  return m;
}

const std::string kAddBody("\x08\xd4\x90\x80\x91\x01\x10\xf8\xcf\xc4\xed\x04", 12);

void BM_EncodeRequestFrame(benchmark::State& state) {
  int32_t id = 0;
  for (auto _ : state) {
    std::unique_ptr<wire::OutboundFrame> f;
    benchmark::DoNotOptimize(wire::OutboundFrame::EncodeRequest(id++, AddMethod().serialized_pb(),
                                                                10000, {}, kAddBody, {}, &f));
    benchmark::DoNotOptimize(f);
  }
}
BENCHMARK(BM_EncodeRequestFrame);

// The same frame through the generic protobuf header path, for comparison.
void BM_EncodeRequestFrameProtobufHeader(benchmark::State& state) {
  int32_t id = 0;
  for (auto _ : state) {
    wire::RequestHeader h;
    h.set_call_id(id++);
    h.mutable_remote_method()->set_service_name(AddMethod().service());
    h.mutable_remote_method()->set_method_name(AddMethod().method());
    h.set_timeout_millis(10000);
    std::unique_ptr<wire::OutboundFrame> f;
    benchmark::DoNotOptimize(wire::OutboundFrame::EncodeSerialized(&h, kAddBody, {}, &f));
  }
}
BENCHMARK(BM_EncodeRequestFrameProtobufHeader);

// Decoding a buffer of N request frames, as one read from a busy socket,
// with protobuf headers or with the header views connections use.
template <class Header>
void BM_DecodeRequestFrames(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::string bytes;
  for (int i = 0; i < n; ++i) {
    std::unique_ptr<wire::OutboundFrame> f;
    (void)wire::OutboundFrame::EncodeRequest(i, AddMethod().serialized_pb(), 10000, {}, kAddBody,
                                             {}, &f);
    bytes += f->ToString();
  }
  wire::FrameDecoder<Header> decoder;
  std::vector<wire::InboundFrame<Header>> frames;
  for (auto _ : state) {
    frames.clear();
    if (!decoder.Feed(bytes, &frames).ok() || frames.size() != static_cast<size_t>(n)) {
      state.SkipWithError("decode failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK_TEMPLATE(BM_DecodeRequestFrames, wire::RequestHeader)->Arg(1)->Arg(64);
BENCHMARK_TEMPLATE(BM_DecodeRequestFrames, wire::RequestHeaderView)->Arg(1)->Arg(64);

// A client connection's call-id table: insert on send, find+erase on reply,
// with ~100 calls in flight.
void BM_CallIdLookup(benchmark::State& state) {
  std::unordered_map<int32_t, std::shared_ptr<int>> calls;
  auto value = std::make_shared<int>(1);
  int32_t next = 0;
  for (int i = 0; i < 100; ++i) calls.emplace(next++, value);
  for (auto _ : state) {
    calls.emplace(next, value);
    auto it = calls.find(next - 100);
    benchmark::DoNotOptimize(it);
    calls.erase(it);
    ++next;
  }
}
BENCHMARK(BM_CallIdLookup);

// Hand-off to a reactor: tasks scheduled from this thread, run on the
// reactor, in batches of `range(0)` before waiting for the last.
void BM_ReactorHandoff(benchmark::State& state) {
  auto reactor_ptr =
      std::make_shared<transport::Reactor>("bench", transport::ConnectionOptions(), nullptr);
  transport::Reactor& reactor = *reactor_ptr;
  if (!reactor.Start().ok()) {
    state.SkipWithError("reactor did not start");
    return;
  }
  const int batch = static_cast<int>(state.range(0));
  std::atomic<int> ran{0};
  for (auto _ : state) {
    CountDownLatch done(1);
    for (int i = 0; i < batch; ++i) {
      bool last = i == batch - 1;
      reactor.Schedule([&ran, &done, last] {
        ran.fetch_add(1, std::memory_order_relaxed);
        if (last) done.CountDown();
      });
    }
    done.Wait();
  }
  state.SetItemsProcessed(state.iterations() * batch);
  reactor.Shutdown();
}
BENCHMARK(BM_ReactorHandoff)->Arg(1)->Arg(64)->UseRealTime();

}  // namespace
}  // namespace osprey

BENCHMARK_MAIN();  // for every file of osprey-microbench
