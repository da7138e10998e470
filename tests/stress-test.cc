// The threading contract under everything a user does at once, for a
// bounded time (OSPREY_STRESS_SECONDS, default 60, in rounds of about a
// second; at most kMaxRounds). In each round, against an in-process server
// and a server process:
//
//  - threads make sync calls (sums checked, handlers that throw and, in
//    builds without assertions, answer twice), a handler shuts down its own
//    server;
//  - async calls whose callbacks make sync calls (refused on a reactor
//    thread), make new async calls, destroy proxies, and drop the last
//    reference to a client messenger;
//  - a thread cancels calls at random, racing Shutdown() of the client and
//    of the server;
//  - the server process is killed (SIGKILL) mid-call.
//
// Every callback must run exactly once, every sum be right, every sync call
// from a reactor thread be refused; a watchdog fails a hang; after each
// round the process is back to its threads and descriptors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "child_server.h"
#include "contract_test_util.h"
#include "osprey/base/countdown_latch.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

using std::chrono::milliseconds;

constexpr int kMaxRounds = 200;
constexpr int kSlotsPerRound = 20000;
constexpr int kMaxOutstanding = 300;
constexpr int kSyncThreads = 6;

// The calculator, plus Fail("throw"), Fail("twice") and Fail("shutdown").
class StressService : public CalculatorService {
 public:
  void Fail(const FailRequestPB* req, FailResponsePB*, RpcContext* ctx) override {
    if (req->message() == "throw") throw std::runtime_error("stress handler threw");
    if (req->message() == "twice") {
      ctx->RespondFailure(Status::InvalidArgument("first answer"));
      ctx->RespondFailure(Status::InvalidArgument("second answer"));
      return;
    }
    if (req->message() == "shutdown") {
      if (auto m = messenger.lock()) m->Shutdown();
      ctx->RespondFailure(Status::Aborted("shut down by its handler"));
      return;
    }
    ctx->RespondFailure(Status::InvalidArgument(req->message()));
  }
  std::weak_ptr<Messenger> messenger;
};

// One async call: what it sends, where the answer goes, and how often its
// callback ran.
struct Slot {
  RpcController ctl;
  AddRequestPB add;
  AddResponsePB sum;
  SleepRequestPB sleep;
  SleepResponsePB slept;
  bool is_add = false;
  std::atomic<bool> armed{false};  // set up: the canceller may cancel it
  std::atomic<int> runs{0};
};

// What went wrong in a round, counted from any thread.
struct Violations {
  std::atomic<int> wrong_sums{0};
  std::atomic<int> sync_on_reactor_not_refused{0};
  std::atomic<int> throw_not_reported{0};
  std::atomic<int> twice_not_first_answer{0};
  std::atomic<int> unexpected_status{0};
  std::string last_unexpected;  // under mu
  std::mutex mu;

  void Unexpected(const std::string& what) {
    unexpected_status.fetch_add(1);
    Note(what);
  }
  void Note(const std::string& what) {
    std::lock_guard<std::mutex> l(mu);
    last_unexpected = what;
  }
};

// A server's refusal of a call it did not run: it is shutting down, or its
// queue is full.
bool ServerRefusal(const Status& s) {
  return s.IsRemoteError() &&
         (s.message().find("(FATAL_SERVER_SHUTTING_DOWN)") != std::string::npos ||
          s.message().find("(ERROR_SERVER_TOO_BUSY)") != std::string::npos);
}

// Statuses a call may end with while its peers are killed and shut down.
bool ExpectedFailure(const Status& s) {
  return s.IsNetworkError() || s.IsAborted() || s.IsTimedOut() || s.IsServiceUnavailable() ||
         s.IsIllegalState() || ServerRefusal(s);
}

class Round {
 public:
  Round(int number, const Sockaddr& child_addr) : number_(number), rng_(number) {
    child_addr_ = child_addr;
    slots_.reserve(kSlotsPerRound);
    for (int i = 0; i < kSlotsPerRound; ++i) slots_.push_back(std::make_unique<Slot>());
  }

