// A client of etcd against an etcd that lies. The attacker: whoever answers
// on the etcd endpoint a client was given. The gateway speaks plain HTTP, so
// that is a man in the middle on the path as well as a compromised or buggy
// member. What it can send: answers and watch messages of any size, and as
// many servers as it likes. What it must not get: a client's memory grown
// without bound, or a crash. So an answer, and each watch message, is cut at
// kMaxEtcdAnswerBytes with a clear error, and a client keeps at most
// kMaxEtcdServers servers.
//
// The fake etcd below (FakeEtcd) answers HTTP/1.1 on loopback as the real
// gateway does for the three requests a watcher makes (a range, a watch),
// and counts what it sent and whether the client hung up.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "osprey/base/base64.h"
#include "osprey/base/monotime.h"
#include "osprey/rpc/etcd_registry.h"

namespace osprey {
namespace {

using nlohmann::json;

// One HTTP/1.1 server on 127.0.0.1, a thread per connection. `handle` gets
// the path and the body of each request and writes the whole answer to the
// socket itself; it returns whether the connection may take another request.
class FakeEtcd {
 public:
  using Handler = std::function<bool(const std::string& path, const std::string& body, int fd)>;

  explicit FakeEtcd(Handler handle) : handle_(std::move(handle)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(0, bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), len));
    EXPECT_EQ(0, listen(listen_fd_, 16));
    EXPECT_EQ(0, getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len));
    port_ = ntohs(a.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeEtcd() {
    stop_.store(true);
    shutdown(listen_fd_, SHUT_RDWR);
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    close(listen_fd_);
  }

  std::string Target() const { return "etcd://127.0.0.1:" + std::to_string(port_) + "/svc"; }
  bool stopping() const { return stop_.load(); }

  // Writes all of `data`; false once the client has hung up (or the test
  // ends).
  static bool SendAll(int fd, const char* data, size_t n) {
    while (n > 0) {
      ssize_t k = send(fd, data, n, MSG_NOSIGNAL);
      if (k <= 0) return false;
      data += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  static bool SendAll(int fd, const std::string& s) { return SendAll(fd, s.data(), s.size()); }

  // An answer with a body of known length, on a connection kept open.
  static bool Answer(int fd, const std::string& body) {
    return SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body);
  }

  // The head of an answer whose body runs until the connection closes: a
  // watch's stream.
  static bool StartStream(int fd) {
    return SendAll(
        fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n");
  }

  // Sends `bytes` of `fill` in 64 KiB pieces; returns how many the kernel
  // took before the client hung up (all of them if it never did).
  static size_t StreamFill(int fd, size_t bytes, char fill) {
    const std::string piece(64 * 1024, fill);
    size_t sent = 0;
    while (sent < bytes) {
      size_t k = std::min(piece.size(), bytes - sent);
      if (!SendAll(fd, piece.data(), k)) return sent;
      sent += k;
    }
    return sent;
  }

  // Holds a streamed answer open until the client hangs up or the test
  // ends (at most 30 s).
  void HoldUntilClosed(int fd) const {
    const MonoTime until = MonoTime::Now() + MonoDelta::FromSeconds(30);
    while (!stopping() && MonoTime::Now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        char b[4096];
        if (recv(fd, b, sizeof(b), 0) <= 0) return;
      }
    }
  }

 private:
  void AcceptLoop() {
    while (!stop_.load()) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard<std::mutex> l(mu_);
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] {
        Serve(fd);
        close(fd);
      });
    }
  }

  void Serve(int fd) {
    std::string in;
    char buf[8192];
    while (!stop_.load()) {
      size_t head_end;
      while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0) return;
        in.append(buf, static_cast<size_t>(k));
      }
      const std::string head = in.substr(0, head_end);
      in.erase(0, head_end + 4);
      size_t length = 0;
      if (size_t at = head.find("Content-Length: "); at != std::string::npos) {
        length = std::stoul(head.substr(at + 16));
      }
      while (in.size() < length) {
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0) return;
        in.append(buf, static_cast<size_t>(k));
      }
      const std::string body = in.substr(0, length);
      in.erase(0, length);
      const size_t sp = head.find(' ');
      const std::string path = head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1);
      if (!handle_(path, body, fd)) return;
    }
  }

  Handler handle_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

