// Exactly-once calls and authorization hooks, from a service .proto written
// with Kudu's options (exactly_once_test.proto: track_rpc_result,
// authz_method, default_authz_method). Duplicates are sent by hand, as
// frames with the same request id, so the tests decide exactly what the
// server sees; the generated proxy's own request ids are read off the wire.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "bench_service.h"
#include "exactly_once_test.osprey.h"
#include "hostile_test_util.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/metrics.h"
#include "osprey/base/socket.h"
#include "osprey/rpc/messenger.h"
#include "recording_proxy.h"
#include "rpc_bench.osprey.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

using exactly_once_test::LedgerAddRequestPB;
using exactly_once_test::LedgerAddResponsePB;
using exactly_once_test::LedgerServiceIf;
using exactly_once_test::LedgerServiceProxy;
using exactly_once_test::ResetRequestPB;
using exactly_once_test::ResetResponsePB;

constexpr const char* kLedgerService = "osprey.exactly_once_test.LedgerService";
// A sleep_ms that holds the handler until the test calls ReleaseHeld() (at
// most 60 s), for tests that must see what happens while a call runs
// however slowly the host gets to it.
constexpr uint32_t kHeldSleep = 1u << 30;

class Ledger : public LedgerServiceIf {
 public:
  void Add(const LedgerAddRequestPB* req, LedgerAddResponsePB* resp, RpcContext* ctx) override {
    if (req->amount() == 0 && req->sleep_ms() == 0) {
      ++refusals;
      ctx->RespondFailure(Status::InvalidArgument("nothing to add"));
      return;
    }
    ++started;
    if (req->sleep_ms() == kHeldSleep) {
      std::unique_lock<std::mutex> l(held_mu_);
      held_cv_.wait_for(l, std::chrono::seconds(60), [this] { return held_released_; });
    } else if (req->sleep_ms() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(req->sleep_ms()));
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      balance_ += req->amount();
      resp->set_balance(balance_);
      resp->set_handler_runs(++runs_);
      const wire::RequestIdPB* id = ctx->request_id();
      request_ids_.push_back(id != nullptr ? id->client_id() + "/" + std::to_string(id->seq_no())
                                           : "none");
    }
    if (req->answer_padding() > 0) resp->set_padding(std::string(req->answer_padding(), 'p'));
    ctx->RespondSuccess();
  }
  void AddUntracked(const LedgerAddRequestPB* req, LedgerAddResponsePB* resp,
                    RpcContext* ctx) override {
    Add(req, resp, ctx);
  }
  void Reset(const ResetRequestPB*, ResetResponsePB*, RpcContext* ctx) override {
    ++resets;
    ctx->RespondSuccess();
  }
  bool AuthorizeAnyUser(const google::protobuf::Message*, google::protobuf::Message*,
                        RpcContext*) override {
    ++any_user_checks;
    return true;
  }
  bool AuthorizeAdmin(const google::protobuf::Message*, google::protobuf::Message*,
                      RpcContext* ctx) override {
    return ctx->remote_user() == "admin";
  }

  uint64_t runs() {
    std::lock_guard<std::mutex> l(mu_);
    return runs_;
  }
  // What each run's RpcContext::request_id() said: "CLIENT/SEQ", or "none".
  std::vector<std::string> request_ids() {
    std::lock_guard<std::mutex> l(mu_);
    return request_ids_;
  }
  // Ends every held handler's wait, and any later one's at once.
  void ReleaseHeld() {
    {
      std::lock_guard<std::mutex> l(held_mu_);
      held_released_ = true;
    }
    held_cv_.notify_all();
  }
  std::atomic<int> resets{0};
  std::atomic<int> refusals{0};
  std::atomic<int> started{0};  // handlers that began adding
  std::atomic<int> any_user_checks{0};

 private:
  std::mutex mu_;
  uint64_t balance_ = 0;
  uint64_t runs_ = 0;
  std::vector<std::string> request_ids_;  // guarded by mu_
  std::mutex held_mu_;
  std::condition_variable held_cv_;
  bool held_released_ = false;  // guarded by held_mu_
};

wire::RequestIdPB Id(const std::string& client, int64_t seq, int64_t first_incomplete,
                     int64_t attempt = 1) {
  wire::RequestIdPB id;
  id.set_client_id(client);
  id.set_seq_no(seq);
  id.set_first_incomplete_seq_no(first_incomplete);
  id.set_attempt_no(attempt);
  return id;
}

std::string AddFrame(int32_t call_id, const wire::RequestIdPB* id, uint32_t amount,
                     uint32_t sleep_ms = 0, uint32_t timeout_ms = 0, uint32_t padding = 0,
                     const char* method = "Add") {
  wire::RequestHeader h;
  h.set_call_id(call_id);
  h.mutable_remote_method()->set_service_name(kLedgerService);
  h.mutable_remote_method()->set_method_name(method);
  if (id != nullptr) *h.mutable_request_id() = *id;
  if (timeout_ms > 0) h.set_timeout_millis(timeout_ms);
  LedgerAddRequestPB req;
  req.set_amount(amount);
  if (sleep_ms > 0) req.set_sleep_ms(sleep_ms);
  if (padding > 0) req.set_answer_padding(padding);
  return RequestFrame(h, req);
}

// One answer: the response (ok) or the error.
struct Answer {
  int32_t call_id = 0;
  bool is_error = false;
  std::string body;
  LedgerAddResponsePB response;
  wire::ErrorStatusPB error;
};

Status ReadAnswer(RawConn* conn, Answer* out) {
  wire::InboundResponseFrame f;
  OSPREY_RETURN_NOT_OK(conn->ReadFrame(&f, MonoDelta::FromSeconds(10)));
  out->call_id = f.header.call_id();
  out->is_error = f.header.is_error();
  out->body = f.main_message.ToString();
  bool parsed = out->is_error ? out->error.ParseFromString(out->body)
                              : out->response.ParseFromString(out->body);
  return parsed ? Status::OK() : Status::Corruption("answer does not parse");
}

// Sends `frame` on `conn` and reads one answer (a failure, not a hang, if
// none comes).
Answer Exchange(RawConn* conn, const std::string& frame) {
  Answer a;
  Status s = conn->Send(frame);
  if (s.ok()) s = ReadAnswer(conn, &a);
  if (!s.ok()) ADD_FAILURE() << s.ToString();
  return a;
}

// Sends `id` again as call `call_id`: the server must refuse it as stale.
void ExpectStale(RawConn* conn, int32_t call_id, const wire::RequestIdPB& id) {
  Answer a = Exchange(conn, AddFrame(call_id, &id, 1));
  EXPECT_TRUE(a.is_error);
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_REQUEST_STALE, a.error.code()) << a.error.message();
}

