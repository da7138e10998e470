// BenchService: rpc-bench's kudu.rpc_test.CalculatorService, as Kudu's
// test server implements it: Add, Echo, Sleep, and AddExactlyOnce, which
// adds to one running value (exactly once: its method tracks results, so a
// retry is answered from the server's memory, not added again). Any thread.
#pragma once

#include <cstdint>
#include <mutex>

#include "rpc_bench.osprey.h"

namespace osprey::bench {

class BenchService : public kudu::rpc_test::CalculatorServiceIf {
 public:
  // How Sleep spends its sleep_micros: kSleep sleeps, as Kudu's service
  // does (a handler waiting on I/O); kBurn keeps the thread on the CPU until
  // it has used that much CPU time (a handler that computes).
  enum class SleepMode { kSleep, kBurn };
  // `factor`: Sleep spends that many times its sleep_micros (a slow
  // server among fast ones).
  explicit BenchService(SleepMode sleep_mode = SleepMode::kSleep, uint32_t factor = 1)
      : sleep_mode_(sleep_mode), factor_(factor) {}

  void Add(const kudu::rpc_test::AddRequestPB* req, kudu::rpc_test::AddResponsePB* resp,
           RpcContext* ctx) override;
  void Echo(const kudu::rpc_test::EchoRequestPB* req, kudu::rpc_test::EchoResponsePB* resp,
            RpcContext* ctx) override;
  void Sleep(const kudu::rpc_test::SleepRequestPB* req, kudu::rpc_test::SleepResponsePB* resp,
             RpcContext* ctx) override;
  void AddExactlyOnce(const kudu::rpc_test::ExactlyOnceRequestPB* req,
                      kudu::rpc_test::ExactlyOnceResponsePB* resp, RpcContext* ctx) override;

  // The running value AddExactlyOnce adds to.
  uint32_t current_value() const;

 private:
  const SleepMode sleep_mode_;
  const uint32_t factor_;
  mutable std::mutex mu_;
  uint32_t value_ = 0;  // guarded by mu_ (std::mutex: this header is the tool's, not the library's)
};

}  // namespace osprey::bench
