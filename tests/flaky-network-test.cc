// Retries through a flaky network (issue 46): a proxy between client and
// server cuts the connection at a random 2% of the chunks it forwards, and
// every call is an exactly-once (tracked) deposit with a generous
// RetryPolicy, on a client Messenger with every setting at its default.
// Every deposit must succeed and every account's balance must be exactly
// the deposits made: a cut connection is a network fault to retry through,
// not a server refusing work, so it must not spend the retry budget.
// No test offers more calls at once than the server queues (its default
// queue_length, 50, and one worker), and each checks that the server
// refused none: a refusal spends the budget by design, and would make a
// failure here the client's load, not the network's.
// Each test runs once for each way a thread may read a socket (the hot
// path's switches, on both ends), since each way meets a cut connection
// in its own place: a caller in its poll, a worker waiting on its
// connection, a reactor; and once with TLS, where a cut may end a
// handshake or a record part way. The proxy's cuts come from a seeded generator:
// OSPREY_FLAKY_SEED (default 46) replays a run, and a failure names it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cert_test_util.h"
#include "contract_test_util.h"
#include "exactly_once_test.osprey.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/metrics.h"
#include "osprey/base/socket.h"
#include "osprey/rpc/messenger.h"
#include "recording_proxy.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

using exactly_once_test::LedgerAddRequestPB;
using exactly_once_test::LedgerAddResponsePB;
using exactly_once_test::LedgerServiceIf;
using exactly_once_test::LedgerServiceProxy;
using exactly_once_test::ResetRequestPB;
using exactly_once_test::ResetResponsePB;

constexpr int kAccounts = 16;

// Accounts with balances; Add deposits `amount` into `account`, after
// sleeping `sleep_ms` (the handler's cost). Tracked: the server answers a
// retry of a deposit that ran from memory.
class Bank : public LedgerServiceIf {
 public:
  // A request's sidecar, when it has one, is this many bytes of 'r'.
  static constexpr size_t kRequestSidecar = 128 * 1024;

  void Add(const LedgerAddRequestPB* req, LedgerAddResponsePB* resp, RpcContext* ctx) override {
    if (ctx->num_inbound_sidecars() > 0) {
      Slice sidecar;
      const bool whole = ctx->GetInboundSidecar(0, &sidecar).ok() &&
                         sidecar.size() == kRequestSidecar &&
                         std::all_of(sidecar.data(), sidecar.data() + sidecar.size(),
                                     [](uint8_t b) { return b == 'r'; });
      std::lock_guard<std::mutex> l(mu_);
      (whole ? sidecars_ : bad_sidecars_)++;
    }
    if (req->sleep_ms() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(req->sleep_ms()));
    }
    std::lock_guard<std::mutex> l(mu_);
    balances_[req->account()] += req->amount();
    resp->set_balance(balances_[req->account()]);
    resp->set_handler_runs(++runs_);
    if (req->answer_padding() > 0) resp->set_padding(std::string(req->answer_padding(), 'p'));
    ctx->RespondSuccess();
  }
  void AddUntracked(const LedgerAddRequestPB* req, LedgerAddResponsePB* resp,
                    RpcContext* ctx) override {
    Add(req, resp, ctx);
  }
  void Reset(const ResetRequestPB*, ResetResponsePB*, RpcContext* ctx) override {
    ctx->RespondSuccess();
  }
  bool AuthorizeAnyUser(const google::protobuf::Message*, google::protobuf::Message*,
                        RpcContext*) override {
    return true;
  }
  bool AuthorizeAdmin(const google::protobuf::Message*, google::protobuf::Message*,
                      RpcContext*) override {
    return true;
  }
  std::map<uint32_t, uint64_t> balances() {
    std::lock_guard<std::mutex> l(mu_);
    return balances_;
  }
  uint64_t runs() {
    std::lock_guard<std::mutex> l(mu_);
    return runs_;
  }
  // Requests with a whole sidecar, and with one that was not.
  std::pair<int, int> sidecars() {
    std::lock_guard<std::mutex> l(mu_);
    return {sidecars_, bad_sidecars_};
  }

 private:
  std::mutex mu_;
  std::map<uint32_t, uint64_t> balances_;
  uint64_t runs_ = 0;
  int sidecars_ = 0, bad_sidecars_ = 0;
};

// What the application asks for: many attempts, the default backoffs.
RetryPolicy SixtyAttempts() {
  RetryPolicy p;
  p.max_attempts = 60;
  return p;
}

// The amount of deposit `i`: distinct enough that a lost or doubled
// deposit shows in the account's balance.
uint32_t AmountOf(int i) { return 1 + static_cast<uint32_t>(i % 97); }
uint32_t AccountOf(int i) { return static_cast<uint32_t>(i % kAccounts); }

// At most `size` calls in flight: Enter before each call, Leave in its
// callback. It must outlive the callbacks.
class CallWindow {
 public:
  explicit CallWindow(int size) : size_(size) {}
  void Enter() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return in_flight_ < size_; });
    ++in_flight_;
  }
  void Leave() {
    {
      std::lock_guard<std::mutex> l(mu_);
      --in_flight_;
    }
    cv_.notify_one();
  }

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;  // under mu_
};

uint32_t CutSeed() {
  const char* env = std::getenv("OSPREY_FLAKY_SEED");
  return env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 46;
}

