// Calls between hosts: network namespaces that scripts/netns-hosts.sh makes
// for each test (host i is 198.18.0.i) and removes when it ends. A
// messenger made on a thread inside a host lives there: its reactor threads
// inherit the namespace, and so do its sockets. Faults are real: a link
// taken down, a host whose packets nftables drops without a reset, a server
// process killed and started again. Skips, saying why, where namespaces
// cannot be made (not root).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "child_server.h"
#include "osprey/base/countdown_latch.h"
#include "recording_proxy.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

const std::string kHostsScript = std::string(OSPREY_SOURCE_DIR) + "/scripts/netns-hosts.sh";

// Runs `args` (no shell), returns its exit code; its output in *out.
int Run(const std::vector<std::string>& args, std::string* out = nullptr) {
  std::string cmd;
  for (const std::string& a : args) cmd += "'" + a + "' ";
  cmd += "2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 512> buf;
  std::string text;
  while (fgets(buf.data(), buf.size(), p) != nullptr) text += buf.data();
  int status = pclose(p);
  if (out != nullptr) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Hosts for one test, removed when it ends however it ends.
class Hosts {
 public:
  // False, with the reason, where hosts cannot be made.
  static bool Available(std::string* why) {
    if (Run({"bash", kHostsScript, "check"}, why) == 0) return true;
    while (!why->empty() && why->back() == '\n') why->pop_back();
    return false;
  }
  explicit Hosts(int n) : set_(std::to_string(getpid()) + "t" + std::to_string(next_++)) {
    std::string out;
    int rc = Run({"bash", kHostsScript, "up", set_, std::to_string(n)}, &out);
    EXPECT_EQ(0, rc) << out;
  }
  ~Hosts() {
    std::error_code ec;
    for (const std::string& d : etc_dirs_) std::filesystem::remove_all(d, ec);
    Run({"bash", kHostsScript, "down", set_});
  }
  std::string ns(int i) const { return "osprey-" + set_ + "-h" + std::to_string(i); }
  static std::string addr(int i) { return "198.18.0." + std::to_string(i); }
  void Do(const std::vector<std::string>& args) {
    std::vector<std::string> cmd = {"bash", kHostsScript};
    cmd.insert(cmd.end(), args.begin(), args.end());
    cmd.insert(cmd.begin() + 3, set_);
    std::string out;
    ASSERT_EQ(0, Run(cmd, &out)) << out;
  }
  void LinkDown(int i) { Do({"link", std::to_string(i), "down"}); }
  void LinkUp(int i) { Do({"link", std::to_string(i), "up"}); }
  void DropAll(int i) { Do({"drop", std::to_string(i)}); }
  void Restore(int i) { Do({"restore", std::to_string(i)}); }
  void AddAddress(int i, const std::string& a) {
    std::string out;
    ASSERT_EQ(0, Run({"ip", "-n", ns(i), "addr", "add", a + "/24", "dev", "eth0"}, &out)) << out;
  }
  // /etc/netns/<ns>/hosts: what `ip netns exec` shows processes in host i
  // as /etc/hosts. Written in place, so a running process sees new text.
  void WriteHostsFile(int i, const std::string& text) {
    std::string dir = "/etc/netns/" + ns(i);
    std::filesystem::create_directories(dir);
    etc_dirs_.push_back(dir);
    std::ofstream(dir + "/hosts", std::ios::trunc) << text;
  }

 private:
  static inline int next_ = 0;
  const std::string set_;
  std::vector<std::string> etc_dirs_;
};

// This thread in host `ns` while in scope: what it creates (messengers,
// their threads, sockets) lives there.
class InHost {
 public:
  explicit InHost(const std::string& ns) {
    home_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int target = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(target, 0) << ns;
    EXPECT_EQ(0, setns(target, CLONE_NEWNET)) << ns;
    close(target);
  }
  ~InHost() {
    EXPECT_EQ(0, setns(home_, CLONE_NEWNET));
    close(home_);
  }

 private:
  int home_;
};

// Quick keepalive, so a dead peer is found in seconds.
TcpKeepalive FastKeepalive() {
  TcpKeepalive k;
  k.idle = MonoDelta::FromSeconds(1);
  k.interval = MonoDelta::FromSeconds(1);
  k.count = 2;
  k.user_timeout = MonoDelta::FromSeconds(3);
  return k;
}

class CrossHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!Hosts::Available(&why)) GTEST_SKIP() << why;
    hosts_ = std::make_unique<Hosts>(3);
  }
  // A server in host 1 on 198.18.0.1, a client messenger in host 2.
  void StartServerAndClient(MessengerBuilder server_builder = MessengerBuilder("server"),
                            MessengerBuilder client_builder = MessengerBuilder("client")) {
    {
      InHost in(hosts_->ns(1));
      Sockaddr bind;
      ASSERT_TRUE(Sockaddr::Parse(Hosts::addr(1) + ":0", &bind).ok());
      ServicePoolOptions pool;
      pool.worker_threads = 4;  // every sleeping call of a test at once
      Status s = server_.Start(2, pool, std::move(server_builder), bind);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    InHost in(hosts_->ns(2));
    client_ = MakeClient(1, std::move(client_builder));
  }
  // From host 2: a sync call may make its connection on the calling thread
  // (it borrows an idle reactor), so the thread must be in the client's host.
  Status Add(const Sockaddr& to, MonoDelta timeout = MonoDelta::FromSeconds(10)) {
    InHost in(hosts_->ns(2));
    CalculatorServiceProxy proxy(client_, to);
    return CheckedAdd(proxy, 40, 2, timeout);
  }
  size_t ServerConnections() {
    std::vector<ConnectionInfo> conns;
    EXPECT_TRUE(server_.messenger->DumpConnections(&conns).ok());
    return conns.size();
  }

  std::unique_ptr<Hosts> hosts_;
  TestServer server_;
  std::shared_ptr<Messenger> client_;
};