// Between client and server: relays bytes both ways, except that on its
// first connection it closes both sides in place of the first call
// response: the server ran the call, the client never hears of it. What a
// connection lost at the worst moment looks like.
class DropFirstAnswerProxy {
 public:
  explicit DropFirstAnswerProxy(const Sockaddr& server) : server_(server) {}
  ~DropFirstAnswerProxy() {
    stop_ = true;  // every loop polls it at least every 50 ms
    if (accept_thread_.joinable()) accept_thread_.join();
    for (auto& t : relays_) t.join();
    listener_.Close();
  }
  Status Start(Sockaddr* addr) {
    OSPREY_RETURN_NOT_OK(listener_.Init(Sockaddr::Loopback(0)));
    OSPREY_RETURN_NOT_OK(listener_.Bind(Sockaddr::Loopback(0)));
    OSPREY_RETURN_NOT_OK(listener_.Listen(16));
    OSPREY_RETURN_NOT_OK(listener_.GetLocalAddress(addr));
    OSPREY_RETURN_NOT_OK(listener_.SetNonBlocking(true));
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return Status::OK();
  }
  int answers_dropped() const { return dropped_.load(); }

 private:
  void AcceptLoop() {
    int n = 0;
    while (!stop_) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      auto client = std::make_shared<Socket>();
      Sockaddr remote;
      if (!listener_.Accept(client.get(), &remote, false).ok()) continue;
      auto server = std::make_shared<Socket>();
      if (!server->Init(server_).ok() || !server->Connect(server_).ok()) continue;
      const bool drop = n++ == 0;
      relays_.emplace_back([this, client, server] { Relay(client, server, /*drop=*/false); });
      relays_.emplace_back([this, client, server, drop] { Relay(server, client, drop); });
    }
  }
  // from -> to; with `drop`, frames are read whole (server to client: no
  // connection header) and the first with a call id >= 0 closes both.
  void Relay(std::shared_ptr<Socket> from, std::shared_ptr<Socket> to, bool drop) {
    std::string pending;
    char buf[16384];
    while (!stop_) {
      pollfd p{from->fd(), POLLIN, 0};
      int r = ::poll(&p, 1, 50);
      if (r <= 0) continue;
      ssize_t got = ::recv(from->fd(), buf, sizeof(buf), 0);
      if (got <= 0) break;
      if (!drop) {
        if (!to->WriteAll(reinterpret_cast<uint8_t*>(buf), static_cast<size_t>(got)).ok()) break;
        continue;
      }
      pending.append(buf, static_cast<size_t>(got));
      while (pending.size() >= 4) {
        uint32_t len = (uint32_t{static_cast<uint8_t>(pending[0])} << 24) |
                       (uint32_t{static_cast<uint8_t>(pending[1])} << 16) |
                       (uint32_t{static_cast<uint8_t>(pending[2])} << 8) |
                       uint32_t{static_cast<uint8_t>(pending[3])};
        if (pending.size() < 4 + len) break;
        wire::ResponseFrameDecoder decoder;
        std::vector<wire::InboundResponseFrame> frames;
        std::string frame = pending.substr(0, 4 + len);
        if (decoder.Feed(Slice(frame), &frames).ok() && frames.size() == 1 &&
            frames[0].header.call_id() >= 0) {
          dropped_.fetch_add(1);
          ::shutdown(from->fd(), SHUT_RDWR);
          ::shutdown(to->fd(), SHUT_RDWR);
          return;
        }
        if (!to->WriteAll(reinterpret_cast<const uint8_t*>(frame.data()), frame.size()).ok()) {
          return;
        }
        pending.erase(0, 4 + len);
      }
    }
    ::shutdown(to->fd(), SHUT_WR);
  }

  const Sockaddr server_;
  Socket listener_;
  std::atomic<bool> stop_{false};
  std::atomic<int> dropped_{0};
  std::thread accept_thread_;
  std::vector<std::thread> relays_;  // accept thread only, joined after it
};

class ExactlyOnceTest : public ::testing::Test {
 protected:
  // A test that stops early leaves no handler held for the server's
  // shutdown to wait on.
  void TearDown() override {
    if (ledger_ != nullptr) ledger_->ReleaseHeld();
  }

  void Start(MessengerBuilder builder = MessengerBuilder("ledger-server"), int workers = 4,
             size_t queue_length = 500) {
    builder.set_num_reactors(2);
    ASSERT_TRUE(builder.Build(&server_).ok());
    auto ledger = std::make_unique<Ledger>();
    ledger_ = ledger.get();
    ServicePoolOptions pool;
    pool.worker_threads = workers;
    pool.queue_length = queue_length;
    ASSERT_TRUE(server_->RegisterService(std::move(ledger), pool).ok());
    ASSERT_TRUE(server_->Listen(Sockaddr::Loopback(0), &addr_).ok());
  }
  void Connect(RawConn* conn, const std::string& user = "alice") {
    ASSERT_TRUE(conn->Connect(addr_).ok());
    ASSERT_TRUE(conn->Negotiate(user).ok());
  }
  // One Add (tracked) or AddUntracked call of 1 through a proxy that drops
  // the first answer; `proxy_policy`, if given, is the proxy's retry policy.
  Status CallLosingTheFirstAnswer(bool tracked, RpcController* ctl, LedgerAddResponsePB* resp,
                                  uint32_t amount = 1, const RetryPolicy* proxy_policy = nullptr) {
    DropFirstAnswerProxy faulty(addr_);
    Sockaddr via;
    OSPREY_RETURN_NOT_OK(faulty.Start(&via));
    if (client_ == nullptr) {
      OSPREY_RETURN_NOT_OK(MessengerBuilder("client").set_num_reactors(1).Build(&client_));
    }
    LedgerServiceProxy proxy(client_, via);
    if (proxy_policy != nullptr) OSPREY_RETURN_NOT_OK(proxy.set_retry_policy(*proxy_policy));
    LedgerAddRequestPB req;
    req.set_amount(amount);
    Status s = tracked ? proxy.Add(req, resp, ctl) : proxy.AddUntracked(req, resp, ctl);
    answers_dropped_ += faulty.answers_dropped();
    return s;
  }
  double Gauge(const std::string& name) {
    for (const MetricValue& v : server_->metrics()->Snapshot()) {
      if (v.name == name) return v.value;
    }
    ADD_FAILURE() << "no metric " << name;
    return -1;
  }

  std::shared_ptr<Messenger> server_;
  Ledger* ledger_ = nullptr;
  Sockaddr addr_;
  std::shared_ptr<Messenger> client_;
  int answers_dropped_ = 0;
};