// Who reads a socket, on both ends: the defaults (a blocking caller reads
// its own answer, a worker its connection's next request, both spinning
// briefly before they sleep), or one of those turned off, or all of them
// (only reactors read, as in Kudu).
// And with TLS, whose handshake and records a cut may end anywhere; and
// over Unix sockets, the other transport a connection may use.
struct HotPath {
  const char* name;
  bool caller_reads, worker_reads, spin, tls, unix_socket = false;
};
constexpr HotPath kHotPaths[] = {
    {"Defaults", true, true, true, false},
    {"CallerReadsOff", false, true, true, false},
    {"WorkerReadsOff", true, false, true, false},
    {"SpinOff", true, true, false, false},
    {"OnlyReactorsRead", false, false, false, false},
    {"Tls", true, true, true, true},
    {"UnixSocket", true, true, true, false, true},
};
// Where a bank listens: loopback, or an abstract Unix socket name of its
// own (no file left behind).
Sockaddr ListenAddress(const HotPath& h) {
  if (!h.unix_socket) return Sockaddr::Loopback(0);
  static std::atomic<int> next{0};
  Sockaddr a;
  EXPECT_TRUE(
      Sockaddr::Parse(
          "unix:@osprey-flaky-" + std::to_string(getpid()) + "-" + std::to_string(next++), &a)
          .ok());
  return a;
}
// `cert` (its own CA) is both ends' identity and trust when h.tls.
MessengerBuilder WithHotPath(MessengerBuilder b, const HotPath& h, const test::CertFiles& cert) {
  b.set_caller_reads(h.caller_reads).set_worker_reads(h.worker_reads);
  if (!h.spin) b.set_spin_before_sleep(MonoDelta::FromMicroseconds(0));
  if (h.tls) {
    b.set_rpc_encryption(RpcEncryption::kRequired)
        .set_rpc_encrypt_loopback(true)
        .set_tls_certificate_files(cert.cert, cert.key)
        .set_tls_ca_file(cert.cert);
  }
  return b;
}

class FlakyNetworkTest : public ::testing::TestWithParam<HotPath> {
 protected:
  void SetUp() override {
    // Everything at its default but the reactors and the hot path's
    // switches: a server as users make it.
    ASSERT_TRUE(WithHotPath(MessengerBuilder("bank"), GetParam(), cert_)
                    .set_num_reactors(2)
                    .Build(&server_)
                    .ok());
    auto bank = std::make_unique<Bank>();
    bank_ = bank.get();
    ASSERT_TRUE(server_->RegisterService(std::move(bank)).ok());
    Sockaddr addr;
    ASSERT_TRUE(server_->Listen(ListenAddress(GetParam()), &addr).ok());
    server_addr_ = addr;
    cutter_ = std::make_unique<RecordingProxy>(addr);
    cutter_->CutAtRandomReads(0.02, seed_);
    ASSERT_TRUE(cutter_->Start(&via_).ok());
    ASSERT_TRUE(WithHotPath(MessengerBuilder("client"), GetParam(), cert_).Build(&client_).ok());
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    cutter_.reset();
    second_cutter_.reset();
    if (server_) server_->Shutdown();
    if (second_) second_->Shutdown();
  }

  // For the tests of a set of two servers: a second bank, behind a cutting
  // proxy of its own (seeded after the first); BothBanks() names the two.
  void StartSecondBank() {
    ASSERT_TRUE(WithHotPath(MessengerBuilder("bank-b"), GetParam(), cert_)
                    .set_num_reactors(2)
                    .Build(&second_)
                    .ok());
    auto bank = std::make_unique<Bank>();
    second_bank_ = bank.get();
    ASSERT_TRUE(second_->RegisterService(std::move(bank)).ok());
    Sockaddr addr;
    ASSERT_TRUE(second_->Listen(ListenAddress(GetParam()), &addr).ok());
    second_cutter_ = std::make_unique<RecordingProxy>(addr);
    second_cutter_->CutAtRandomReads(0.02, seed_ + 1);
    ASSERT_TRUE(second_cutter_->Start(&second_via_).ok());
  }
  std::string BothBanks() const { return via_.ToString() + "," + second_via_.ToString(); }

  // Records deposit `i`'s outcome; the first few failures are kept.
  void Record(int i, const Status& s, int attempts) {
    if (s.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      retries_ += attempts - 1;
      expected_[AccountOf(i)] += AmountOf(i);
      ++succeeded_;
      return;
    }
    std::lock_guard<std::mutex> l(mu_);
    retries_ += attempts - 1;
    ++failed_;
    if (failures_.size() < 5) {
      failures_.push_back("deposit " + std::to_string(i) + " after " + std::to_string(attempts) +
                          " attempt(s): " + s.ToString());
    }
  }

  // Every deposit succeeded, every balance is exactly what was deposited,
  // and no deposit ran twice.
  void ExpectEveryDepositExactlyOnce(int deposits) {
    std::lock_guard<std::mutex> l(mu_);
    std::string why;
    for (const std::string& f : failures_) why += "\n  " + f;
    EXPECT_EQ(0, failed_) << failed_ << " of " << deposits << " deposits failed ("
                          << cutter_->cuts() << " cuts, OSPREY_FLAKY_SEED=" << seed_
                          << "), e.g.:" << why;
    EXPECT_EQ(deposits, succeeded_);
    EXPECT_EQ(expected_, bank_->balances());
    EXPECT_EQ(static_cast<uint64_t>(succeeded_), bank_->runs())
        << "a deposit ran twice or was lost";
    EXPECT_GT(cutter_->cuts(), 0) << "the proxy never cut: the test tested nothing";
  }