  Status Start() {
    OSPREY_RETURN_NOT_OK(MessengerBuilder("stress-server").set_num_reactors(2).Build(&server_));
    auto svc = std::make_unique<StressService>();
    svc->messenger = server_;
    ServicePoolOptions pool;
    pool.worker_threads = number_ % 2 == 0 ? 3 : 0;  // odd rounds: handlers on the reactors
    pool.queue_length = 2000;
    OSPREY_RETURN_NOT_OK(server_->RegisterService(std::move(svc), pool));
    OSPREY_RETURN_NOT_OK(server_->Listen(Sockaddr::Loopback(0), &server_addr_));
    OSPREY_RETURN_NOT_OK(MessengerBuilder("stress-client-a").set_num_reactors(2).Build(&client_a_));
    std::shared_ptr<Messenger> client_b;
    OSPREY_RETURN_NOT_OK(MessengerBuilder("stress-client-b").set_num_reactors(1).Build(&client_b));
    std::lock_guard<std::mutex> l(proxies_mu_);
    for (int i = 0; i < 4; ++i) {
      const Sockaddr& to = i % 2 == 0 ? server_addr_ : child_addr_;
      proxies_.push_back(std::make_shared<CalculatorServiceProxy>(client_a_, to));
      // Client b is held by its proxies alone: a callback drops them all.
      proxies_.push_back(std::make_shared<CalculatorServiceProxy>(client_b, to));
    }
    return Status::OK();
  }