TEST_F(ExactlyOnceTest, ARetryOfACompletedRequestGetsTheStoredAnswerWithoutRunning) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  const wire::RequestIdPB first = Id("client-a", 1, 1);
  Answer a = Exchange(&conn, AddFrame(10, &first, 5));
  ASSERT_FALSE(a.is_error) << a.error.message();
  EXPECT_EQ(10, a.call_id);
  EXPECT_EQ(5u, a.response.balance());

  // The same request again, as a retry: the same answer, byte for byte,
  // under the retry's call id; the handler does not run again.
  const wire::RequestIdPB retry = Id("client-a", 1, 1, /*attempt=*/2);
  Answer b = Exchange(&conn, AddFrame(11, &retry, 5));
  EXPECT_EQ(11, b.call_id);
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(1u, ledger_->runs());

  // Another request of the same client runs.
  const wire::RequestIdPB next = Id("client-a", 2, 1);
  Answer c = Exchange(&conn, AddFrame(12, &next, 7));
  EXPECT_EQ(12u, c.response.balance());
  EXPECT_EQ(2u, ledger_->runs());
  EXPECT_EQ(2, Gauge("osprey_server_remembered_answers"));
  EXPECT_EQ(1, Gauge("osprey_server_remembered_clients"));

  // The same call without a request id is not tracked: it runs.
  Answer d = Exchange(&conn, AddFrame(13, nullptr, 1));
  EXPECT_EQ(3u, ledger_->runs());
}

// Duplicates that arrive while the first attempt runs wait for it (at most
// 16); the ones after it get the stored answer. The counters tell the two
// apart, and the handler runs once.
TEST_F(ExactlyOnceTest, DuplicatesWaitForTheFirstAttemptOrGetItsStoredAnswer) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr int kConns = 4;
  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < kConns; ++i) {
    conns.push_back(std::make_unique<RawConn>());
    ASSERT_NO_FATAL_FAILURE(Connect(conns.back().get()));
  }
  // The first attempt is held while it runs, so 16 duplicates arrive and
  // wait; a 17th is one too many, and refused at once.
  const wire::RequestIdPB id = Id("client-b", 1, 1);
  ASSERT_TRUE(conns[0]->Send(AddFrame(100, &id, 3, kHeldSleep)).ok());
  ASSERT_TRUE(WaitUntil([&] { return ledger_->started.load() == 1; }))
      << "the first attempt did not start within 20 s";
  for (int j = 1; j <= 16; ++j) {
    ASSERT_TRUE(conns[j % kConns]->Send(AddFrame(100 + j, &id, 3)).ok());
  }
  // The server reads the duplicates (on other connections than the
  // 17th's, so in no order with it) and each waits; the first attempt
  // waits meanwhile.
  ASSERT_TRUE(WaitUntil([&] { return Gauge("osprey_server_tracked_duplicates_waiting") == 16; }))
      << Gauge("osprey_server_tracked_duplicates_waiting") << " duplicates waiting after 20 s";
  ASSERT_TRUE(conns[1]->Send(AddFrame(200, &id, 3)).ok());
  // Its refusal comes before the answers of the duplicates on its
  // connection, which wait for the first attempt.
  Answer refusal;
  ASSERT_TRUE(ReadAnswer(conns[1].get(), &refusal).ok());
  EXPECT_EQ(200, refusal.call_id);
  EXPECT_TRUE(refusal.is_error);
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY, refusal.error.code())
      << refusal.error.message();
  ledger_->ReleaseHeld();
  std::set<std::string> bodies;
  for (int j = 0; j <= 16; ++j) {
    Answer a;
    ASSERT_TRUE(ReadAnswer(conns[j % kConns].get(), &a).ok());
    ASSERT_FALSE(a.is_error) << a.error.message();
    bodies.insert(a.body);
  }
  auto duplicates = [&](const std::string& answer) {
    for (const MetricValue& v : server_->metrics()->Snapshot()) {
      if (v.name == "osprey_server_tracked_duplicates_total" &&
          v.labels == MetricLabels{{"answer", answer}}) {
        return v.value;
      }
    }
    return -1.0;
  };
  EXPECT_EQ(16, duplicates("after_waiting"));
  EXPECT_EQ(1, duplicates("refused"));
  EXPECT_EQ(0, duplicates("from_memory"));
  // After it: 20 more, each answered from memory.
  for (int j = 0; j < 20; ++j) {
    Answer a = Exchange(conns[j % kConns].get(), AddFrame(300 + j, &id, 3));
    ASSERT_FALSE(a.is_error) << a.error.message();
    bodies.insert(a.body);
  }
  EXPECT_EQ(20, duplicates("from_memory"));
  EXPECT_EQ(16, duplicates("after_waiting"));
  EXPECT_EQ(1u, bodies.size());
  EXPECT_EQ(1u, ledger_->runs());
}

// A stored answer is tied to the user who authenticated its call: another
// user presenting the same client id and sequence number is another client
// (its call runs, and never sees alice's answer). Every attempt, the
// duplicate answered from memory included, is authorized first.
TEST_F(ExactlyOnceTest, AStoredAnswerGoesOnlyToItsUserAndDuplicatesAreAuthorizedFirst) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConn alice, mallory;
  ASSERT_NO_FATAL_FAILURE(Connect(&alice, "alice"));
  ASSERT_NO_FATAL_FAILURE(Connect(&mallory, "mallory"));
  const wire::RequestIdPB id = Id("alices-client", 1, 1);
  Answer first = Exchange(&alice, AddFrame(1, &id, 40));
  ASSERT_FALSE(first.is_error) << first.error.message();
  EXPECT_EQ(1, ledger_->any_user_checks.load());

  Answer again = Exchange(&alice, AddFrame(2, &id, 40));
  EXPECT_EQ(first.body, again.body);
  EXPECT_EQ(1u, ledger_->runs());
  EXPECT_EQ(2, ledger_->any_user_checks.load());  // authorized, then answered from memory

  Answer theirs = Exchange(&mallory, AddFrame(3, &id, 2));
  ASSERT_FALSE(theirs.is_error) << theirs.error.message();
  EXPECT_NE(first.body, theirs.body);
  EXPECT_EQ(2u, ledger_->runs());  // mallory's own first attempt ran
  EXPECT_EQ(2, Gauge("osprey_server_remembered_clients"));
}

// A first attempt whose connection closed while it waited in the queue is
// dropped unrun; its retry, on a new connection, runs (it used to wait for
// the dropped attempt and be answered TOO_BUSY). Each step waits for what
// the server shows of the one before (the queue's length), not a time.
TEST_F(ExactlyOnceTest, ARetryBehindAFirstAttemptDroppedUnrunRunsInItsPlace) {
  ASSERT_NO_FATAL_FAILURE(Start(MessengerBuilder("ledger-server"), /*workers=*/1));
  RawConn busy, lost, retry;
  ASSERT_NO_FATAL_FAILURE(Connect(&busy));
  ASSERT_NO_FATAL_FAILURE(Connect(&lost));
  ASSERT_NO_FATAL_FAILURE(Connect(&retry));
  const wire::RequestIdPB blocker = Id("busy-client", 1, 1);
  ASSERT_TRUE(busy.Send(AddFrame(1, &blocker, 1, kHeldSleep)).ok());
  ASSERT_TRUE(WaitUntil([&] { return ledger_->started.load() == 1; }))
      << "the blocker did not start within 20 s";
  const wire::RequestIdPB first = Id("client-j", 1, 1);
  ASSERT_TRUE(lost.Send(AddFrame(2, &first, 5)).ok());
  ASSERT_TRUE(WaitUntil([&] { return Gauge("osprey_server_queue_length") == 1; }))
      << "the first attempt was not queued within 20 s";
  lost.Close();
  ASSERT_TRUE(WaitUntil([&] { return Gauge("osprey_server_queue_length") == 0; }))
      << "the closed connection's call was not dropped from the queue within 20 s";
  const wire::RequestIdPB second = Id("client-j", 1, 1, /*attempt=*/2);
  ASSERT_TRUE(retry.Send(AddFrame(3, &second, 5)).ok());
  ASSERT_TRUE(WaitUntil([&] { return Gauge("osprey_server_queue_length") == 1; }))
      << "the retry was not queued within 20 s";
  ledger_->ReleaseHeld();
  Answer a;
  ASSERT_TRUE(ReadAnswer(&retry, &a).ok());
  EXPECT_EQ(3, a.call_id);
  ASSERT_FALSE(a.is_error) << a.error.message();
  EXPECT_EQ(2u, ledger_->runs());  // the blocker and the retry
  EXPECT_EQ(2, ledger_->started.load()) << "the dropped first attempt ran";
}