std::string KeyValue(const std::string& address, int64_t revision) {
  json kv{{"key", Base64Encode("/svc/" + address)},
          {"value", Base64Encode(json{{"address", address}}.dump())},
          {"mod_revision", std::to_string(revision)}};
  return kv.dump();
}

// A range answer with the servers 127.0.0.1:1 .. :n, at revision 5.
std::string RangeAnswer(int n) {
  std::string kvs;
  for (int i = 1; i <= n; ++i) {
    kvs += (i > 1 ? "," : "") + KeyValue("127.0.0.1:" + std::to_string(i), 5);
  }
  return R"({"header":{"revision":"5"},"kvs":[)" + kvs + "]}";
}

const std::string kCreated = R"({"result":{"header":{"revision":"5"},"created":true}})"
                             "\n";

// What the watcher last published, kept for the test's thread.
struct Published {
  std::mutex mu;
  std::vector<std::string> last;
  size_t most = 0;
  int times = 0;
  void Set(const std::vector<std::string>& a) {
    std::lock_guard<std::mutex> l(mu);
    last = a;
    most = std::max(most, a.size());
    times++;
  }
  std::vector<std::string> Get() {
    std::lock_guard<std::mutex> l(mu);
    return last;
  }
  size_t Most() {
    std::lock_guard<std::mutex> l(mu);
    return most;
  }
};

// A watcher of `etcd`'s /svc, loaded (Load's status in `loaded`) and
// started, and what it published.
struct Watching {
  explicit Watching(const FakeEtcd& etcd)
      : watcher(TargetOf(etcd), [this](const std::vector<std::string>& a) { published.Set(a); }) {
    loaded = watcher.Load(MonoDelta::FromSeconds(5));
    if (loaded.ok()) watcher.Start();
  }
  static EtcdTarget TargetOf(const FakeEtcd& etcd) {
    EtcdTarget target;
    EXPECT_TRUE(EtcdTarget::Parse(etcd.Target(), &target).ok());
    return target;
  }
  Published published;  // before the watcher, which publishes to it
  EtcdWatcher watcher;
  Status loaded;
};