TEST_F(CrossHostTest, LinkDownMidCallTimesOutAtItsDeadlineAndTheLinkBackServesTheNextCall) {
  ASSERT_NO_FATAL_FAILURE(StartServerAndClient());
  ASSERT_TRUE(Add(server_.address).ok());

  // A call the server works on for 300 ms; the link goes down meanwhile,
  // so its answer cannot arrive.
  CalculatorServiceProxy proxy(client_, server_.address);
  SleepRequestPB req;
  req.set_sleep_micros(300000);
  SleepResponsePB resp;
  RpcController ctl;
  const MonoDelta timeout = MonoDelta::FromMilliseconds(1500);
  ctl.set_timeout(timeout);
  CountDownLatch done(1);
  MonoTime start = MonoTime::Now();
  MonoTime finished;
  proxy.SleepAsync(req, &resp, &ctl, [&] {
    finished = MonoTime::Now();
    done.CountDown();
  });
  ASSERT_TRUE(server_.service->WaitForSleepsStarted(1));
  hosts_->LinkDown(1);
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_TRUE(ctl.status().IsTimedOut()) << ctl.status().ToString();
  MonoDelta took = finished - start;
  EXPECT_GE(took, timeout) << took.ToString();
  EXPECT_LT(took, timeout + MonoDelta::FromMilliseconds(500)) << took.ToString();

  // A call while the link is down times out at its own deadline too.
  start = MonoTime::Now();
  Status s = Add(server_.address, MonoDelta::FromMilliseconds(800));
  took = MonoTime::Now() - start;
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_GE(took, MonoDelta::FromMilliseconds(800));
  EXPECT_LT(took, MonoDelta::FromMilliseconds(1300)) << took.ToString();

  hosts_->LinkUp(1);
  s = Add(server_.address, MonoDelta::FromSeconds(15));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(CrossHostTest, ASilentlyVanishedServerHostIsFoundByKeepaliveOnBothSides) {
  MessengerBuilder server_builder("server");
  server_builder.set_tcp_keepalive(FastKeepalive());
  MessengerBuilder client_builder("client");
  client_builder.set_tcp_keepalive(FastKeepalive());
  ASSERT_NO_FATAL_FAILURE(
      StartServerAndClient(std::move(server_builder), std::move(client_builder)));
  ASSERT_TRUE(Add(server_.address).ok());

  // Calls without deadlines that the server has received and works on:
  // their requests are acknowledged, so only keepalive can tell that the
  // host is gone.
  constexpr int kCalls = 3;
  CalculatorServiceProxy proxy(client_, server_.address);
  std::vector<SleepRequestPB> reqs(kCalls);
  std::vector<SleepResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  std::atomic<int> callbacks{0};
  CountDownLatch done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    reqs[i].set_sleep_micros(6000000);
    proxy.SleepAsync(reqs[i], &resps[i], &ctls[i], [&] {
      callbacks.fetch_add(1);
      done.CountDown();
    });
  }
  ASSERT_TRUE(server_.service->WaitForSleepsStarted(kCalls));
  EXPECT_EQ(1u, ServerConnections());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the last ACKs go out

  MonoTime start = MonoTime::Now();
  hosts_->DropAll(1);  // no FIN, no RST, no ICMP: the host is simply gone
  const MonoDelta bound = FastKeepalive().DetectionBound() + MonoDelta::FromSeconds(2);
  ASSERT_TRUE(done.WaitFor(bound))
      << "calls still waiting " << bound.ToString() << " after the server host vanished";
  MonoDelta took = MonoTime::Now() - start;
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_TRUE(ctls[i].status().IsNetworkError()) << ctls[i].status().ToString();
  }
  EXPECT_GE(took, FastKeepalive().idle) << took.ToString();
  // The server's half of the connection is reaped too.
  EXPECT_TRUE(WaitUntil([&] { return ServerConnections() == 0; }, bound))
      << ServerConnections() << " server connections left";
  ASSERT_TRUE(server_.service->WaitForSleepsFinished(kCalls));
  EXPECT_EQ(kCalls, callbacks.load());  // exactly once each

  hosts_->Restore(1);
  Status s = Add(server_.address);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(CrossHostTest, ServerProcessKilledAndStartedAgainOnItsHostIsReachedAgain) {
  {
    InHost in(hosts_->ns(2));
    client_ = MakeClient(1);
  }
  ChildServer child;
  Sockaddr addr;
  const std::vector<std::string> in_host1 = {"ip", "netns", "exec", hosts_->ns(1)};
  ASSERT_TRUE(child.Spawn(Hosts::addr(1) + ":0", in_host1, &addr).ok());
  ASSERT_TRUE(Add(addr).ok());

  child.Kill();  // SIGKILL: its host's kernel resets the connection
  Status s = Add(addr, MonoDelta::FromSeconds(5));
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();

  ChildServer again;
  Sockaddr addr2;
  ASSERT_TRUE(again.Spawn(addr.ToString(), in_host1, &addr2).ok());
  ASSERT_EQ(addr, addr2);
  s = Add(addr);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Kudu's --trusted_subnets, between real addresses. 198.18.0.0/15 is in
// none of Kudu's private blocks, so with the default a client from host 2
// gets in only because host 1's interface is on 198.18.0.0/24: the default
// also trusts the server's own networks. Given a list, the server trusts
// that list alone.
TEST_F(CrossHostTest, AServerTrustsItsOwnNetworksByDefaultAndOnlyTheGivenSubnetsWhenSet) {
  ASSERT_NO_FATAL_FAILURE(StartServerAndClient());
  Status s = Add(server_.address);
  EXPECT_TRUE(s.ok()) << s.ToString();

  TestServer strict;
  {
    InHost in(hosts_->ns(1));
    Sockaddr bind;
    ASSERT_TRUE(Sockaddr::Parse(Hosts::addr(1) + ":0", &bind).ok());
    s = strict.Start(1, ServicePoolOptions(),
                     MessengerBuilder("strict").set_trusted_subnets({Hosts::addr(3) + "/32"}),
                     bind);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  s = Add(strict.address);
  ASSERT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_NE(std::string::npos,
            s.message().find("unencrypted connections from " + Hosts::addr(2) + " are refused"))
      << s.ToString();
}

TEST_F(CrossHostTest, TlsBetweenHostsEncryptsEveryByteWithoutAskingForIt) {
  // Loopback encryption is not asked for: the peer is not loopback, so
  // authentication-only does not apply.
  MessengerBuilder server_builder("server");
  server_builder.set_rpc_encryption(RpcEncryption::kRequired);
  MessengerBuilder client_builder("client");
  client_builder.set_rpc_encryption(RpcEncryption::kRequired);
  ASSERT_NO_FATAL_FAILURE(
      StartServerAndClient(std::move(server_builder), std::move(client_builder)));

  // The bytes between the hosts, recorded by a proxy in a third host.
  std::unique_ptr<RecordingProxy> wire;
  Sockaddr via;
  {
    InHost in(hosts_->ns(3));
    Sockaddr listen;
    ASSERT_TRUE(Sockaddr::Parse(Hosts::addr(3) + ":0", &listen).ok());
    wire = std::make_unique<RecordingProxy>(server_.address, listen);
    Status s = wire->Start(&via);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(Hosts::addr(3), via.host());

  CalculatorServiceProxy proxy(client_, via);
  const std::string secret = "between-hosts-nobody-may-read-this";
  EchoRequestPB req;
  req.set_data(secret);
  EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  Status s;
  {
    InHost in(hosts_->ns(2));
    s = proxy.Echo(req, &resp, &ctl);
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(secret, resp.data());

  std::vector<ConnectionInfo> conns;
  ASSERT_TRUE(client_->DumpConnections(&conns).ok());
  ASSERT_EQ(1u, conns.size());
  EXPECT_EQ(ConnectionSecurity::kTlsEncrypted, conns[0].security);
  const std::string c2s = wire->client_to_server(), s2c = wire->server_to_client();
  EXPECT_GT(c2s.size(), secret.size());
  EXPECT_EQ(std::string::npos, c2s.find(secret));
  EXPECT_EQ(std::string::npos, s2c.find(secret));
  EXPECT_EQ(std::string::npos, c2s.find("PLAIN"));  // SASL runs inside TLS
}

// The named-proxy client of NamesResolve…: a process run in host 2 by
// `ip netns exec`, which shows it /etc/netns/<host 2>/hosts as /etc/hosts.
// Skipped when run on its own.
TEST(CrossHostChild, NamedProxyClient) {
  const char* target = getenv("OSPREY_NAMED_TARGET");
  const char* dir = getenv("OSPREY_CHILD_DIR");
  if (target == nullptr || dir == nullptr) GTEST_SKIP() << "run by CrossHostTest.NamesResolve…";
  std::vector<Sockaddr> order;
  ASSERT_TRUE(Sockaddr::ResolveAll(target, &order).ok());
  ASSERT_EQ(2u, order.size());
  // The first address refuses: the call must go on to the second.
  EXPECT_EQ("198.18.0.3", order[0].host());
  EXPECT_EQ("198.18.0.1", order[1].host());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, std::string(target));
  auto add = [&]() { return CheckedAdd(proxy, 1, 2, MonoDelta::FromSeconds(5)); };
  Status s = add();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("198.18.0.3", proxy.remote().host());  // still the first of the name's addresses

  std::ofstream(std::string(dir) + "/first-done") << "ok\n";
  // The server moves to an address the name did not have.
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(std::string(dir) + "/moved"); },
                        MonoDelta::FromSeconds(30)));
  s = add();  // both old addresses refuse now
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  s = add();  // the failure made the name resolve again
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("198.18.0.50", proxy.remote().host());
}