TEST_F(ExactlyOnceTest, AnAttemptBelowTheClientsFirstIncompleteIsStale) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  const wire::RequestIdPB one = Id("client-c", 1, 1);
  Answer a = Exchange(&conn, AddFrame(1, &one, 1));
  // The client's next request says it has everything below 2: the server
  // forgets the first answer, and a late copy of the first is refused.
  const wire::RequestIdPB two = Id("client-c", 2, 2);
  a = Exchange(&conn, AddFrame(2, &two, 1));
  EXPECT_EQ(1, Gauge("osprey_server_remembered_answers"));
  ExpectStale(&conn, 3, Id("client-c", 1, 1, 2));
  EXPECT_EQ(2u, ledger_->runs());
}

// The tracker's time, moved by the test: TTLs without sleeping.
struct FakeClock {
  MonoTime Now() const { return start + MonoDelta::FromNanoseconds(offset_ns.load()); }
  void Advance(MonoDelta d) { offset_ns += d.ToNanoseconds(); }
  std::function<MonoTime()> Fn() {
    return [this] { return Now(); };
  }
  const MonoTime start = MonoTime::Now();
  std::atomic<int64_t> offset_ns{0};
};

TEST_F(ExactlyOnceTest, AnAnswerIsForgottenAfterItsTimeToLiveAndItsRetryRefused) {
  FakeClock clock;
  RememberedResults r;
  r.response_ttl = MonoDelta::FromSeconds(10);
  r.clock = clock.Fn();
  ASSERT_NO_FATAL_FAILURE(Start(MessengerBuilder("ledger-server").set_remembered_results(r)));
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  const wire::RequestIdPB one = Id("client-d", 1, 1);
  Answer a = Exchange(&conn, AddFrame(1, &one, 1));
  EXPECT_EQ(1, Gauge("osprey_server_remembered_answers"));

  // At its time to live exactly, the answer is still there.
  clock.Advance(MonoDelta::FromSeconds(10));
  const wire::RequestIdPB other = Id("client-e", 1, 1);
  a = Exchange(&conn, AddFrame(2, &other, 1));  // another client's call sweeps
  EXPECT_EQ(2, Gauge("osprey_server_remembered_answers"));
  Answer kept = Exchange(&conn, AddFrame(3, &one, 1));
  EXPECT_FALSE(kept.is_error) << kept.error.message();
  EXPECT_EQ(2u, ledger_->runs());

  // One nanosecond past it, it is forgotten, and its retry is refused, not
  // run twice.
  clock.Advance(MonoDelta::FromNanoseconds(1));
  const wire::RequestIdPB other2 = Id("client-e", 2, 1);
  a = Exchange(&conn, AddFrame(4, &other2, 1));
  EXPECT_EQ(2, Gauge("osprey_server_remembered_answers"));  // client-e's
  ExpectStale(&conn, 5, Id("client-d", 1, 1, 2));
  EXPECT_EQ(3u, ledger_->runs());
}

TEST_F(ExactlyOnceTest, AClientSilentPastItsTimeToLiveIsForgottenWithItsAnswers) {
  FakeClock clock;
  RememberedResults r;
  r.client_ttl = MonoDelta::FromSeconds(30);
  r.clock = clock.Fn();
  ASSERT_NO_FATAL_FAILURE(Start(MessengerBuilder("ledger-server").set_remembered_results(r)));
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  for (int seq = 1; seq <= 3; ++seq) {
    const wire::RequestIdPB id = Id("client-h", seq, 1);
    Exchange(&conn, AddFrame(seq, &id, 1));
  }
  EXPECT_EQ(3, Gauge("osprey_server_remembered_answers"));
  EXPECT_EQ(1, Gauge("osprey_server_remembered_clients"));
  const double with_h = Gauge("osprey_server_remembered_bytes");
  clock.Advance(MonoDelta::FromSeconds(30));
  const wire::RequestIdPB other = Id("client-i", 1, 1);
  Exchange(&conn, AddFrame(9, &other, 1));
  EXPECT_EQ(2, Gauge("osprey_server_remembered_clients"));  // at the edge: kept
  clock.Advance(MonoDelta::FromNanoseconds(1));
  const wire::RequestIdPB other2 = Id("client-i", 2, 1);
  Exchange(&conn, AddFrame(10, &other2, 1));
  EXPECT_EQ(1, Gauge("osprey_server_remembered_clients"));  // client-i only
  EXPECT_EQ(2, Gauge("osprey_server_remembered_answers"));
  EXPECT_GT(Gauge("osprey_server_remembered_bytes"), 0);
  EXPECT_LT(Gauge("osprey_server_remembered_bytes"), with_h);
  // As in Kudu, the server no longer knows client-h: what it sends now is
  // a new request, and runs.
  const uint64_t runs = ledger_->runs();
  const wire::RequestIdPB again = Id("client-h", 1, 1, 2);
  Answer a = Exchange(&conn, AddFrame(11, &again, 1));
  EXPECT_FALSE(a.is_error) << a.error.message();
  EXPECT_EQ(runs + 1, ledger_->runs());
}