  // Runs the round for about `length`; returns once every callback ran (or
  // the wait for them gave up, which the checks then report).
  void Run(milliseconds length) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kSyncThreads; ++i) threads.emplace_back([this, i] { SyncCaller(i); });
    threads.emplace_back([this] { Issuer(0); });
    threads.emplace_back([this] { Issuer(1); });
    threads.emplace_back([this] { Canceller(); });
    Chaos(length);
    stop_.store(true);
    for (auto& t : threads) t.join();
    std::unique_lock<std::mutex> l(done_mu_);
    all_done_ =
        done_cv_.wait_for(l, std::chrono::seconds(60), [this] { return outstanding_.load() == 0; });
  }

  void Check() {
    EXPECT_TRUE(all_done_) << outstanding_.load() << " callbacks never ran";
    int issued = std::min(next_slot_.load(), kSlotsPerRound);
    int bad = 0;
    for (int i = 0; i < issued; ++i) {
      int runs = slots_[i]->runs.load();
      if (runs != 1 && bad++ < 5) ADD_FAILURE() << "callback " << i << " ran " << runs << " times";
    }
    EXPECT_EQ(0, bad) << "callbacks that did not run exactly once, of " << issued;
    EXPECT_EQ(0, v_.wrong_sums.load());
    EXPECT_EQ(0, v_.sync_on_reactor_not_refused.load());
    std::lock_guard<std::mutex> l(v_.mu);
    EXPECT_EQ(0, v_.throw_not_reported.load()) << v_.last_unexpected;
    EXPECT_EQ(0, v_.twice_not_first_answer.load()) << v_.last_unexpected;
    EXPECT_EQ(0, v_.unexpected_status.load()) << v_.last_unexpected;
    // The round did something: calls were issued, some of them answered.
    EXPECT_GT(issued, 0);
    EXPECT_GT(answered_.load(), 0);
  }

  void TearDown() {
    {
      std::lock_guard<std::mutex> l(proxies_mu_);
      proxies_.clear();
    }
    client_a_.reset();
    server_.reset();
  }

  int issued() const { return std::min(next_slot_.load(), kSlotsPerRound); }
  std::string Outcomes() const {
    return "ok " + std::to_string(outcomes_[0].load()) + ", timed out " +
           std::to_string(outcomes_[1].load()) + ", cancelled " +
           std::to_string(outcomes_[2].load()) + ", network error " +
           std::to_string(outcomes_[3].load()) + ", refused " + std::to_string(outcomes_[4].load());
  }
  int answered() const { return answered_.load(); }
  int sync_calls() const { return sync_calls_.load(); }

 private:
  std::shared_ptr<CalculatorServiceProxy> PickProxy(unsigned r) {
    std::lock_guard<std::mutex> l(proxies_mu_);
    if (proxies_.empty()) return nullptr;
    return proxies_[r % proxies_.size()];
  }

  // Issues one async call with `depth` calls before it in its chain; null
  // when the round's slots are used up or it is ending.
  Slot* IssueAsync(unsigned r, int depth) {
    if (stop_.load() && depth == 0) return nullptr;
    auto proxy = PickProxy(r);
    if (proxy == nullptr) return nullptr;
    int i = next_slot_.fetch_add(1);
    if (i >= kSlotsPerRound) return nullptr;
    Slot* slot = slots_[i].get();
    outstanding_.fetch_add(1);
    // Some calls have deadlines short enough to race their answers.
    slot->ctl.set_timeout(r % 5 == 0 ? MonoDelta::FromMilliseconds(1 + r % 4)
                                     : MonoDelta::FromSeconds(10));
    auto done = [this, slot, i, r, depth] { OnDone(slot, i, r, depth); };
    // The server process has the default queue (50): it gets sums only.
    slot->is_add = r % 3 != 0 || proxy->remote() == child_addr_;
    slot->armed.store(true);
    if (slot->is_add) {
      slot->add.set_x(r % 1000);
      slot->add.set_y(i);
      proxy->AddAsync(slot->add, &slot->sum, &slot->ctl, std::move(done));
    } else {
      slot->sleep.set_sleep_micros(r % 3000);
      proxy->SleepAsync(slot->sleep, &slot->slept, &slot->ctl, std::move(done));
    }
    return slot;
  }

  void OnDone(Slot* slot, int i, unsigned r, int depth) {
    slot->runs.fetch_add(1);
    const Status s = slot->ctl.status();
    ++outcomes_[s.ok() ? 0 : s.IsTimedOut() ? 1 : s.IsAborted() ? 2 : s.IsNetworkError() ? 3 : 4];
    if (s.IsServiceUnavailable() && s.message().find("Service unavailable") != std::string::npos) {
      v_.Unexpected("a reason said twice: " + s.ToString());
    }
    if (s.ok()) {
      answered_.fetch_add(1);
      if (slot->is_add && slot->sum.result() != r % 1000 + static_cast<uint32_t>(i)) {
        v_.wrong_sums.fetch_add(1);
      }
    } else if (!ExpectedFailure(s)) {
      v_.Unexpected("async: " + s.ToString());
    }
    switch (r % 8) {
      case 0: {  // a sync call from the callback
        auto proxy = PickProxy(r / 8);
        if (proxy != nullptr) {
          AddRequestPB add;
          add.set_x(1);
          add.set_y(1);
          AddResponsePB sum;
          RpcController ctl;
          ctl.set_timeout(MonoDelta::FromSeconds(5));
          Status ss = proxy->Add(add, &sum, &ctl);
          if (transport::Reactor::OnAnyReactorThread() && !ss.IsIllegalState()) {
            v_.sync_on_reactor_not_refused.fetch_add(1);
          }
        }
        break;
      }
      case 1:
      case 2:  // a new call from the callback
        if (depth < 3) IssueAsync(r * 2654435761u + 1, depth + 1);
        break;
      case 3: {  // a proxy destroyed in the callback, replaced by a new one
        std::shared_ptr<CalculatorServiceProxy> old;  // dropped after the lock: see case 4
        std::lock_guard<std::mutex> l(proxies_mu_);
        if (!proxies_.empty() && client_a_ != nullptr) {
          size_t k = (r / 8) % proxies_.size();
          old = std::exchange(proxies_[k], std::make_shared<CalculatorServiceProxy>(
                                               client_a_, proxies_[k]->remote()));
        }
        break;
      }
      case 4:
        // The last references to client b, dropped on its own reactor (or
        // on one of client a's, or a caller's thread). Not under the lock:
        // a thread other than its own waits there for its shutdown, whose
        // callbacks take that lock.
        if (r % 64 == 4) {
          std::vector<std::shared_ptr<CalculatorServiceProxy>> old;
          std::lock_guard<std::mutex> l(proxies_mu_);
          for (auto& p : proxies_) {
            if (p != nullptr && client_a_ != nullptr) {
              old.push_back(std::exchange(
                  p, std::make_shared<CalculatorServiceProxy>(client_a_, p->remote())));
            }
          }
        }
        break;
      default:
        break;
    }
    // Last: once outstanding_ reaches 0 the round may end and free slots.
    std::lock_guard<std::mutex> l(done_mu_);
    if (outstanding_.fetch_sub(1) == 1) done_cv_.notify_all();
  }

  void Issuer(int which) {
    std::mt19937 rng(number_ * 31 + which);
    while (!stop_.load()) {
      if (outstanding_.load() >= kMaxOutstanding) {
        std::this_thread::yield();
        continue;
      }
      Slot* slot = IssueAsync(rng(), 0);
      if (slot == nullptr) return;
      // Refused at once (its messenger is shut down): pace the next ones.
      if (slot->runs.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }

  void SyncCaller(int which) {
    std::mt19937 rng(number_ * 131 + which);
    bool last_ok = true;
    while (!stop_.load()) {
      unsigned r = rng();
      auto proxy = PickProxy(r);
      if (proxy == nullptr) return;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(5));
      const bool in_process = proxy->remote() == server_addr_;
      sync_calls_.fetch_add(1);
      // A peer that is gone fails calls at once: pace the retries.
      if (!last_ok) std::this_thread::sleep_for(std::chrono::microseconds(500));
      last_ok = false;
      if (r % 10 == 0 && in_process) {
        FailRequestPB req;
        req.set_message("throw");
        FailResponsePB resp;
        Status s = proxy->Fail(req, &resp, &ctl);
        if (s.IsRemoteError() && !ServerRefusal(s) &&
            s.message().find("stress handler threw") == std::string::npos) {
          v_.throw_not_reported.fetch_add(1);
          v_.Note("throw: " + s.ToString());
        } else if (!s.IsRemoteError() && !ExpectedFailure(s)) {
          v_.Unexpected("throw: " + s.ToString());
        }
#ifdef NDEBUG  // with assertions on, a second answer is a DCHECK (see threading-contract-test)
      } else if (r % 10 == 1 && in_process) {
        FailRequestPB req;
        req.set_message("twice");
        FailResponsePB resp;
        Status s = proxy->Fail(req, &resp, &ctl);
        if (s.IsRemoteError() && !ServerRefusal(s) &&
            s.message().find("first answer") == std::string::npos) {
          v_.twice_not_first_answer.fetch_add(1);
          v_.Note("twice: " + s.ToString());
        } else if (!s.IsRemoteError() && !ExpectedFailure(s)) {
          v_.Unexpected("twice: " + s.ToString());
        }
#endif
      } else {
        AddRequestPB add;
        add.set_x(r % 5000);
        add.set_y(which);
        AddResponsePB sum;
        Status s = proxy->Add(add, &sum, &ctl);
        last_ok = s.ok();
        if (s.ok()) {
          answered_.fetch_add(1);
          if (sum.result() != r % 5000 + static_cast<uint32_t>(which)) v_.wrong_sums.fetch_add(1);
        } else if (!ExpectedFailure(s)) {
          v_.Unexpected("sync: " + s.ToString());
        }
      }
    }
  }

  void Canceller() {
    std::mt19937 rng(number_ * 7 + 3);
    while (!stop_.load()) {
      int issued = std::min(next_slot_.load(), kSlotsPerRound);
      if (issued > 0) {
        Slot* slot = slots_[rng() % issued].get();
        if (slot->armed.load()) slot->ctl.Cancel();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // a few thousand a second
    }
  }

  // The round's timeline: the server process killed, the server shut down
  // (from a handler or a thread) and client a shut down, each at a random
  // point, in a random order.
  void Chaos(milliseconds length) {
    std::uniform_int_distribution<int> at(length.count() / 5, length.count() * 4 / 5);
    struct Event {
      int at_ms;
      int what;
    };
    std::vector<Event> events = {{at(rng_), 0}, {at(rng_), 1}, {at(rng_), 2}};
    std::sort(events.begin(), events.end(), [](auto& a, auto& b) { return a.at_ms < b.at_ms; });
    auto start = std::chrono::steady_clock::now();
    for (const Event& e : events) {
      std::this_thread::sleep_until(start + milliseconds(e.at_ms));
      switch (e.what) {
        case 0:
          if (kill_child_) kill_child_();
          break;
        case 1:
          if (number_ % 3 == 0) {
            // From its own handler, over a connection of its own.
            auto client = MakeClient(1);
            CalculatorServiceProxy proxy(client, server_addr_);
            FailRequestPB req;
            req.set_message("shutdown");
            FailResponsePB resp;
            RpcController ctl;
            ctl.set_timeout(MonoDelta::FromSeconds(10));
            Status s = proxy.Fail(req, &resp, &ctl);
            if (!s.IsRemoteError() && !ExpectedFailure(s))
              v_.Unexpected("shutdown: " + s.ToString());
          } else {
            server_->Shutdown(MonoDelta::FromMilliseconds(200));
          }
          break;
        case 2:
          client_a_->Shutdown();
          break;
      }
    }
    std::this_thread::sleep_until(start + length);
  }

 public:
  std::function<void()> kill_child_;

 private:
  const int number_;
  std::mt19937 rng_;
  Sockaddr server_addr_, child_addr_;
  std::shared_ptr<Messenger> server_, client_a_;
  std::mutex proxies_mu_;
  std::vector<std::shared_ptr<CalculatorServiceProxy>> proxies_;  // under proxies_mu_
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<int> next_slot_{0};
  std::atomic<int> outstanding_{0};
  std::atomic<int> answered_{0};
  std::atomic<int> outcomes_[5] = {};  // async: ok, timed out, aborted, network error, refused
  std::atomic<int> sync_calls_{0};
  std::atomic<bool> stop_{false};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool all_done_ = false;
  Violations v_;
};

int StressSeconds() {
  const char* env = std::getenv("OSPREY_STRESS_SECONDS");
  int s = env != nullptr ? std::atoi(env) : 60;
  return std::clamp(s, 1, 600);
}

TEST(StressTest, EverythingAtOnceEachCallbackExactlyOnce) {
  const int seconds = StressSeconds();
  Watchdog dog(std::chrono::seconds(seconds * 3 + 120));
  const int threads = ThreadCount(), fds = FdCount();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int rounds = 0;
  long issued = 0, answered = 0, sync_calls = 0;
  for (; rounds < kMaxRounds && std::chrono::steady_clock::now() < end; ++rounds) {
    SCOPED_TRACE("round " + std::to_string(rounds));
    ChildServer child;
    Sockaddr child_addr;
    Status s = child.Spawn(0, &child_addr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    {
      Round round(rounds, child_addr);
      round.kill_child_ = [&child] { child.Kill(); };
      s = round.Start();
      ASSERT_TRUE(s.ok()) << s.ToString();
      round.Run(milliseconds(600 + 100 * (rounds % 8)));
      round.Check();
      std::printf("round %d: async calls: %s\n", rounds, round.Outcomes().c_str());
      issued += round.issued();
      answered += round.answered();
      sync_calls += round.sync_calls();
      round.TearDown();
    }
    child.Kill();
    ASSERT_TRUE(BackTo(threads, fds)) << "after round " << rounds;
    if (testing::Test::HasFailure()) break;
  }
  std::printf("stress: %d rounds in %d s: %ld async calls, %ld sync calls, %ld answered\n", rounds,
              seconds, issued, sync_calls, answered);
  EXPECT_GT(rounds, 0);
}

}  // namespace
}  // namespace osprey::rpc_test
