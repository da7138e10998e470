#include "bench_service.h"

#include <time.h>

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

namespace {
int64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

void BenchService::Sleep(const kudu::rpc_test::SleepRequestPB* req,
                         kudu::rpc_test::SleepResponsePB* /*resp*/, RpcContext* ctx) {
  if (req->client_timeout_defined() && ctx->GetClientDeadline() == MonoTime::Max()) {
    // As Kudu's service: the caller said it set a timeout, and none came.
    ctx->RespondFailure(Status::InvalidArgument("Timeout not defined"));
    return;
  }
  const int64_t micros = static_cast<int64_t>(req->sleep_micros()) * factor_;
  if (sleep_mode_ == SleepMode::kSleep) {
    std::this_thread::sleep_for(std::chrono::microseconds(micros));
  } else if (micros > 0) {
    // The thread's own CPU time, so time the thread spends preempted does
    // not count: the call costs `micros` of CPU however busy the core is.
    const int64_t until = ThreadCpuNanos() + micros * 1000;
    while (ThreadCpuNanos() < until) {
    }
  }
  if (req->return_app_error()) {
    ctx->RespondFailure(
        Status::RemoteError("Got some error: the request asked for an application error"));
    return;
  }
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