  // The calls the server refused, for any reason (its metrics).
  double ServerRefusals() {
    double refused = 0;
    for (const MetricValue& v : server_->metrics()->Snapshot()) {
      if (v.name == "osprey_server_calls_refused_total" ||
          v.name == "osprey_server_calls_rejected_queue_full_total") {
        refused += v.value;
      }
    }
    return refused;
  }

  // `threads` threads of blocking deposits, `deposits` in all.
  void SyncDeposits(int threads, int deposits, uint32_t sleep_ms) {
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        LedgerServiceProxy proxy(client_, via_);
        for (int i = next++; i < deposits; i = next++) {
          LedgerAddRequestPB req;
          req.set_account(AccountOf(i));
          req.set_amount(AmountOf(i));
          req.set_sleep_ms(sleep_ms);
          LedgerAddResponsePB resp;
          RpcController ctl;
          ctl.set_timeout(MonoDelta::FromSeconds(60));
          EXPECT_TRUE(ctl.set_retry_policy(SixtyAttempts()).ok());
          Status s = proxy.Add(req, &resp, &ctl);
          Record(i, s, ctl.attempts());
        }
      });
    }
    for (auto& w : workers) w.join();
  }

  // Up to `window` deposits in flight at once through `to`, each running 1
  // ms in the server, `deposits` in all; returns when every one has ended.
  // Each answer carries `padding` bytes, checked whole; with `sidecars`,
  // each request a sidecar the bank checks whole.
  void AsyncDeposits(const Sockaddr& to, int deposits, int window, uint32_t padding = 0,
                     bool sidecars = false) {
    LedgerServiceProxy proxy(client_, to);
    AsyncDeposits(&proxy, deposits, window, padding, sidecars);
  }
  void AsyncDeposits(LedgerServiceProxy* through, int deposits, int window, uint32_t padding = 0,
                     bool sidecars = false) {
    LedgerServiceProxy& proxy = *through;
    struct Deposit {
      LedgerAddRequestPB req;
      LedgerAddResponsePB resp;
      RpcController ctl;
    };
    std::vector<std::unique_ptr<Deposit>> calls(deposits);
    CountDownLatch all_done(deposits);
    CallWindow in_flight(window);
    for (int i = 0; i < deposits; ++i) {
      in_flight.Enter();
      auto& d = calls[i];
      d = std::make_unique<Deposit>();
      d->req.set_account(AccountOf(i));
      d->req.set_amount(AmountOf(i));
      d->req.set_sleep_ms(1);
      d->req.set_answer_padding(padding);
      if (sidecars) {
        int idx;
        EXPECT_TRUE(d->ctl.AddOutboundSidecar(std::string(Bank::kRequestSidecar, 'r'), &idx).ok());
      }
      d->ctl.set_timeout(MonoDelta::FromSeconds(60));
      EXPECT_TRUE(d->ctl.set_retry_policy(SixtyAttempts()).ok());
      Deposit* raw = d.get();
      proxy.AddAsync(d->req, &d->resp, &d->ctl, [&, raw, i, padding] {
        Record(i, raw->ctl.status(), raw->ctl.attempts());
        if (raw->ctl.status().ok()) {
          EXPECT_EQ(padding, raw->resp.padding().size()) << "deposit " << i << "'s answer";
        }
        in_flight.Leave();
        all_done.CountDown();
      });
    }
    ASSERT_TRUE(all_done.WaitFor(MonoDelta::FromSeconds(120)));
  }

  // What the tests of that name (below) run: 1,000 deposits in a window
  // of 50 (async) or through 8 threads (sync).
  void DepositsEndingEveryWay(bool sync) {
    Watchdog dog(std::chrono::seconds(150));
    constexpr int kDeposits = 1000, kWindow = 50, kThreads = 8;
    std::mt19937 rng(seed_);
    LedgerServiceProxy proxy(client_, via_);
    struct Deposit {
      LedgerAddRequestPB req;
      LedgerAddResponsePB resp;
      RpcController ctl;
      std::atomic<int> ends{0};
    };
    // Set up before any call: the controllers outlive the calls, so that
    // the canceller may reach any of them at any time.
    std::vector<std::unique_ptr<Deposit>> calls(kDeposits);
    for (int i = 0; i < kDeposits; ++i) {
      auto d = std::make_unique<Deposit>();
      d->req.set_account(static_cast<uint32_t>(1000 + i));
      d->req.set_amount(AmountOf(i));
      d->req.set_sleep_ms(rng() % 4 == 0 ? 1 : 0);
      d->ctl.set_timeout(rng() % 4 == 0 ? MonoDelta::FromMilliseconds(2 + rng() % 29)
                                        : MonoDelta::FromSeconds(60));
      EXPECT_TRUE(d->ctl.set_retry_policy(SixtyAttempts()).ok());
      calls[i] = std::move(d);
    }
    CountDownLatch all_done(kDeposits);
    // The async window; the callbacks use it until all_done is down.
    CallWindow in_flight(kWindow);
    std::atomic<int> issued{0};
    std::atomic<bool> stop{false};
    // Cancels a deposit already issued, at random, every 200 us or so (an
    // ended call's Cancel does nothing).
    std::thread canceller([&, seed = seed_ + 1] {
      std::mt19937 pick(seed);
      while (!stop.load()) {
        const int n = issued.load();
        if (n > 0) calls[pick() % n]->ctl.Cancel();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    if (sync) {
      std::atomic<int> next{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
          for (int i = next++; i < kDeposits; i = next++) {
            Deposit* d = calls[i].get();
            issued.store(std::max(issued.load(), i + 1));
            (void)proxy.Add(d->req, &d->resp, &d->ctl);
            d->ends.fetch_add(1);
            all_done.CountDown();
          }
        });
      }
      for (auto& t : threads) t.join();
    } else {
      for (int i = 0; i < kDeposits; ++i) {
        in_flight.Enter();
        Deposit* d = calls[i].get();
        proxy.AddAsync(d->req, &d->resp, &d->ctl, [&, d] {
          d->ends.fetch_add(1);
          in_flight.Leave();
          all_done.CountDown();
        });
        issued.store(i + 1);
      }
    }
    const bool ended = all_done.WaitFor(MonoDelta::FromSeconds(120));
    stop = true;
    canceller.join();
    ASSERT_TRUE(ended) << "not every deposit ended in 120 s";
    const std::map<uint32_t, uint64_t> balances = bank_->balances();
    int ok = 0, aborted = 0, timed_out = 0, other = 0, ran = 0;
    for (int i = 0; i < kDeposits; ++i) {
      const Deposit& d = *calls[i];
      EXPECT_EQ(1, d.ends.load()) << "deposit " << i;
      auto it = balances.find(static_cast<uint32_t>(1000 + i));
      const uint64_t balance = it == balances.end() ? 0 : it->second;
      const Status s = d.ctl.status();
      if (balance != 0) ++ran;
      if (s.ok()) {
        ++ok;
        EXPECT_EQ(AmountOf(i), balance)
            << "deposit " << i << " succeeded (OSPREY_FLAKY_SEED=" << seed_ << ")";
        continue;
      }
      (s.IsAborted() ? aborted : s.IsTimedOut() ? timed_out : other)++;
      // With 60 attempts allowed, any other end is a retry not made, and
      // says why (a short deadline's cut, mostly).
      if (!s.IsAborted() && !s.IsTimedOut()) {
        EXPECT_NE(std::string::npos, s.message().find("not retried (")) << s.ToString();
      }
      EXPECT_TRUE(balance == 0 || balance == AmountOf(i))
          << "deposit " << i << " ended " << s.ToString() << " with " << balance << " deposited of "
          << AmountOf(i) << " (OSPREY_FLAKY_SEED=" << seed_ << ")";
    }
    EXPECT_EQ(static_cast<uint64_t>(ran), bank_->runs()) << "a deposit ran twice";
    std::cerr << kDeposits << (sync ? " blocking" : " async") << " deposits: " << ok
              << " succeeded, " << aborted << " cancelled, " << timed_out << " timed out, " << other
              << " failed otherwise; " << ran << " ran; " << cutter_->cuts() << " cuts\n";
    // The test tests what it says: calls ended each way (a short deadline
    // ends a call timed out, or with a retry it leaves unmade: 2 to 45 and
    // 5 to 26 of them in runs here).
    EXPECT_GT(ok, 0);
    EXPECT_GT(aborted, 0);
    EXPECT_GT(timed_out + other, 0);
  }

  const uint32_t seed_ = CutSeed();
  test::TempDir cert_dir_;
  const test::CertFiles cert_ = test::MakeCert(cert_dir_, "bank");
  std::shared_ptr<Messenger> server_, client_;
  Sockaddr server_addr_;
  Bank* bank_ = nullptr;
  std::unique_ptr<RecordingProxy> cutter_;
  Sockaddr via_;
  std::shared_ptr<Messenger> second_;  // StartSecondBank
  Bank* second_bank_ = nullptr;
  std::unique_ptr<RecordingProxy> second_cutter_;
  Sockaddr second_via_;
  std::mutex mu_;
  std::map<uint32_t, uint64_t> expected_;
  int succeeded_ = 0, failed_ = 0;
  int retries_ = 0;  // attempts after the first, over every deposit
  std::vector<std::string> failures_;
};