// Waits at most `seconds` for `done`.
bool WaitFor(const std::function<bool()>& done, int seconds) {
  const MonoTime until = MonoTime::Now() + MonoDelta::FromSeconds(seconds);
  while (!done()) {
    if (MonoTime::Now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

constexpr size_t kFlood = 256u << 20;  // what a liar offers: far past any bound

// A watch message that never ends: without a bound the watcher buffers it
// all, however long (here 256 MiB). With it, the watcher hangs up once the
// message passes kMaxEtcdAnswerBytes, keeps the servers it had, and reads
// the prefix again, since it may have missed a change.
TEST(HostileEtcdTest, AWatchMessageThatNeverEndsIsCutAtTheBound) {
  std::atomic<int> ranges{0}, watches{0};
  std::atomic<size_t> flood_sent{0};
  std::atomic<bool> flood_done{false};
  FakeEtcd etcd([&](const std::string& path, const std::string&, int fd) {
    if (path == "/v3/kv/range") {
      ranges++;
      return FakeEtcd::Answer(fd, RangeAnswer(1));
    }
    if (path != "/v3/watch") return false;
    if (!FakeEtcd::StartStream(fd) || !FakeEtcd::SendAll(fd, kCreated)) return false;
    if (watches++ == 0) {
      flood_sent = FakeEtcd::StreamFill(fd, kFlood, 'x');
      flood_done = true;
    }
    etcd.HoldUntilClosed(fd);
    return false;
  });
  Watching w(etcd);
  ASSERT_TRUE(w.loaded.ok()) << w.loaded.ToString();
  ASSERT_TRUE(WaitFor([&] { return flood_done.load(); }, 60)) << "the flood never ended";
  EXPECT_LT(flood_sent.load(), kFlood) << "the watcher took the whole never-ending message";
  // The kernel's buffers hold some of what was sent; the watcher no more
  // than the bound.
  EXPECT_LE(flood_sent.load(), kMaxEtcdAnswerBytes + (32u << 20));
  EXPECT_TRUE(WaitFor([&] { return ranges.load() >= 2; }, 10))
      << "the watcher did not read the prefix again after the message it lost";
  EXPECT_EQ(std::vector<std::string>{"127.0.0.1:1"}, w.published.Get());
  w.watcher.Stop();
}

// A range answer without end: Load stops reading it at the bound and says
// why, instead of buffering it all.
TEST(HostileEtcdTest, ARangeAnswerPastTheBoundIsRefusedWithAClearError) {
  std::atomic<size_t> sent{0};
  std::atomic<bool> done{false};
  FakeEtcd etcd([&](const std::string& path, const std::string&, int fd) {
    if (path != "/v3/kv/range") return false;
    if (FakeEtcd::SendAll(fd,
                          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          "Content-Length: " +
                              std::to_string(kFlood) + "\r\n\r\n")) {
      sent = FakeEtcd::StreamFill(fd, kFlood, ' ');
    }
    done = true;
    return false;
  });
  EtcdTarget target;
  ASSERT_TRUE(EtcdTarget::Parse(etcd.Target(), &target).ok());
  EtcdWatcher watcher(target, [](const std::vector<std::string>&) {});
  Status s = watcher.Load(MonoDelta::FromSeconds(30));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("more than")) << s.ToString();
  ASSERT_TRUE(WaitFor([&] { return done.load(); }, 30));
  EXPECT_LT(sent.load(), kFlood) << "the client read the whole answer";
}

// An etcd that reports more servers than any fleet: the watcher keeps the
// bound's worth, says so, and still follows deletions.
TEST(HostileEtcdTest, MoreServersThanTheBoundAreNotKept) {
  const int kMore = static_cast<int>(kMaxEtcdServers) + 2000;
  FakeEtcd etcd([&](const std::string& path, const std::string&, int fd) {
    if (path == "/v3/kv/range") return FakeEtcd::Answer(fd, RangeAnswer(1));
    if (path != "/v3/watch") return false;
    if (!FakeEtcd::StartStream(fd) || !FakeEtcd::SendAll(fd, kCreated)) return false;
    // In messages of 1,000 puts, at revisions 6, 7, ...
    for (int first = 2, rev = 6; first <= kMore; first += 1000, ++rev) {
      std::string events;
      for (int i = first; i < first + 1000 && i <= kMore; ++i) {
        events += (i > first ? "," : "") + std::string(R"({"type":"PUT","kv":)") +
                  KeyValue("127.0.0.1:" + std::to_string(i), rev) + "}";
      }
      if (!FakeEtcd::SendAll(fd, R"({"result":{"events":[)" + events + "]}}\n")) return false;
    }
    // And the first server goes.
    json del{{"type", "DELETE"},
             {"kv", {{"key", Base64Encode("/svc/127.0.0.1:1")}, {"mod_revision", "100"}}}};
    if (!FakeEtcd::SendAll(fd, json{{"result", {{"events", {del}}}}}.dump() + "\n")) return false;
    etcd.HoldUntilClosed(fd);
    return false;
  });
  Watching w(etcd);
  ASSERT_TRUE(w.loaded.ok()) << w.loaded.ToString();
  // The revision moves before the watcher publishes (outside its lock):
  // wait for what it published.
  ASSERT_TRUE(WaitFor([&] { return w.published.Get().size() == kMaxEtcdServers - 1; }, 30))
      << w.published.Get().size() << " servers published at revision " << w.watcher.revision();
  EXPECT_EQ(100, w.watcher.revision());
  std::vector<std::string> last = w.published.Get();
  EXPECT_EQ(kMaxEtcdServers - 1, last.size());
  EXPECT_EQ(kMaxEtcdServers, w.published.Most());
  EXPECT_EQ(last.end(), std::find(last.begin(), last.end(), "127.0.0.1:1"));
  w.watcher.Stop();
}

// Fields of the wrong type where etcd writes a boolean or a string: the
// messages are read as if they were missing (json::value would throw on the
// watcher's thread, which ends the process), and the watch goes on.
TEST(HostileEtcdTest, FieldsOfTheWrongTypeAreReadAsMissing) {
  FakeEtcd etcd([&](const std::string& path, const std::string&, int fd) {
    if (path == "/v3/kv/range") return FakeEtcd::Answer(fd, RangeAnswer(1));
    if (path != "/v3/watch") return false;
    const std::string messages =
        R"({"result":{"created":"yes"}})"
        "\n"
        R"({"result":{"canceled":1,"events":[{"type":7,"kv":{"key":7,"value":[]}}]}})"
        "\n"
        R"({"result":{"events":[{"type":"PUT","kv":)" +
        KeyValue("127.0.0.1:2", 6) + "}]}}\n";
    if (!FakeEtcd::StartStream(fd) || !FakeEtcd::SendAll(fd, messages)) return false;
    etcd.HoldUntilClosed(fd);
    return false;
  });
  Watching w(etcd);
  ASSERT_TRUE(w.loaded.ok()) << w.loaded.ToString();
  const std::vector<std::string> both = {"127.0.0.1:1", "127.0.0.1:2"};
  EXPECT_TRUE(WaitFor([&] { return w.published.Get() == both; }, 30))
      << w.published.Get().size() << " servers published";
  EXPECT_EQ(6, w.watcher.revision());
  w.watcher.Stop();
}

// A lease granted for near INT64_MAX seconds: keep-alives still come every
// third of the TTL asked for (here 3 s). The old code computed the wait in
// milliseconds from etcd's TTL, a signed overflow (UBSan stops there).
TEST(HostileEtcdTest, AnEndlessLeaseIsKeptAliveAtTheTtlAskedFor) {
  std::atomic<int> keepalives{0};
  const std::string kHuge = R"("9223372036854775807")";
  FakeEtcd etcd([&](const std::string& path, const std::string&, int fd) {
    if (path == "/v3/lease/grant") return FakeEtcd::Answer(fd, R"({"ID":"7","TTL":)" + kHuge + "}");
    if (path == "/v3/lease/keepalive") {
      keepalives++;
      return FakeEtcd::Answer(fd, R"({"result":{"ID":"7","TTL":)" + kHuge + "}}");
    }
    return FakeEtcd::Answer(fd, "{}");  // puts and the revoke
  });
  EtcdTarget target;
  ASSERT_TRUE(EtcdTarget::Parse(etcd.Target(), &target).ok());
  EtcdRegistration registration(target, {"127.0.0.1:1"}, MonoDelta::FromSeconds(3));
  registration.Start();
  ASSERT_TRUE(registration.WaitRegistered(MonoDelta::FromSeconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  // One a second; three allows for a slow machine's timing, not a spin.
  EXPECT_GE(keepalives.load(), 1);
  EXPECT_LE(keepalives.load(), 3);
  registration.Withdraw();
}

// A member that takes a watch and never answers it (a hung process: the
// kernel still accepts its connections), first of two: the watcher leaves
// it after 3 s for the other, and follows that one. Before, it waited on
// the first forever, a registry that said nothing.
TEST(HostileEtcdTest, AMemberThatNeverAnswersAWatchIsLeftForTheNext) {
  FakeEtcd silent([&](const std::string& path, const std::string&, int fd) {
    if (path == "/v3/kv/range") return FakeEtcd::Answer(fd, RangeAnswer(1));
    silent.HoldUntilClosed(fd);  // the watch: not a byte
    return false;
  });
  FakeEtcd good([&](const std::string& path, const std::string&, int fd) {
    if (path == "/v3/kv/range") return FakeEtcd::Answer(fd, RangeAnswer(1));
    const std::string put =
        R"({"result":{"events":[{"type":"PUT","kv":)" + KeyValue("127.0.0.1:2", 6) + "}]}}\n";
    if (!FakeEtcd::StartStream(fd) || !FakeEtcd::SendAll(fd, kCreated + put)) return false;
    good.HoldUntilClosed(fd);
    return false;
  });
  EtcdTarget target;
  ASSERT_TRUE(EtcdTarget::Parse(silent.Target(), &target).ok());
  EtcdTarget other;
  ASSERT_TRUE(EtcdTarget::Parse(good.Target(), &other).ok());
  target.endpoints.push_back(other.endpoints[0]);
  Published published;
  EtcdWatcher watcher(target, [&](const std::vector<std::string>& a) { published.Set(a); });
  ASSERT_TRUE(watcher.Load(MonoDelta::FromSeconds(5)).ok());
  const MonoTime start = MonoTime::Now();
  watcher.Start();
  const std::vector<std::string> both = {"127.0.0.1:1", "127.0.0.1:2"};
  EXPECT_TRUE(WaitFor([&] { return watcher.connected() && published.Get() == both; }, 15))
      << "still waiting on the member that never answers";
  std::cerr << "watching through the other member after " << (MonoTime::Now() - start).ToString()
            << "\n";
  watcher.Stop();
}

// A member whose watch is created and then silent, as a quiet prefix's is.
// After 1 s of silence the watcher asks it for a read of the key "/svc/"
// (no server's, but inside the prefix: a small answer). One that answers 200 is kept, probe
// after probe; one that answers 503 is left, the watch made again.
TEST(HostileEtcdTest, ASilentWatchIsKeptWhileItsMemberAnswersProbesAndLeftWhenOneFails) {
  struct Member {
    explicit Member(bool fail) : fail_probes(fail) {}
    const bool fail_probes;
    std::atomic<int> probes{0};
    std::mutex mu;
    std::string probe_body;
  };
  auto serve = [](Member* m, FakeEtcd* self, const std::string& path, const std::string& body,
                  int fd) {
    if (path == "/v3/kv/range") {
      if (json::parse(body).contains("range_end")) return FakeEtcd::Answer(fd, RangeAnswer(1));
      {
        std::lock_guard<std::mutex> l(m->mu);
        m->probe_body = body;
      }
      m->probes.fetch_add(1);
      if (!m->fail_probes) return FakeEtcd::Answer(fd, R"({"header":{"revision":"5"}})");
      const std::string busy = R"({"error":"etcdserver: request timed out","code":14})";
      return FakeEtcd::SendAll(fd, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: " +
                                       std::to_string(busy.size()) + "\r\n\r\n" + busy);
    }
    if (!FakeEtcd::StartStream(fd) || !FakeEtcd::SendAll(fd, kCreated)) return false;
    self->HoldUntilClosed(fd);
    return false;
  };
  Member alive{false}, failing{true};
  FakeEtcd alive_etcd([&](const std::string& p, const std::string& b, int fd) {
    return serve(&alive, &alive_etcd, p, b, fd);
  });
  FakeEtcd failing_etcd([&](const std::string& p, const std::string& b, int fd) {
    return serve(&failing, &failing_etcd, p, b, fd);
  });
  EtcdWatchTimeouts timeouts;
  timeouts.probe_after = MonoDelta::FromSeconds(1);
  auto watch = [&](FakeEtcd* etcd) {
    EtcdTarget target;
    EXPECT_TRUE(EtcdTarget::Parse(etcd->Target(), &target).ok());
    auto w = std::make_unique<EtcdWatcher>(
        target, [](const std::vector<std::string>&) {}, timeouts);
    EXPECT_TRUE(w->Load(MonoDelta::FromSeconds(5)).ok());
    w->Start();
    return w;
  };
  auto kept = watch(&alive_etcd);
  auto left = watch(&failing_etcd);
  EXPECT_TRUE(WaitFor([&] { return left->reconnects() >= 1; }, 10))
      << "the watch stayed on a member whose probe failed";
  EXPECT_TRUE(WaitFor([&] { return alive.probes.load() >= 3; }, 10));
  EXPECT_TRUE(kept->connected());
  EXPECT_EQ(0, kept->reconnects()) << "a silent watch whose member answers its probes was left";
  {
    std::lock_guard<std::mutex> l(alive.mu);
    EXPECT_EQ(json({{"key", Base64Encode("/svc/")}, {"keys_only", true}}),
              json::parse(alive.probe_body));
  }
  kept->Stop();
  left->Stop();
}

}  // namespace
}  // namespace osprey
