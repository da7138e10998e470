// One rpc-bench call: its request and response, how to issue it, and how to
// check the answer. The call is Add (-payload_bytes 0), Echo of
// -payload_bytes bytes, or, with -handler_us N >= 0, Kudu's Sleep of N
// microseconds. A slot belongs to one call at a time, on any thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "load.h"
#include "refusal.h"
#include "rpc_bench.osprey.h"

namespace osprey::bench {

// Open loop: calls in flight beyond this are not started, so a stalled
// server cannot make the client grow without bound.
constexpr int64_t kMaxOpenLoopInFlight = 100000;

[[noreturn]] inline void WrongResult(const std::string& what) {
  std::fprintf(stderr, "rpc-bench: FATAL: wrong result: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// Whether a failed call was refused by the server: ERROR_SERVER_TOO_BUSY
// (for the reason ClassifyRefusal tells: the queue was full, or overload
// control refused or shed it).
inline bool IsQueueRefusal(const RpcController& ctl) {
  const wire::ErrorStatusPB* err = ctl.error_response();
  return err != nullptr && err->code() == wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY;
}

// The overload mode's refusal: the server answered that it would not run
// the call (ERROR_SERVER_TOO_BUSY or ERROR_UNAVAILABLE, both a
// ServiceUnavailable status at the client).
inline bool IsRefusal(const RpcController& ctl) {
  const wire::ErrorStatusPB* err = ctl.error_response();
  return err != nullptr && (err->code() == wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY ||
                            err->code() == wire::ErrorStatusPB::ERROR_UNAVAILABLE);
}

// Whether a failed call was refused by the client itself and never sent:
// its adaptive throttling (-client_throttling) refused it. A refusal with
// no attempt handed to a connection and no answer from the server.
inline bool IsThrottled(const RpcController& ctl) {
  return ctl.status().IsServiceUnavailable() && ctl.attempts_sent() == 0 &&
         ctl.error_response() == nullptr;
}

struct CallSlot {
  kudu::rpc_test::AddRequestPB add_req;
  kudu::rpc_test::AddResponsePB add_resp;
  kudu::rpc_test::EchoRequestPB echo_req;
  kudu::rpc_test::EchoResponsePB echo_resp;
  kudu::rpc_test::SleepRequestPB sleep_req;
  kudu::rpc_test::SleepResponsePB sleep_resp;
  RpcController ctl;
  uint32_t seq = 0;

  // Sets the request, the timeout (-call_timeout_ms, Kudu's rpc-bench's
  // 10 s by default) and the retry policy (-retry_attempts).
  void Prepare(const Settings& cfg, uint32_t seed) {
    seq = seed;
    ctl.Reset();
    ctl.set_timeout(MonoDelta::FromMilliseconds(cfg.call_timeout_ms));
    if (cfg.retry.max_attempts > 1) (void)ctl.set_retry_policy(cfg.retry);  // valid: flags.cc
    // -lb=hash: keys spread as the calls' sequence numbers do.
    if (cfg.server_set && cfg.lb == LoadBalancing::kConsistentHash) ctl.set_hash_key(seed);
    // Add, Echo and Sleep have no side effects: hedged with -hedge.
    if (cfg.hedging.enabled) ctl.set_idempotent(true);
    if (cfg.handler_us >= 0) {
      sleep_req.set_sleep_micros(static_cast<uint32_t>(cfg.handler_us));
    } else if (cfg.payload == 0) {
      add_req.set_x(seed);
      add_req.set_y(seed * 7 + 1);
    } else {
      std::string* d = echo_req.mutable_data();
      d->assign(static_cast<size_t>(cfg.payload), static_cast<char>('a' + seed % 26));
      (*d)[0] = static_cast<char>(seed & 0xff);
    }
  }
  void Issue(const kudu::rpc_test::CalculatorServiceProxy* proxy, const Settings& cfg,
             ResponseCallback cb) {
    if (cfg.handler_us >= 0) {
      proxy->SleepAsync(sleep_req, &sleep_resp, &ctl, std::move(cb));
    } else if (cfg.payload == 0) {
      proxy->AddAsync(add_req, &add_resp, &ctl, std::move(cb));
    } else {
      proxy->EchoAsync(echo_req, &echo_resp, &ctl, std::move(cb));
    }
  }
  Status IssueSync(const kudu::rpc_test::CalculatorServiceProxy* proxy, const Settings& cfg) {
    if (cfg.handler_us >= 0) return proxy->Sleep(sleep_req, &sleep_resp, &ctl);
    return cfg.payload == 0 ? proxy->Add(add_req, &add_resp, &ctl)
                            : proxy->Echo(echo_req, &echo_resp, &ctl);
  }
  // After a successful call: fatal on a wrong answer. `who` is formatted
  // only then.
  template <class Who>
  void VerifyAnswer(const Settings& cfg, const Who& who) const {
    if (cfg.handler_us >= 0) return;  // Sleep answers nothing to check
    if (cfg.payload == 0) {
      uint32_t want = add_req.x() + add_req.y();
      if (add_resp.result() != want) {
        WrongResult(who() + " Add(" + std::to_string(add_req.x()) + ", " +
                    std::to_string(add_req.y()) + ") returned " +
                    std::to_string(add_resp.result()) + ", expected " + std::to_string(want));
      }
    } else if (echo_resp.data() != echo_req.data()) {
      WrongResult(who() + " Echo of " + std::to_string(cfg.payload) + " bytes returned " +
                  std::to_string(echo_resp.data().size()) + " different bytes");
    }
  }
  // Fatal on a wrong answer; false for an RPC error, which it counts in
  // `state` (a refusal apart, by its reason: the server's, or the client's
  // throttling's).
  // `who_kind` and `who_index` name the caller
  // ("async loop 3"), formatted only on error, never on the measured path.
  bool Check(const Settings& cfg, RunState* state, const char* who_kind, int who_index) {
    auto who = [&] {
      return std::string(who_kind) + " " + std::to_string(who_index) + " call " +
             std::to_string(seq);
    };
    if (!ctl.status().ok()) {
      if (IsQueueRefusal(ctl) || IsThrottled(ctl)) {
        state->refusals.Add(ClassifyRefusal(ctl), ctl);
      } else {
        state->RecordError(who() + ": " + ctl.status().ToString(), FailureCause(ctl));
      }
      return false;
    }
    VerifyAnswer(cfg, who);
    return true;
  }
};

}  // namespace osprey::bench