// Eight blocking callers hold at most eight calls in the server's queue of
// 50, and a cut leaves at most eight behind: the server refuses none.
TEST_P(FlakyNetworkTest, EightThreadsOfBlockingDepositsAllSucceedExactlyOnce) {
  Watchdog dog(std::chrono::seconds(150));
  constexpr int kDeposits = 2000;
  SyncDeposits(8, kDeposits, /*sleep_ms=*/0);
  ExpectEveryDepositExactlyOnce(kDeposits);
  EXPECT_EQ(0, ServerRefusals()) << "the server refused calls: the test's load, not the network";
}

TEST_P(FlakyNetworkTest, BlockingDepositsWithAOneMillisecondHandlerAllSucceedExactlyOnce) {
  Watchdog dog(std::chrono::seconds(150));
  constexpr int kDeposits = 2000;
  SyncDeposits(8, kDeposits, /*sleep_ms=*/1);
  ExpectEveryDepositExactlyOnce(kDeposits);
  EXPECT_EQ(0, ServerRefusals()) << "the server refused calls: the test's load, not the network";
}

// An async window of 50 deposits in flight, each running 1 ms: most wait
// in the server's queue, so one cut fails up to 50 calls at once, one
// event that must not exhaust the budget for all of them. The cuts fail
// several times what the budget allows (10% of the calls and 10 a second:
// 200 here): were a cut to spend it, most deposits would fail.
// The window is the server's default queue length. A window of 100 (and
// no handler time) made the server refuse 250 to 460 of 4,000 deposits
// with no cut at all, the queue full after a batch of requests read at
// once: near what the budget allows, so that run failed now and then by
// the client's load rather than the network's. The next test shows that
// this window, without cuts, is never refused. With cuts the server may
// refuse a few (4 of 1,000 in one CI run under ASan): the calls a cut
// connection left in its queue are still there when their retries arrive.
// Those refusals are retried too, within the same budget.
TEST_P(FlakyNetworkTest, AnAsyncWindowOfFiftyDepositsAllSucceedExactlyOnce) {
  Watchdog dog(std::chrono::seconds(150));
  constexpr int kDeposits = 1000;
  AsyncDeposits(via_, kDeposits, /*window=*/50);
  ExpectEveryDepositExactlyOnce(kDeposits);
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_GT(retries_, 100 + kDeposits / 10)
      << "the cuts failed fewer calls than the retry budget allows: spending it would not show";
}