TEST_F(ExactlyOnceTest, RememberedAnswersStayWithinTheirByteBound) {
  constexpr size_t kBound = 64 * 1024;
  RememberedResults r;
  r.max_bytes = kBound;
  ASSERT_NO_FATAL_FAILURE(Start(MessengerBuilder("ledger-server").set_remembered_results(r)));
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  // 100 answers of 4 KiB that the client never acknowledges: 400 KiB.
  // Sequence number 1 is never sent: it has no answer to evict.
  constexpr int kCalls = 100;
  for (int i = 2; i <= kCalls; ++i) {
    const wire::RequestIdPB id = Id("client-f", i, 1);
    Answer a = Exchange(&conn, AddFrame(i, &id, 1, 0, 0, /*padding=*/4096));
    ASSERT_FALSE(a.is_error) << a.error.message();
    EXPECT_LE(Gauge("osprey_server_remembered_bytes"), static_cast<double>(kBound));
  }
  EXPECT_LT(Gauge("osprey_server_remembered_answers"), 20);
  // The oldest answer was evicted: its retry is refused, not run again.
  const wire::RequestIdPB retry = Id("client-f", 2, 1, 2);
  Answer a = Exchange(&conn, AddFrame(500, &retry, 1));
  ASSERT_TRUE(a.is_error);
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_REQUEST_STALE, a.error.code());
  // The newest is still there.
  const wire::RequestIdPB newest = Id("client-f", kCalls, 1, 2);
  a = Exchange(&conn, AddFrame(501, &newest, 1));
  ASSERT_FALSE(a.is_error) << a.error.message();
  EXPECT_EQ(static_cast<uint64_t>(kCalls - 1), a.response.handler_runs());
  EXPECT_EQ(static_cast<uint64_t>(kCalls - 1), ledger_->runs());
  // Sequence number 1 never ran: the evictions above it do not make its
  // first attempt stale.
  const wire::RequestIdPB first = Id("client-f", 1, 1);
  a = Exchange(&conn, AddFrame(502, &first, 1));
  ASSERT_FALSE(a.is_error) << a.error.message();
  EXPECT_EQ(static_cast<uint64_t>(kCalls), ledger_->runs());
}

// Issue 47: under SASL PLAIN a user is a name the peer chose. A peer at
// 127.0.0.2 naming 120 users, each holding just under the victim's answer,
// must not make the victim's stored answer (127.0.0.1) stale: the shares
// of PLAIN names are the peer's address, so the attacker's names share one.
// (Before, each name had a share of its own, and at the whole bound the
// victim, holding the most, gave first: its retry was refused STALE.)
TEST_F(ExactlyOnceTest, APeerNamingManyPlainUsersCannotMakeAnothersAnswerStale) {
  constexpr size_t kBound = 256 * 1024;
  RememberedResults r;
  r.max_bytes = kBound;
  ASSERT_NO_FATAL_FAILURE(Start(MessengerBuilder("ledger-server").set_remembered_results(r)));
  Sockaddr victim_at, attacker_at;
  ASSERT_TRUE(Sockaddr::Parse("127.0.0.1:0", &victim_at).ok());
  ASSERT_TRUE(Sockaddr::Parse("127.0.0.2:0", &attacker_at).ok());
  RawConn victim;
  ASSERT_TRUE(victim.ConnectFrom(victim_at, addr_).ok());
  ASSERT_TRUE(victim.Negotiate("victim").ok());
  const wire::RequestIdPB mine = Id("victim-client", 1, 1);
  Answer first = Exchange(&victim, AddFrame(1, &mine, 7, 0, 0, /*padding=*/16 * 1024));
  ASSERT_FALSE(first.is_error) << first.error.message();
  // 120 names of 12 KiB each: 1.4 MiB asked of a 256 KiB memory.
  int refused = 0;
  for (int i = 0; i < 120; ++i) {
    RawConn attacker;
    ASSERT_TRUE(attacker.ConnectFrom(attacker_at, addr_).ok());
    ASSERT_TRUE(attacker.Negotiate("name-" + std::to_string(i)).ok());
    const wire::RequestIdPB id = Id("attacker-" + std::to_string(i), 1, 1);
    Answer a = Exchange(&attacker, AddFrame(1, &id, 1, 0, 0, /*padding=*/12 * 1024));
    if (a.is_error) ++refused;
    EXPECT_LE(Gauge("osprey_server_remembered_bytes"), static_cast<double>(kBound));
  }
  // The victim's retry of its call gets its stored answer; nothing ran twice.
  const uint64_t runs = ledger_->runs();
  const wire::RequestIdPB retry = Id("victim-client", 1, 1, 2);
  Answer again = Exchange(&victim, AddFrame(2, &retry, 7));
  ASSERT_FALSE(again.is_error) << "the victim's answer was evicted by another peer's names: "
                               << again.error.message();
  EXPECT_EQ(first.response.balance(), again.response.balance());
  EXPECT_EQ(first.response.handler_runs(), again.response.handler_runs());
  EXPECT_EQ(runs, ledger_->runs());
  EXPECT_EQ(0, refused) << "the attacker's own oldest answers give way to its newest";
}

// A client id longer than 64 bytes (Kudu's are 32) is refused before it
// costs the tracker anything.
TEST_F(ExactlyOnceTest, AClientIdLongerThanSixtyFourBytesIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  const wire::RequestIdPB id = Id(std::string(65, 'x'), 1, 1);
  Answer a = Exchange(&conn, AddFrame(1, &id, 1));
  ASSERT_TRUE(a.is_error);
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_INVALID_REQUEST, a.error.code()) << a.error.message();
  EXPECT_EQ(0u, ledger_->runs());
  EXPECT_EQ(0, Gauge("osprey_server_remembered_clients"));
  const wire::RequestIdPB ok = Id(std::string(64, 'x'), 1, 1);
  a = Exchange(&conn, AddFrame(2, &ok, 1));
  EXPECT_FALSE(a.is_error) << a.error.message();
  EXPECT_EQ(1u, ledger_->runs());
}

TEST_F(ExactlyOnceTest, AnAttemptThatDidNotRunLeavesNothingAndItsRetryRuns) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  // Four sleeping calls hold the four workers; the tracked call behind them
  // waits past its 50 ms deadline and is refused unrun. (It is sent once
  // the four run: queued with them, it would go first, its deadline being
  // the earliest.)
  for (int i = 0; i < 4; ++i) {
    const wire::RequestIdPB busy = Id("busy", i + 1, 1);
    ASSERT_TRUE(conn.Send(AddFrame(100 + i, &busy, 0, /*sleep_ms=*/400)).ok());
  }
  for (int i = 0; i < 2000 && ledger_->started.load() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(4, ledger_->started.load());
  const wire::RequestIdPB id = Id("client-g", 1, 1);
  ASSERT_TRUE(conn.Send(AddFrame(1, &id, 9, 0, /*timeout_ms=*/50)).ok());
  Answer a;
  bool refused = false;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(ReadAnswer(&conn, &a).ok());
    if (a.call_id == 1) {
      refused = a.is_error;
      EXPECT_EQ(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY, a.error.code()) << a.error.message();
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_EQ(4u, ledger_->runs());
  const wire::RequestIdPB retry = Id("client-g", 1, 1, 2);
  a = Exchange(&conn, AddFrame(2, &retry, 9));
  ASSERT_FALSE(a.is_error) << a.error.message();
  EXPECT_EQ(5u, ledger_->runs());
}

TEST_F(ExactlyOnceTest, AnErrorAnswerIsNotRememberedSoItsRetryRuns) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConn conn;
  ASSERT_NO_FATAL_FAILURE(Connect(&conn));
  // Amount 0 makes the ledger refuse (an application error).
  const wire::RequestIdPB id = Id("client-j", 1, 1);
  Answer a = Exchange(&conn, AddFrame(1, &id, 0));
  ASSERT_TRUE(a.is_error);
  EXPECT_EQ(0, Gauge("osprey_server_remembered_answers"));
  const wire::RequestIdPB retry = Id("client-j", 1, 1, 2);
  a = Exchange(&conn, AddFrame(2, &retry, 0));
  ASSERT_TRUE(a.is_error);
  EXPECT_EQ(2, ledger_->refusals.load());  // ran again, as in Kudu
}

