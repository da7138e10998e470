#include "bench_service.h"

#include <chrono>
#include <random>
#include <thread>

namespace osprey::bench {

void BenchService::Add(const kudu::rpc_test::AddRequestPB* req, kudu::rpc_test::AddResponsePB* resp,
                       RpcContext* ctx) {
  resp->set_result(req->x() + req->y());
  ctx->RespondSuccess();
}

void BenchService::Echo(const kudu::rpc_test::EchoRequestPB* req,
                        kudu::rpc_test::EchoResponsePB* resp, RpcContext* ctx) {
  resp->set_data(req->data());
  ctx->RespondSuccess();
}

void BenchService::AddExactlyOnce(const kudu::rpc_test::ExactlyOnceRequestPB* req,
                                  kudu::rpc_test::ExactlyOnceResponsePB* resp, RpcContext* ctx) {
  if (req->sleep_for_ms() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(req->sleep_for_ms()));
  }
  if (req->randomly_fail()) {
    // As Kudu's test service: one call in ten fails, and adds nothing.
    thread_local std::minstd_rand rng(std::random_device{}());
    if (rng() % 10 == 0) {
      ctx->RespondFailure(Status::ServiceUnavailable("randomly failed, as the request asked"));
      return;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    value_ += req->value_to_add();
    resp->set_current_val(value_);
  }
  resp->set_current_time_micros(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count()));
  ctx->RespondSuccess();
}

uint32_t BenchService::current_value() const {
  std::lock_guard<std::mutex> l(mu_);
  return value_;
}

}  // namespace osprey::bench