// Answers of 128 KiB, each several reads and writes long, so that cuts
// fall inside frames as well as between them: a window of 20 deposits, 200
// in all, each answer whole and each deposit made once. A call retrying
// through cuts holds its client's first incomplete request back, so the
// server keeps every answer after it: 200 of them, 25 MiB, are within the
// share of the server's memory of answers a user may hold (32 MiB by
// default). Beyond it the oldest are evicted, and their retries refused as
// stale, never run twice (ResultTrackerTest.*Evict*).
TEST_P(FlakyNetworkTest, LargeAnswersThroughCutsArriveWholeExactlyOnce) {
  Watchdog dog(std::chrono::seconds(150));
  constexpr int kDeposits = 200;
  AsyncDeposits(via_, kDeposits, /*window=*/20, /*padding=*/128 * 1024);
  ExpectEveryDepositExactlyOnce(kDeposits);
}

// Requests with sidecars of 128 KiB, several reads and writes each, sent
// again whole by each retry: every one reaches the handler whole, and
// every deposit is made once.
TEST_P(FlakyNetworkTest, LargeRequestsThroughCutsArriveWholeExactlyOnce) {
  Watchdog dog(std::chrono::seconds(150));
  constexpr int kDeposits = 200;
  AsyncDeposits(via_, kDeposits, /*window=*/20, /*padding=*/0, /*sidecars=*/true);
  ExpectEveryDepositExactlyOnce(kDeposits);
  EXPECT_EQ(std::make_pair(kDeposits, 0), bank_->sidecars()) << "(whole, not whole)";
}

// Eight client messengers (eight client ids in the server's memory of
// answers, eight sets of connections) at once, each with a window of five
// deposits (40 in all, within the server's queue of 50), through the same
// cuts: every deposit made once.
TEST_P(FlakyNetworkTest, EightClientsAtOnceThroughCutsEachDepositOnce) {
  Watchdog dog(std::chrono::seconds(150));
  constexpr int kClients = 8, kEach = 200, kWindow = 5;
  std::vector<std::thread> clients;
  std::vector<std::shared_ptr<Messenger>> messengers(kClients);
  for (auto& m : messengers) {
    ASSERT_TRUE(WithHotPath(MessengerBuilder("client"), GetParam(), cert_).Build(&m).ok());
  }
  std::atomic<int> next{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      LedgerServiceProxy proxy(messengers[c], via_);
      struct Deposit {
        LedgerAddRequestPB req;
        LedgerAddResponsePB resp;
        RpcController ctl;
      };
      std::vector<Deposit> window(kWindow);
      for (int round = 0; round < kEach / kWindow; ++round) {
        CountDownLatch done(kWindow);
        std::vector<int> ids(kWindow);
        for (int k = 0; k < kWindow; ++k) {
          Deposit& d = window[k];
          d.ctl.Reset();
          ids[k] = next++;
          d.req.set_account(AccountOf(ids[k]));
          d.req.set_amount(AmountOf(ids[k]));
          d.ctl.set_timeout(MonoDelta::FromSeconds(60));
          EXPECT_TRUE(d.ctl.set_retry_policy(SixtyAttempts()).ok());
          proxy.AddAsync(d.req, &d.resp, &d.ctl, [&done] { done.CountDown(); });
        }
        EXPECT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));
        for (int k = 0; k < kWindow; ++k) {
          Record(ids[k], window[k].ctl.status(), window[k].ctl.attempts());
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  for (auto& m : messengers) m->Shutdown();
  ExpectEveryDepositExactlyOnce(kClients * kEach);
}

// Two servers, each behind its own cutting proxy, one target: a tracked
// deposit whose answer a cut lost is retried only on the server that may
// have run it, where its answer is kept; one that was never sent may go to
// either. Every deposit succeeds, and the two banks together hold each
// exactly once.
TEST_P(FlakyNetworkTest, TwoServersBehindCutsRunEachDepositOnceInAll) {
  Watchdog dog(std::chrono::seconds(150));
  ASSERT_NO_FATAL_FAILURE(StartSecondBank());
  Bank* b = second_bank_;
  constexpr int kDeposits = 1000;
  {
    LedgerServiceProxy proxy(client_, BothBanks());
    AsyncDeposits(&proxy, kDeposits, /*window=*/50);
  }
  std::map<uint32_t, uint64_t> both = bank_->balances();
  for (const auto& [account, balance] : b->balances()) both[account] += balance;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::string why;
    for (const std::string& f : failures_) why += "\n  " + f;
    EXPECT_EQ(0, failed_) << failed_ << " of " << kDeposits << " deposits failed ("
                          << cutter_->cuts() << " + " << second_cutter_->cuts()
                          << " cuts, OSPREY_FLAKY_SEED=" << seed_ << "), e.g.:" << why;
    EXPECT_EQ(expected_, both) << "the two banks together";
    EXPECT_EQ(static_cast<uint64_t>(succeeded_), bank_->runs() + b->runs())
        << "a deposit ran twice, or on both servers";
  }
  EXPECT_GT(bank_->runs(), 0u);
  EXPECT_GT(b->runs(), 0u);
  EXPECT_GT(cutter_->cuts() + second_cutter_->cuts(), 0);
  client_->Shutdown();
}