TEST_F(ExactlyOnceTest, TheGeneratedProxySendsRequestIdsForTrackedMethodsOnlyAndHandlersSeeThem) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RecordingProxy wire_tap(addr_);
  Sockaddr via;
  ASSERT_TRUE(wire_tap.Start(&via).ok());
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  LedgerServiceProxy proxy(client, via);
  for (int i = 0; i < 2; ++i) {
    LedgerAddRequestPB req;
    req.set_amount(1);
    LedgerAddResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok());
  }
  {
    LedgerAddRequestPB req;
    req.set_amount(1);
    LedgerAddResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.AddUntracked(req, &resp, &ctl).ok());
  }
  // Decode the client's frames after the connection header.
  std::string c2s = wire_tap.client_to_server();
  wire::RequestFrameDecoder decoder;
  std::vector<wire::InboundRequestFrame> frames;
  ASSERT_TRUE(decoder.Feed(Slice(c2s.data() + 7, c2s.size() - 7), &frames).ok());
  std::vector<wire::RequestIdPB> ids;
  int untracked = 0;
  for (const auto& f : frames) {
    if (f.header.call_id() < 0) continue;  // negotiation and context
    if (f.header.remote_method().method_name() == "AddUntracked") {
      EXPECT_FALSE(f.header.has_request_id());
      ++untracked;
      continue;
    }
    ASSERT_TRUE(f.header.has_request_id());
    ids.push_back(f.header.request_id());
  }
  EXPECT_EQ(1, untracked);
  ASSERT_EQ(2u, ids.size());
  EXPECT_EQ(32u, ids[0].client_id().size());
  EXPECT_EQ(std::string::npos, ids[0].client_id().find_first_not_of("0123456789abcdef"));
  EXPECT_EQ(ids[0].client_id(), ids[1].client_id());  // one per messenger
  EXPECT_EQ(ids[0].seq_no() + 1, ids[1].seq_no());
  EXPECT_EQ(1, ids[0].attempt_no());
  // Sync calls one after the other: each is the lowest in flight.
  EXPECT_EQ(ids[1].seq_no(), ids[1].first_incomplete_seq_no());
  // The handler sees the ids a tracked call carries, to store with effects
  // that outlive the process; an untracked call has none.
  const auto named = [](const wire::RequestIdPB& id) {
    return id.client_id() + "/" + std::to_string(id.seq_no());
  };
  EXPECT_EQ((std::vector<std::string>{named(ids[0]), named(ids[1]), "none"}),
            ledger_->request_ids());
}

TEST_F(ExactlyOnceTest, AuthorizationHooksRefuseOneUserAndNotAnother) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto call_reset = [&](const std::string& user) {
    std::shared_ptr<Messenger> client;
    EXPECT_TRUE(MessengerBuilder("client-" + user).set_num_reactors(1).Build(&client).ok());
    LedgerServiceProxy proxy(client, addr_);
    proxy.set_user(user);
    ResetRequestPB req;
    ResetResponsePB resp;
    RpcController ctl;
    Status s = proxy.Reset(req, &resp, &ctl);
    // The connection stays usable after a refusal.
    LedgerAddRequestPB add;
    add.set_amount(1);
    LedgerAddResponsePB add_resp;
    RpcController ctl2;
    EXPECT_TRUE(proxy.Add(add, &add_resp, &ctl2).ok());
    return s;
  };
  Status s = call_reset("alice");
  EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
  // Kudu's words and code for it.
  EXPECT_NE(std::string::npos, s.ToString().find("Not authorized: unauthorized access to method: "
                                                 "Reset"))
      << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("FATAL_UNAUTHORIZED")) << s.ToString();
  EXPECT_EQ(0, ledger_->resets.load());  // the handler never ran

  s = call_reset("admin");
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(1, ledger_->resets.load());
  // The service's default hook ran for every Add (one per user).
  EXPECT_EQ(2, ledger_->any_user_checks.load());
}

RetryPolicy QuickRetries(int attempts = 10) {
  RetryPolicy p;
  p.max_attempts = attempts;
  p.initial_backoff = MonoDelta::FromMilliseconds(10);
  p.max_backoff = MonoDelta::FromMilliseconds(100);
  return p;
}

TEST_F(ExactlyOnceTest, ALostAnswerIsRetriedAndTheRetryGetsTheFirstAttemptsAnswer) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const RetryPolicy policy = QuickRetries();  // the proxy's, for every call
  LedgerAddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  Status s = CallLosingTheFirstAnswer(/*tracked=*/true, &ctl, &resp, 42, &policy);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(1, answers_dropped_);
  EXPECT_EQ(2, ctl.attempts());
  EXPECT_EQ(1u, ledger_->runs());      // exactly once
  EXPECT_EQ(42u, resp.balance());      // the first attempt's answer
  EXPECT_EQ(1u, resp.handler_runs());  // ... not a second run's
}

// Issue 49: a proxy whose target is a set of servers. An exactly-once call
// whose answer was lost (it ran on server A) is retried on A only, where
// its answer is stored, never on B, where it would run again; an
// idempotent untracked call's retry may go to B.
TEST_F(ExactlyOnceTest, ALostTrackedCallOfASetIsRetriedOnlyOnTheServerThatMayHaveRunIt) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::shared_ptr<Messenger> other;
  ASSERT_TRUE(MessengerBuilder("ledger-b").set_num_reactors(1).Build(&other).ok());
  auto ledger_b = std::make_unique<Ledger>();
  Ledger* b = ledger_b.get();
  ASSERT_TRUE(other->RegisterService(std::move(ledger_b)).ok());
  Sockaddr b_addr;
  ASSERT_TRUE(other->Listen(Sockaddr::Loopback(0), &b_addr).ok());
  DropFirstAnswerProxy faulty(addr_);  // in front of server A
  Sockaddr a_via;
  ASSERT_TRUE(faulty.Start(&a_via).ok());
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  LedgerServiceProxy proxy(client, a_via.ToString() + "," + b_addr.ToString());
  proxy.set_load_balancing(LoadBalancing::kRoundRobin);  // the first call goes to A
  LedgerAddRequestPB req;
  req.set_amount(42);
  LedgerAddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  ASSERT_TRUE(ctl.set_retry_policy(QuickRetries()).ok());
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(1, faulty.answers_dropped());
  EXPECT_EQ(2, ctl.attempts());
  EXPECT_EQ(a_via, ctl.server()) << "retried on another server";
  EXPECT_EQ(1u, ledger_->runs());
  EXPECT_EQ(0u, b->runs()) << "an exactly-once call ran on a second server";
  EXPECT_EQ(42u, resp.balance());
  other->Shutdown();
  client->Shutdown();
}