TEST_F(CrossHostTest, NamesResolveInOrderAndAgainAfterAFailure) {
  // 198.18.0.3 (host 3, which refuses the port) first, then the server's.
  const std::string name = "calculator.osprey.test";
  hosts_->WriteHostsFile(2,
                         Hosts::addr(3) + " " + name + "\n" + Hosts::addr(1) + " " + name + "\n");
  ChildServer server;
  Sockaddr addr;
  const std::vector<std::string> in_host1 = {"ip", "netns", "exec", hosts_->ns(1)};
  ASSERT_TRUE(server.Spawn(Hosts::addr(1) + ":0", in_host1, &addr).ok());

  char dir_template[] = "/tmp/osprey-cross-host-XXXXXX";
  ASSERT_NE(nullptr, mkdtemp(dir_template));
  struct RemoveDir {
    std::string path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
    const std::string& operator()() const { return path; }
  } dir{dir_template};
  std::string self = std::filesystem::read_symlink("/proc/self/exe");
  std::string target = name + ":" + std::to_string(addr.port());
  std::string cmd = "OSPREY_NAMED_TARGET='" + target + "' OSPREY_CHILD_DIR='" + dir() +
                    "' timeout 60 ip netns exec " + hosts_->ns(2) + " '" + self +
                    "' --gtest_filter=CrossHostChild.NamedProxyClient 2>&1";
  FILE* child = popen(cmd.c_str(), "r");
  ASSERT_NE(nullptr, child);
  std::string out;
  std::thread reader([&] {
    std::array<char, 512> buf;
    while (fgets(buf.data(), buf.size(), child) != nullptr) out += buf.data();
  });
  bool first_done = WaitUntil([&] { return std::filesystem::exists(dir() + "/first-done"); },
                              MonoDelta::FromSeconds(30));
  EXPECT_TRUE(first_done);
  // Moved: the old server goes, a new one listens on a new address of
  // host 1, and the name now says so. (No ASSERT until the child is
  // reaped.)
  ChildServer moved;
  if (first_done) {
    server.Kill();
    EXPECT_NO_FATAL_FAILURE(hosts_->AddAddress(1, "198.18.0.50"));
    Sockaddr addr2;
    Status s = moved.Spawn("198.18.0.50:" + std::to_string(addr.port()), in_host1, &addr2);
    EXPECT_TRUE(s.ok()) << s.ToString();
    hosts_->WriteHostsFile(2, "198.18.0.50 " + name + "\n");
  }
  std::ofstream(dir() + "/moved") << "ok\n";
  reader.join();
  int status = pclose(child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

}  // namespace
}  // namespace osprey::rpc_test