// A graceful drain through the cuts: two servers, each behind its own
// cutting proxy, one target; server A drains (Messenger::Drain) a third of
// the way in. A deposit whose answer a cut lost on A is retried only on A,
// where its answer is kept: A answers such a retry from its memory while
// it drains, where it used to refuse it "draining" (18 of 1,000 deposits
// failed so in one run, each made on A, the budget spent on refusals).
// Each deposit to an account of its own: none ran twice; one that
// succeeded ran once. A deposit may still fail when A is gone before its
// retry came back (the drain ends 250 ms after the last call arrived):
// then it may have run there, which the caller is told by a network error.
TEST_P(FlakyNetworkTest, ADrainThroughCutsAnswersRetriesFromMemory) {
  Watchdog dog(std::chrono::seconds(150));
  ASSERT_NO_FATAL_FAILURE(StartSecondBank());
  Bank* b = second_bank_;
  LedgerServiceProxy proxy(client_, BothBanks());
  constexpr int kDeposits = 1000, kWindow = 20;
  // Backoffs of at most 50 ms: a call whose server left fails within
  // seconds, not the minutes 60 attempts at up to 2 s would take.
  RetryPolicy quick = SixtyAttempts();
  quick.initial_backoff = MonoDelta::FromMilliseconds(5);
  quick.max_backoff = MonoDelta::FromMilliseconds(50);
  struct Deposit {
    LedgerAddRequestPB req;
    LedgerAddResponsePB resp;
    RpcController ctl;
  };
  std::vector<std::unique_ptr<Deposit>> calls(kDeposits);
  CountDownLatch all_done(kDeposits);
  CallWindow in_flight(kWindow);
  std::thread drainer([&] {
    ASSERT_TRUE(WaitUntil([&] { return bank_->runs() + b->runs() >= kDeposits / 3; }));
    server_->Drain(MonoDelta::FromSeconds(5));
  });
  for (int i = 0; i < kDeposits; ++i) {
    in_flight.Enter();
    auto& d = calls[i];
    d = std::make_unique<Deposit>();
    d->req.set_account(static_cast<uint32_t>(1000 + i));
    d->req.set_amount(AmountOf(i));
    d->ctl.set_timeout(MonoDelta::FromSeconds(60));
    EXPECT_TRUE(d->ctl.set_retry_policy(quick).ok());
    proxy.AddAsync(d->req, &d->resp, &d->ctl, [&] {
      in_flight.Leave();
      all_done.CountDown();
    });
  }
  const bool ended = all_done.WaitFor(MonoDelta::FromSeconds(120));
  drainer.join();
  ASSERT_TRUE(ended) << "not every deposit ended in 120 s";
  std::map<uint32_t, uint64_t> both = bank_->balances();
  for (const auto& [account, balance] : b->balances()) both[account] += balance;
  int ok = 0, failed = 0, ran = 0;
  for (int i = 0; i < kDeposits; ++i) {
    const Status s = calls[i]->ctl.status();
    const uint64_t balance = both[static_cast<uint32_t>(1000 + i)];
    if (balance != 0) ++ran;
    if (s.ok()) {
      ++ok;
      EXPECT_EQ(AmountOf(i), balance) << "deposit " << i << " succeeded";
      continue;
    }
    ++failed;
    EXPECT_TRUE(balance == 0 || balance == AmountOf(i)) << "deposit " << i << ": " << balance;
    EXPECT_TRUE(s.IsNetworkError()) << "deposit " << i << ": " << s.ToString();
    EXPECT_EQ(std::string::npos, s.message().find("draining"))
        << "deposit " << i << ": " << s.ToString();
  }
  EXPECT_EQ(static_cast<uint64_t>(ran), bank_->runs() + b->runs())
      << "a deposit ran twice, or on both servers";
  std::cerr << kDeposits << " deposits through a drain: " << ok << " succeeded, " << failed
            << " failed with the server that may have run them gone; " << cutter_->cuts() << " + "
            << second_cutter_->cuts() << " cuts\n";
  EXPECT_GT(bank_->runs(), 0u);
  EXPECT_GT(b->runs(), 0u);
  client_->Shutdown();
}