TEST_F(ExactlyOnceTest, AnUntrackedCallIsNotRetriedAfterSendUnlessMarkedIdempotent) {
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    LedgerAddResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(ctl.set_retry_policy(QuickRetries()).ok());
    Status s = CallLosingTheFirstAnswer(/*tracked=*/false, &ctl, &resp);
    EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
    EXPECT_EQ(1, ctl.attempts());  // it may have run: not sent again
    EXPECT_EQ(1u, ledger_->runs());
  }
  {
    LedgerAddResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(ctl.set_retry_policy(QuickRetries()).ok());
    ctl.set_idempotent(true);  // the caller says running it twice is fine
    Status s = CallLosingTheFirstAnswer(/*tracked=*/false, &ctl, &resp);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(2, ctl.attempts());
    EXPECT_EQ(3u, ledger_->runs());  // ran again, as allowed
  }
}

TEST_F(ExactlyOnceTest, ATooBusyCallIsRetriedUntilTheQueueDrainsOrItsDeadline) {
  // One worker and a queue of one: two sleeping calls fill both.
  ASSERT_NO_FATAL_FAILURE(Start(MessengerBuilder("ledger-server"), 1, 1));
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  LedgerServiceProxy proxy(client, addr_);
  MonoDelta occupier_timeout = MonoDelta::FromSeconds(5);
  auto occupy = [&](uint32_t sleep_ms, std::vector<std::unique_ptr<RpcController>>* ctls,
                    CountDownLatch* done) {
    const int started = ledger_->started.load();
    for (int i = 0; i < 2; ++i) {
      // One at a time: the first must reach the worker before the second
      // takes the queue's one place.
      if (i > 0) {
        ASSERT_TRUE(WaitUntil([&] { return ledger_->started.load() > started; }))
            << "the first did not start in 20 s";
      }
      auto req = std::make_shared<LedgerAddRequestPB>();
      req->set_amount(0);
      req->set_sleep_ms(sleep_ms);
      auto resp = std::make_shared<LedgerAddResponsePB>();
      ctls->push_back(std::make_unique<RpcController>());
      // Due before the call that knocks: in deadline order a call due
      // sooner would push a queued one out instead of being refused.
      ctls->back()->set_timeout(occupier_timeout);
      proxy.AddUntrackedAsync(*req, resp.get(), ctls->back().get(),
                              [req, resp, done] { done->CountDown(); });
    }
  };
  {
    std::vector<std::unique_ptr<RpcController>> busy;
    CountDownLatch drained(2);
    occupy(400, &busy, &drained);
    ASSERT_TRUE(WaitUntil([&] { return Gauge("osprey_server_queue_length") == 1; }))
        << "the second did not take the queue's place in 20 s";
    // Async, with retries: refused while both are busy, then served.
    LedgerAddRequestPB req;
    req.set_amount(5);
    LedgerAddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    ASSERT_TRUE(ctl.set_retry_policy(QuickRetries(100)).ok());
    CountDownLatch done(1);
    proxy.AddAsync(req, &resp, &ctl, [&] { done.CountDown(); });
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(15)));
    EXPECT_TRUE(ctl.status().ok()) << ctl.status().ToString();
    EXPECT_GT(ctl.attempts(), 1);
    ASSERT_TRUE(drained.WaitFor(MonoDelta::FromSeconds(10)));
  }
  {
    std::vector<std::unique_ptr<RpcController>> busy;
    CountDownLatch drained(2);
    occupier_timeout = MonoDelta::FromMilliseconds(300);
    occupy(3000, &busy, &drained);
    ASSERT_TRUE(WaitUntil([&] { return Gauge("osprey_server_queue_length") == 1; }))
        << "the second did not take the queue's place in 20 s";
    // Sync, with a deadline the queue will not drain by: it gives up at it.
    LedgerAddRequestPB req;
    req.set_amount(5);
    LedgerAddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromMilliseconds(500));
    ASSERT_TRUE(ctl.set_retry_policy(QuickRetries(100)).ok());
    MonoTime start = MonoTime::Now();
    Status s = proxy.Add(req, &resp, &ctl);
    MonoDelta took = MonoTime::Now() - start;
    EXPECT_TRUE(s.IsServiceUnavailable() || s.IsTimedOut()) << s.ToString();
    EXPECT_GT(ctl.attempts(), 1);
    // At its deadline, not when the queue drains (3 s): the margin is for
    // a slow host's timers.
    EXPECT_LT(took, MonoDelta::FromMilliseconds(2000)) << took.ToString();
    ASSERT_TRUE(drained.WaitFor(MonoDelta::FromSeconds(10)));
  }
}

TEST_F(ExactlyOnceTest, WithoutARetryPolicyAFailedCallIsNotRetried) {
  ASSERT_NO_FATAL_FAILURE(Start());
  LedgerAddResponsePB resp;
  RpcController ctl;
  Status s = CallLosingTheFirstAnswer(/*tracked=*/true, &ctl, &resp);  // tracked, but no policy
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_EQ(1, ctl.attempts());
}