// Hedged calls through the cuts: two servers, each behind its own cutting
// proxy; untracked deposits marked idempotent (so they may be hedged and
// retried after they were sent), a hedge after 1 ms for any call (no cap),
// a quarter of them running 2 ms, some cancelled at random and some with 2
// to 30 ms to live. Each call ends once; one that succeeded ran at least
// once; each account, one a deposit, holds a whole number of its deposit.
TEST_P(FlakyNetworkTest, HedgedCallsThroughCutsEachEndOnce) {
  Watchdog dog(std::chrono::seconds(150));
  ASSERT_NO_FATAL_FAILURE(StartSecondBank());
  Bank* b = second_bank_;
  LedgerServiceProxy proxy(client_, BothBanks());
  HedgingPolicy hedging;
  hedging.enabled = true;
  hedging.when = HedgingPolicy::When::kFixed;
  hedging.delay = MonoDelta::FromMilliseconds(1);
  hedging.max_share = 1.0;
  hedging.burst = 1000;
  ASSERT_TRUE(proxy.set_hedging(hedging).ok());
  constexpr int kCalls = 1000, kWindow = 25;
  std::mt19937 rng(seed_);
  struct Call {
    LedgerAddRequestPB req;
    LedgerAddResponsePB resp;
    RpcController ctl;
    std::atomic<int> ends{0};
  };
  std::vector<std::unique_ptr<Call>> calls(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    auto c = std::make_unique<Call>();
    c->req.set_account(static_cast<uint32_t>(1000 + i));
    c->req.set_amount(AmountOf(i));
    c->req.set_sleep_ms(rng() % 4 == 0 ? 2 : 0);
    c->ctl.set_timeout(rng() % 4 == 0 ? MonoDelta::FromMilliseconds(2 + rng() % 29)
                                      : MonoDelta::FromSeconds(60));
    c->ctl.set_idempotent(true);
    EXPECT_TRUE(c->ctl.set_retry_policy(SixtyAttempts()).ok());
    calls[i] = std::move(c);
  }
  CountDownLatch all_done(kCalls);
  std::atomic<int> issued{0};
  std::atomic<bool> stop{false};
  std::thread canceller([&, seed = seed_ + 2] {
    std::mt19937 pick(seed);
    while (!stop.load()) {
      const int n = issued.load();
      if (n > 0) calls[pick() % n]->ctl.Cancel();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  CallWindow in_flight(kWindow);
  for (int i = 0; i < kCalls; ++i) {
    in_flight.Enter();
    Call* c = calls[i].get();
    proxy.AddUntrackedAsync(c->req, &c->resp, &c->ctl, [&, c] {
      c->ends.fetch_add(1);
      in_flight.Leave();
      all_done.CountDown();
    });
    issued.store(i + 1);
  }
  const bool ended = all_done.WaitFor(MonoDelta::FromSeconds(120));
  stop = true;
  canceller.join();
  ASSERT_TRUE(ended) << "not every call ended in 120 s";
  std::map<uint32_t, uint64_t> both = bank_->balances();
  for (const auto& [account, balance] : b->balances()) both[account] += balance;
  int ok = 0, hedged = 0;
  for (int i = 0; i < kCalls; ++i) {
    const Call& c = *calls[i];
    EXPECT_EQ(1, c.ends.load()) << "call " << i;
    const uint64_t balance = both[static_cast<uint32_t>(1000 + i)];
    EXPECT_EQ(0u, balance % AmountOf(i)) << "call " << i << ": " << balance;
    if (c.ctl.hedge() != RpcController::Hedge::kNone) ++hedged;
    if (c.ctl.status().ok()) {
      ++ok;
      EXPECT_GE(balance, AmountOf(i)) << "call " << i << " succeeded";
    }
  }
  const HedgeStats stats = proxy.hedging_stats();
  std::cerr << kCalls << " hedged calls: " << ok << " succeeded, " << hedged << " hedged; hedges "
            << stats.sent << " sent, " << stats.won << " won, " << stats.eligible << " eligible, "
            << stats.refused_by_cap << " refused by the cap, " << stats.no_other_server
            << " with no other server; " << cutter_->cuts() + second_cutter_->cuts() << " cuts\n";
  EXPECT_GT(ok, 0);
  // Hedges came due (sent, or with the other server ejected: over TLS under
  // a sanitizer, the short deadlines' timeouts may keep one server ejected
  // all run long, one ASan run here).
  EXPECT_GT(stats.sent + stats.no_other_server, 0);
  client_->Shutdown();
}

// The same window straight to the server, with no proxy and no cut: the
// server refuses nothing and no call is retried, so what the test above
// spends of the budget is the network's doing, not its load's.
TEST_P(FlakyNetworkTest, TheSameAsyncWindowWithoutCutsIsNeverRefused) {
  Watchdog dog(std::chrono::seconds(150));
  constexpr int kDeposits = 1000;
  AsyncDeposits(server_addr_, kDeposits, /*window=*/50);
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_EQ(kDeposits, succeeded_);
  EXPECT_EQ(0, retries_);
  EXPECT_EQ(0, ServerRefusals()) << "the server refused calls: the test's load, not the network";
  EXPECT_EQ(expected_, bank_->balances());
}

// Deposits that end every way a call can, through the cuts: some cancelled
// at random while in flight, some with deadlines too short for every retry
// (2 to 30 ms), the rest with a minute. Each deposit goes to an account of
// its own, so a deposit run twice shows as twice its amount. Each call ends
// once (its callback runs, or its sync call returns, once); a deposit that
// succeeded ran exactly once; one that was cancelled, timed out or failed
// ran at most once (the server may have run it before the caller gave up).
TEST_P(FlakyNetworkTest, DepositsCancelledOrTimedOutAtRandomRunAtMostOnce) {
  DepositsEndingEveryWay(/*sync=*/false);
}

// The same with eight threads of blocking calls, cancelled from another
// thread while they wait (a caller parked in its poll, where caller reads
// are on).
TEST_P(FlakyNetworkTest, BlockingDepositsCancelledOrTimedOutAtRandomRunAtMostOnce) {
  DepositsEndingEveryWay(/*sync=*/true);
}

INSTANTIATE_TEST_SUITE_P(HotPaths, FlakyNetworkTest, ::testing::ValuesIn(kHotPaths),
                         [](const ::testing::TestParamInfo<HotPath>& info) {
                           return std::string(info.param.name);
                         });

// A server that is gone: nothing listens. Each of 100 calls in flight at
// once is retried as its policy says, to its last attempt, and ends with
// the connection's error, not with a spent budget after its first.
TEST(RetryWithoutAServerTest, EachCallUsesItsPolicysAttemptsNotABudget) {
  Watchdog dog(std::chrono::seconds(60));
  const Sockaddr addr = ClosedLoopbackPort();
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").Build(&client).ok());  // every default
  LedgerServiceProxy proxy(client, addr);
  RetryPolicy policy;
  policy.max_attempts = 5;
  policy.initial_backoff = MonoDelta::FromMilliseconds(1);
  policy.max_backoff = MonoDelta::FromMilliseconds(10);
  constexpr int kCalls = 100;
  struct Call {
    LedgerAddRequestPB req;
    LedgerAddResponsePB resp;
    RpcController ctl;
  };
  std::vector<std::unique_ptr<Call>> calls;
  CountDownLatch done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<Call>());
    Call& c = *calls.back();
    c.req.set_amount(1);
    c.ctl.set_timeout(MonoDelta::FromSeconds(30));
    ASSERT_TRUE(c.ctl.set_retry_policy(policy).ok());
    proxy.AddAsync(c.req, &c.resp, &c.ctl, [&] { done.CountDown(); });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(40)));
  for (const auto& c : calls) {
    EXPECT_TRUE(c->ctl.status().IsNetworkError()) << c->ctl.status().ToString();
    EXPECT_EQ(std::string::npos, c->ctl.status().message().find("budget"))
        << c->ctl.status().ToString();
    EXPECT_EQ(policy.max_attempts, c->ctl.attempts()) << c->ctl.status().ToString();
    // Its error says it was retried.
    EXPECT_NE(std::string::npos, c->ctl.status().message().find("after 5 attempts: "))
        << c->ctl.status().ToString();
  }
  client->Shutdown();
}