// A call that found no server to connect to was never sent: it is retried
// though its method is neither tracked nor idempotent, until the server
// listens.
TEST(RetryTest, ACallThatCouldNotConnectIsRetriedUntilTheServerListens) {
  const Sockaddr addr = ClosedLoopbackPort();
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, addr);
  kudu::rpc_test::AddRequestPB req;
  req.set_x(20);
  req.set_y(22);
  kudu::rpc_test::AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  ASSERT_TRUE(ctl.set_retry_policy(QuickRetries(200)).ok());
  CountDownLatch done(1);
  proxy.AddAsync(req, &resp, &ctl, [&] { done.CountDown(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // refused meanwhile
  std::shared_ptr<Messenger> server;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
  ASSERT_TRUE(server->RegisterService(std::make_unique<bench::BenchService>()).ok());
  ASSERT_TRUE(server->Listen(addr).ok());
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ(42u, resp.result());
  EXPECT_GT(ctl.attempts(), 1);
}

// Without the options: a service authorizes from code by overriding
// ServiceIf::Authorize.
class ByCode : public bench::BenchService {
 public:
  bool Authorize(const ServiceMethod& method, const google::protobuf::Message* req,
                 google::protobuf::Message* resp, RpcContext* ctx) override {
    if (method.name == "Echo" && ctx->remote_user() != "trusted") {
      ctx->RespondRpcFailure(wire::ErrorStatusPB::ERROR_APPLICATION,
                             Status::NotAuthorized("only trusted users may echo"));
      return false;
    }
    return ServiceIf::Authorize(method, req, resp, ctx);
  }
};

// A retry policy that could not mean anything is refused with the field's
// name, and the one set before stays.
TEST(RetryPolicyTest, ANonsensePolicyIsRefusedAndChangesNothing) {
  RpcController ctl;
  RetryPolicy good = RetryPolicy::Default();
  ASSERT_TRUE(ctl.set_retry_policy(good).ok());
  struct Bad {
    const char* what;
    RetryPolicy p;
  };
  std::vector<Bad> bad(5, {"", RetryPolicy::Default()});
  bad[0].what = "max_attempts";
  bad[0].p.max_attempts = 0;
  bad[1].what = "multiplier";
  bad[1].p.multiplier = std::nan("");
  bad[2].what = "multiplier";
  bad[2].p.multiplier = 0;
  bad[3].what = "negative";
  bad[3].p.initial_backoff = MonoDelta::FromMilliseconds(-1);
  bad[4].what = "max_backoff";
  bad[4].p.max_backoff = MonoDelta::FromMilliseconds(1);
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, Sockaddr::Loopback(1));
  for (const Bad& b : bad) {
    Status s = ctl.set_retry_policy(b.p);
    EXPECT_TRUE(s.IsInvalidArgument()) << b.what;
    EXPECT_NE(std::string::npos, s.message().find(b.what)) << s.ToString();
    EXPECT_TRUE(proxy.set_retry_policy(b.p).IsInvalidArgument()) << b.what;
  }
  EXPECT_TRUE(proxy.set_retry_policy(good).ok());
}

// A proxy's settings change while other threads call through it: each call
// takes the settings of its start, and nothing races (TSan runs this).
TEST(RetryPolicyTest, AProxysSettingsChangeWhileItsCallsFlow) {
  std::shared_ptr<Messenger> server, client;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
  ASSERT_TRUE(server->RegisterService(std::make_unique<bench::BenchService>()).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, addr);
  std::atomic<bool> stop{false};
  std::thread setter([&] {
    for (int i = 0; !stop.load(); ++i) {
      RetryPolicy p = RetryPolicy::Default();
      p.max_attempts = 2 + i % 5;
      EXPECT_TRUE(proxy.set_retry_policy(p).ok());
      proxy.set_user(i % 2 == 0 ? "ann" : "bob");
    }
  });
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        kudu::rpc_test::AddRequestPB req;
        req.set_x(1);
        req.set_y(i);
        kudu::rpc_test::AddResponsePB resp;
        RpcController ctl;
        ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok()) << ctl.status().ToString();
        EXPECT_EQ(static_cast<uint32_t>(1 + i), resp.result());
      }
    });
  }
  for (auto& c : callers) c.join();
  stop = true;
  setter.join();
}

// Answers every call ERROR_SERVER_TOO_BUSY, which a retry policy retries.
class AlwaysBusy : public bench::BenchService {
 public:
  bool Authorize(const ServiceMethod&, const google::protobuf::Message*, google::protobuf::Message*,
                 RpcContext* ctx) override {
    ctx->RespondRpcFailure(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
                           Status::ServiceUnavailable("always busy"));
    return false;
  }
};

// Cancel() at any moment of a call that retries, the moment a retry takes
// over from an attempt that just failed included, ends it Aborted: the
// cancel is never lost on the attempt that ended (it used to be, and the
// retries ran on to their last attempt).
TEST(RetryCancelTest, ACancelRacingARetryEndsTheCallAborted) {
  std::shared_ptr<Messenger> server, client;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
  ASSERT_TRUE(server->RegisterService(std::make_unique<AlwaysBusy>()).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  // No retry budget: the calls retry until cancelled, as many times as it
  // takes (the budget would end them after a few, ServiceUnavailable).
  ASSERT_TRUE(
      MessengerBuilder("client").set_num_reactors(1).set_retry_budget(false).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, addr);
  RetryPolicy policy;
  policy.max_attempts = 1000000;
  policy.initial_backoff = MonoDelta::FromMicroseconds(1);
  policy.max_backoff = MonoDelta::FromMicroseconds(50);
  std::minstd_rand rng(42);
  for (int i = 0; i < 300; ++i) {
    kudu::rpc_test::AddRequestPB req;
    req.set_x(1);
    req.set_y(2);
    kudu::rpc_test::AddResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(ctl.set_retry_policy(policy).ok());
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    CountDownLatch done(1);
    proxy.AddAsync(req, &resp, &ctl, [&done] { done.CountDown(); });
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    ctl.Cancel();
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)))
        << "call " << i << " still retrying 10 s after Cancel()";
    ASSERT_TRUE(ctl.status().IsAborted()) << "call " << i << ": " << ctl.status().ToString();
  }
}

TEST(AuthorizeFromCodeTest, AnOverrideRefusesWithItsOwnAnswer) {
  std::shared_ptr<Messenger> server, client;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
  ASSERT_TRUE(server->RegisterService(std::make_unique<ByCode>()).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, addr);
  kudu::rpc_test::EchoRequestPB req;
  req.set_data("x");
  kudu::rpc_test::EchoResponsePB resp;
  RpcController ctl;
  Status s = proxy.Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("only trusted users may echo")) << s.ToString();
  kudu::rpc_test::AddRequestPB add;
  add.set_x(1);
  add.set_y(2);
  kudu::rpc_test::AddResponsePB sum;
  RpcController ctl2;
  ASSERT_TRUE(proxy.Add(add, &sum, &ctl2).ok());
  EXPECT_EQ(3u, sum.result());
}

// rpc-bench's AddExactlyOnce, Kudu's exactly-once test call: a duplicate of
// a completed request returns the identical answer, time included.
TEST(AddExactlyOnceTest, ADuplicateGetsTheIdenticalAnswerAndAddsNothing) {
  std::shared_ptr<Messenger> server;
  ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
  auto svc = std::make_unique<bench::BenchService>();
  bench::BenchService* bench = svc.get();
  ASSERT_TRUE(server->RegisterService(std::move(svc)).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  RawConn conn;
  ASSERT_TRUE(conn.Connect(addr).ok());
  ASSERT_TRUE(conn.Negotiate("kudu-client").ok());
  auto frame = [](int32_t call_id, int64_t attempt) {
    wire::RequestHeader h;
    h.set_call_id(call_id);
    h.mutable_remote_method()->set_service_name("kudu.rpc_test.CalculatorService");
    h.mutable_remote_method()->set_method_name("AddExactlyOnce");
    *h.mutable_request_id() = Id("kudu-client-1", 1, 1, attempt);
    kudu::rpc_test::ExactlyOnceRequestPB req;
    req.set_value_to_add(5);
    return RequestFrame(h, req);
  };
  std::string bodies[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(conn.Send(frame(i + 1, i + 1)).ok());
    wire::InboundResponseFrame f;
    ASSERT_TRUE(conn.ReadFrame(&f).ok());
    ASSERT_FALSE(f.header.is_error());
    bodies[i] = f.main_message.ToString();
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a later time
  }
  EXPECT_EQ(bodies[0], bodies[1]);
  kudu::rpc_test::ExactlyOnceResponsePB resp;
  ASSERT_TRUE(resp.ParseFromString(bodies[0]));
  EXPECT_EQ(5u, resp.current_val());
  EXPECT_GT(resp.current_time_micros(), 0u);
  EXPECT_EQ(5u, bench->current_value());
}

}  // namespace
}  // namespace osprey::rpc_test