// A retry whose backoff would end past the call's deadline is not made:
// the call ends at once with the error of its last attempt, and the error
// says why it was not retried (it used to read as if the call had no
// retry policy at all). 20 calls with 50 ms to live and a first backoff
// drawn from 0 to 10 s: about one in 200 fits a retry, then fails the
// same way.
TEST(RetryWithoutAServerTest, ARetryThatWouldStartPastTheDeadlineIsNotMadeAndTheErrorSaysSo) {
  Watchdog dog(std::chrono::seconds(60));
  const Sockaddr addr = ClosedLoopbackPort();
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").Build(&client).ok());
  LedgerServiceProxy proxy(client, addr);
  RetryPolicy policy;
  policy.max_attempts = 5;
  policy.initial_backoff = MonoDelta::FromSeconds(10);
  policy.max_backoff = MonoDelta::FromSeconds(10);
  for (int i = 0; i < 20; ++i) {
    LedgerAddRequestPB req;
    req.set_amount(1);
    LedgerAddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromMilliseconds(50));
    ASSERT_TRUE(ctl.set_retry_policy(policy).ok());
    const MonoTime start = MonoTime::Now();
    Status s = proxy.Add(req, &resp, &ctl);
    const MonoDelta took = MonoTime::Now() - start;
    ASSERT_TRUE(s.IsNetworkError()) << s.ToString();
    ASSERT_LT(ctl.attempts(), policy.max_attempts) << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find("not retried (its deadline comes before"))
        << s.ToString();
    EXPECT_LT(took, MonoDelta::FromSeconds(5)) << "waited for a retry it did not make";
  }
  client->Shutdown();
}

}  // namespace
}  // namespace osprey::rpc_test
