// Servers found through etcd (issue 50): registration with a lease kept
// alive, withdrawal on drain, expiry when a server dies, and clients on an
// "etcd://" target that follow the servers as they come and go, and keep
// their last set while etcd is down. Against a real etcd (MiniEtcd),
// in-process servers and test_server processes.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "cert_test_util.h"
#include "child_server.h"
#include "contract_test_util.h"
#include "mini_etcd.h"
#include "osprey/base/base64.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/rpc/etcd_registry.h"
#include "osprey/rpc/shared_etcd_watch.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

using test::MiniEtcd;

#define SKIP_WITHOUT_ETCD()                                                                  \
  if (!MiniEtcd::Available()) {                                                              \
    GTEST_SKIP() << MiniEtcd::kBinary                                                        \
                 << " is missing: install etcd-server (scripts/install-deps.sh) to run the " \
                    "registry tests";                                                        \
  }

// The keys under `prefix` and their values, read from etcd directly.
std::map<std::string, std::string> Keys(const MiniEtcd& etcd, const std::string& prefix) {
  EtcdHttp http({etcd.endpoint()});
  nlohmann::json range{{"key", Base64Encode(prefix + "/")},
                       {"range_end", Base64Encode(prefix + "0")}};
  std::string answer;
  Status s = http.Post("/v3/kv/range", range.dump(), MonoDelta::FromSeconds(2), &answer);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::map<std::string, std::string> out;
  nlohmann::json j = nlohmann::json::parse(answer, nullptr, false);
  if (!j.is_object() || !j.contains("kvs")) return out;
  for (const auto& kv : j["kvs"]) {
    std::string k, v;
    Base64Decode(kv.value("key", ""), &k);
    Base64Decode(kv.value("value", ""), &v);
    out[k] = v;
  }
  return out;
}

void DeleteKey(const MiniEtcd& etcd, const std::string& key) {
  EtcdHttp http({etcd.endpoint()});
  std::string answer;
  Status s = http.Post("/v3/kv/deleterange", nlohmann::json{{"key", Base64Encode(key)}}.dump(),
                       MonoDelta::FromSeconds(2), &answer);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

std::unique_ptr<MiniEtcd> StartEtcd() {
  std::unique_ptr<MiniEtcd> etcd;
  Status s = MiniEtcd::Start(&etcd);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return etcd;
}

// The client's registry series on its /metrics for `target`, or -1 when
// it has none.
double RegistryMetric(Messenger* m, const std::string& name, const std::string& target) {
  for (const MetricValue& v : m->metrics()->Snapshot()) {
    if (v.name == name && v.labels == MetricLabels{{"target", target}}) return v.value;
  }
  return -1;
}

// One Add through `proxy`: the server that answered, or empty if it failed.
std::string AddVia(CalculatorServiceProxy& proxy, Status* status = nullptr) {
  AddRequestPB req;
  req.set_x(2);
  req.set_y(3);
  AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(5));
  Status s = proxy.Add(req, &resp, &ctl);
  if (status != nullptr) *status = s;
  return s.ok() && resp.result() == 5 ? ctl.server().ToString() : "";
}

TEST(RegistryTest, AServerRegistersWithALeaseAndDrainWithdrawsIt) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(30));
  auto etcd = StartEtcd();
  ASSERT_NE(nullptr, etcd);
  TestServer server;
  ASSERT_TRUE(server
                  .Start(1, ServicePoolOptions(),
                         MessengerBuilder("registered")
                             .set_registry(etcd->Target("/reg"), MonoDelta::FromSeconds(2)))
                  .ok());
  // Registered by the time Listen returned: PREFIX/ADDRESS, the address in
  // the value.
  auto keys = Keys(*etcd, "/reg");
  ASSERT_EQ(1u, keys.size());
  const std::string key = "/reg/" + server.address.ToString();
  ASSERT_EQ(1u, keys.count(key));
  nlohmann::json value = nlohmann::json::parse(keys[key], nullptr, false);
  ASSERT_TRUE(value.is_object()) << keys[key];
  EXPECT_EQ(server.address.ToString(), value.value("address", ""));
  EXPECT_EQ(static_cast<int>(getpid()), value.value("pid", 0));
  // Kept alive past its 2 s TTL.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  EXPECT_EQ(1u, Keys(*etcd, "/reg").count(key)) << "the lease was not kept alive";
  server.messenger->Drain(MonoDelta::FromSeconds(2));
  EXPECT_TRUE(Keys(*etcd, "/reg").empty()) << "a drained server is still registered";
}

TEST(RegistryTest, BadRegistryTargetsAreRefusedByBuild) {
  std::shared_ptr<Messenger> m;
  EXPECT_TRUE(
      MessengerBuilder("x").set_registry("etcd://127.0.0.1:2379").Build(&m).IsInvalidArgument());
  EXPECT_TRUE(
      MessengerBuilder("x").set_registry("http://127.0.0.1:2379/p").Build(&m).IsInvalidArgument());
  EXPECT_TRUE(MessengerBuilder("x")
                  .set_registry("etcd://127.0.0.1:2379/p", MonoDelta::FromMilliseconds(10))
                  .Build(&m)
                  .IsInvalidArgument());
  EtcdTarget t;
  ASSERT_TRUE(EtcdTarget::Parse("etcd://a:1,b:2/svc/calc/", &t).ok());
  EXPECT_EQ((std::vector<std::string>{"a:1", "b:2"}), t.endpoints);
  EXPECT_EQ("/svc/calc", t.prefix);
  EXPECT_FALSE(t.tls);
  ASSERT_TRUE(EtcdTarget::Parse("etcds://a:1/svc", &t).ok());
  EXPECT_TRUE(t.tls);
  EXPECT_EQ(std::vector<std::string>{"a:1"}, t.endpoints);
  EXPECT_EQ("etcds://a:1/svc", t.ToString());
  EXPECT_TRUE(EtcdTarget::Parse("etcds:/a:1/svc", &t).IsInvalidArgument());
  // etcd's TLS files: readable, a certificate with its key.
  Status s = MessengerBuilder("x").set_etcd_tls("/nonexistent/ca.pem").Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(std::string::npos, s.ToString().find("cannot read /nonexistent/ca.pem"))
      << s.ToString();
  s = MessengerBuilder("x").set_etcd_tls("", "/etc/hostname").Build(&m);
  EXPECT_NE(std::string::npos, s.ToString().find("both a certificate file and its key"))
      << s.ToString();
  s = MessengerBuilder("x").set_etcd_watch_probe(MonoDelta::FromMilliseconds(-1)).Build(&m);
  EXPECT_NE(std::string::npos, s.ToString().find("set_etcd_watch_probe: the silence must be zero"))
      << s.ToString();
  EXPECT_TRUE(MessengerBuilder("x").set_etcd_watch_probe(MonoDelta()).Build(&m).ok());
  std::string decoded;
  for (const std::string s : {"", "a", "ab", "abc", "abcd", "/reg/127.0.0.1:4000"}) {
    ASSERT_TRUE(Base64Decode(Base64Encode(s), &decoded));
    EXPECT_EQ(s, decoded);
  }
}

// An etcd that does not answer (nothing listens at its port): a call has
// no server, and says it is etcd that could not be read, and why.
TEST(RegistryTest, ACallWithNoServerBecauseEtcdIsAwaySaysSo) {
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, "etcd://127.0.0.1:1/calc");
  Status s;
  EXPECT_EQ("", AddVia(proxy, &s));
  EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("etcd could not be read")) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("127.0.0.1:1/v3/kv/range")) << s.ToString();
  std::cerr << s.ToString() << "\n";
}

TEST(RegistryTest, RetriesBackOffToASecondAndARefusedUserToAMinute) {
  const auto ms = [](int64_t n) { return MonoDelta::FromMilliseconds(n); };
  const Status lost = Status::NetworkError("etcd: Connection refused");
  const Status refused = Status::NotAuthorized("authentication failed");
  EXPECT_EQ(ms(100), NextEtcdBackoff(MonoDelta(), lost));
  EXPECT_EQ(ms(200), NextEtcdBackoff(ms(100), lost));
  EXPECT_EQ(ms(1000), NextEtcdBackoff(ms(800), lost));
  EXPECT_EQ(ms(1000), NextEtcdBackoff(ms(1000), Status::OK())) << "a watch that ended";
  EXPECT_EQ(ms(5000), NextEtcdBackoff(MonoDelta(), refused));
  EXPECT_EQ(ms(5000), NextEtcdBackoff(ms(400), refused));
  EXPECT_EQ(ms(10000), NextEtcdBackoff(ms(5000), refused));
  EXPECT_EQ(ms(60000), NextEtcdBackoff(ms(40000), refused));
  EXPECT_EQ(ms(60000), NextEtcdBackoff(ms(60000), refused));
  EXPECT_EQ(ms(1000), NextEtcdBackoff(ms(60000), lost)) << "the password fixed, etcd away";
}

TEST(DiscoveryTest, ServersThatRegisterGetCallsAndOnesWhoseKeyGoesGetNone) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(30));
  auto etcd = StartEtcd();
  ASSERT_NE(nullptr, etcd);
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, etcd->Target("/calc"));
  // Nobody registered yet.
  Status s;
  EXPECT_EQ("", AddVia(proxy, &s));
  EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
  EXPECT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));

  auto builder = MessengerBuilder("calc").set_registry(etcd->Target("/calc"));
  TestServer a, b;
  ASSERT_TRUE(a.Start(1, ServicePoolOptions(), builder).ok());
  MonoTime registered = MonoTime::Now();
  ASSERT_TRUE(
      WaitUntil([&] { return AddVia(proxy) == a.address.ToString(); }, MonoDelta::FromSeconds(1)))
      << "a registered server got no call within 1 s";
  ASSERT_TRUE(b.Start(1, ServicePoolOptions(), builder).ok());
  registered = MonoTime::Now();
  ASSERT_TRUE(
      WaitUntil([&] { return AddVia(proxy) == b.address.ToString(); }, MonoDelta::FromSeconds(1)))
      << "the second server got no call within 1 s";
  std::cerr << "second server's first call after " << (MonoTime::Now() - registered).ToString()
            << "\n";

  // a's key goes (a keeps running): within 1 s it gets no call.
  ASSERT_NO_FATAL_FAILURE(DeleteKey(*etcd, "/calc/" + a.address.ToString()));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int before = a.service->adds_run.load();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(b.address.ToString(), AddVia(proxy));
  EXPECT_EQ(before, a.service->adds_run.load());
  EXPECT_EQ(1u, proxy.servers().size());
}

// etcd replaced by an empty one on the same address (its disk lost, the
// cluster made again): its revisions start again at 1, and it has no lease
// and no key. The servers register again, and a client that watched the
// old etcd from its revision (here 42, where the new one is at a few) must
// read the new one afresh: a watch from a revision the new etcd has not
// reached would wait, silent, until it did, and the client would never
// see a server join.
TEST(DiscoveryTest, AnEtcdReplacedByAnEmptyOneIsReadAfreshAndRegisteredInAgain) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(60));
  auto etcd = StartEtcd();
  ASSERT_NE(nullptr, etcd);
  // Other users of this etcd moved its revision on.
  {
    EtcdHttp http({etcd->endpoint()});
    for (int i = 0; i < 40; ++i) {
      std::string answer;
      nlohmann::json put{{"key", Base64Encode("/other/" + std::to_string(i))},
                         {"value", Base64Encode("x")}};
      ASSERT_TRUE(http.Post("/v3/kv/put", put.dump(), MonoDelta::FromSeconds(2), &answer).ok());
    }
  }
  auto builder =
      MessengerBuilder("calc").set_registry(etcd->Target("/calc"), MonoDelta::FromSeconds(2));
  TestServer a, b;
  ASSERT_TRUE(a.Start(1, ServicePoolOptions(), builder).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, etcd->Target("/calc"));
  ASSERT_TRUE(
      WaitUntil([&] { return AddVia(proxy) == a.address.ToString(); }, MonoDelta::FromSeconds(5)));
  ASSERT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));

  ASSERT_TRUE(etcd->Stop().ok());
  ASSERT_TRUE(etcd->RestartEmpty().ok());
  // a's lease is gone with the old etcd: it registers again.
  EXPECT_TRUE(WaitUntil([&] { return Keys(*etcd, "/calc").count("/calc/" + a.address.ToString()); },
                        MonoDelta::FromSeconds(10)))
      << "a server did not register again in the new etcd within 10 s";
  ASSERT_TRUE(b.Start(1, ServicePoolOptions(), builder).ok());
  EXPECT_TRUE(
      WaitUntil([&] { return AddVia(proxy) == b.address.ToString(); }, MonoDelta::FromSeconds(10)))
      << "a server that registered in the new etcd got no call within 10 s: the client still "
         "watches the old etcd's revisions";
  EXPECT_TRUE(WaitUntil([&] { return proxy.servers().size() == 2; }, MonoDelta::FromSeconds(5)));
}

// Proxies are cheap to make, so users make one per call or keep thousands:
// on an etcd target each would be a read of etcd, a thread and a watch
// stream (1.24 ms a call made through a new proxy, against 0.03 ms through
// a new proxy to an address; 200 threads for 200 proxies). The proxies of
// one messenger share their target's watch, and the messenger keeps it,
// and at most kMaxIdleEtcdWatches others, when no proxy holds it.
TEST(DiscoveryTest, ProxiesOfOneTargetShareOneWatchKeptForTheNextProxy) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(60));
  auto etcd = StartEtcd();
  ASSERT_NE(nullptr, etcd);
  auto builder = MessengerBuilder("calc").set_registry(etcd->Target("/calc"));
  TestServer a, b;
  ASSERT_TRUE(a.Start(1, ServicePoolOptions(), builder).ok());
  const auto watches = [] { return ThreadsNamed("osp-etcd-watch"); };
  auto client = MakeClient(1);
  {
    std::vector<std::unique_ptr<CalculatorServiceProxy>> proxies;
    for (int i = 0; i < 50; ++i) {
      proxies.push_back(std::make_unique<CalculatorServiceProxy>(client, etcd->Target("/calc")));
      EXPECT_EQ(1u, proxies.back()->servers().size()) << "proxy " << i;
    }
    EXPECT_TRUE(WaitUntil([&] { return watches().size() == 1; }, MonoDelta::FromSeconds(5)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // would another appear?
    EXPECT_EQ(1u, watches().size()) << "50 proxies of one target, one watch";
    ASSERT_TRUE(b.Start(1, ServicePoolOptions(), builder).ok());
    for (auto& p : proxies) {
      EXPECT_TRUE(WaitUntil([&] { return p->servers().size() == 2; }, MonoDelta::FromSeconds(5)))
          << "a proxy sharing the watch did not see the new server";
    }
  }
  // No proxy holds it: kept, and the next proxies, one per call, find it.
  const std::vector<pid_t> kept = watches();
  ASSERT_EQ(1u, kept.size());
  const MonoTime start = MonoTime::Now();
  for (int i = 0; i < 200; ++i) {
    CalculatorServiceProxy proxy(client, etcd->Target("/calc"));
    ASSERT_EQ(2u, proxy.servers().size()) << "a new proxy did not find the known servers";
    Status s;
    EXPECT_NE("", AddVia(proxy, &s)) << s.ToString();
  }
  std::cerr << "200 calls, each through a new proxy: " << (MonoTime::Now() - start).ToString()
            << "\n";
  EXPECT_EQ(kept, watches()) << "a proxy made per call made a watch of its own";

  // Switched off, each proxy watches on its own, as before.
  auto unshared = MakeClient(1, MessengerBuilder("unshared").set_share_etcd_watches(false));
  {
    std::vector<std::unique_ptr<CalculatorServiceProxy>> proxies;
    for (int i = 0; i < 5; ++i) {
      proxies.push_back(std::make_unique<CalculatorServiceProxy>(unshared, etcd->Target("/calc")));
    }
    // (Each names its thread once it runs.)
    EXPECT_TRUE(WaitUntil([&] { return watches().size() == 6; }, MonoDelta::FromSeconds(5)))
        << watches().size() << " watch threads for 1 shared watch and 5 unshared";
  }
  EXPECT_EQ(1u, watches().size()) << "an unshared watch outlived its proxy";

  // Idle watches are bounded: 20 more targets, each let go, leave 16.
  for (int i = 0; i < 20; ++i) {
    CalculatorServiceProxy proxy(client, etcd->Target("/other" + std::to_string(i)));
  }
  EXPECT_TRUE(
      WaitUntil([&] { return watches().size() == kMaxIdleEtcdWatches; }, MonoDelta::FromSeconds(5)))
      << watches().size() << " watch threads for 21 targets let go";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // would another appear?
  EXPECT_EQ(kMaxIdleEtcdWatches, watches().size());
  // A messenger shut down stops them.
  client->Shutdown();
  EXPECT_EQ(0u, watches().size());
}

// etcd over TLS ("etcds://", MessengerBuilder::set_etcd_tls), etcd
// requiring client certificates (--client-cert-auth). The attackers: a man
// in the middle of a client's etcd (plain HTTP would let it list servers of
// its choosing), here an etcd whose certificate the client's CA did not
// sign; and a client without a certificate etcd's CA signed.
class EtcdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_ETCD();
    etcd_id_ = test::MakeCert(dir_, "etcd");
    client_id_ = test::MakeCert(dir_, "etcd-client");
    files_ = {etcd_id_.cert, client_id_.cert, client_id_.key};
    // etcd's gateway calls etcd's own gRPC port with etcd's certificate, so
    // the CA etcd trusts for clients trusts that one too (in a deployment,
    // one CA signs both).
    const std::string client_cas = dir_.path() + "/client-cas.pem";
    std::ofstream(client_cas) << std::ifstream(client_id_.cert).rdbuf()
                              << std::ifstream(etcd_id_.cert).rdbuf();
    MiniEtcd::Tls tls{etcd_id_.cert, etcd_id_.key, client_cas, files_};
    Status s = MiniEtcd::Start(&etcd_, &tls);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // A watcher's first read of `prefix` with `files`.
  Status LoadWith(const EtcdTlsFiles& files) {
    EtcdTarget target;
    EXPECT_TRUE(EtcdTarget::Parse(etcd_->Target("/calc"), &target).ok());
    target.tls_files = files;
    EtcdWatcher watcher(target, [](const std::vector<std::string>&) {});
    return watcher.Load(MonoDelta::FromSeconds(5));
  }

  test::TempDir dir_;
  test::CertFiles etcd_id_, client_id_;
  EtcdTlsFiles files_;
  std::unique_ptr<MiniEtcd> etcd_;
};

TEST_F(EtcdTlsTest, AServerRegistersAndIsFoundAndCalledOverTls) {
  Watchdog dog(std::chrono::seconds(30));
  ASSERT_EQ(0u, etcd_->Target("/calc").rfind("etcds://", 0));
  auto client = MakeClient(1, MessengerBuilder("client").set_etcd_tls(
                                  files_.ca_file, files_.cert_file, files_.key_file));
  CalculatorServiceProxy proxy(client, etcd_->Target("/calc"));
  EXPECT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));
  TestServer server;
  ASSERT_TRUE(server
                  .Start(1, ServicePoolOptions(),
                         MessengerBuilder("calc")
                             .set_registry(etcd_->Target("/calc"))
                             .set_etcd_tls(files_.ca_file, files_.cert_file, files_.key_file))
                  .ok());
  EXPECT_TRUE(WaitUntil([&] { return AddVia(proxy) == server.address.ToString(); },
                        MonoDelta::FromSeconds(2)))
      << "the server registered over TLS got no call";
  server.messenger->Drain(MonoDelta::FromSeconds(2));
  EXPECT_TRUE(WaitUntil([&] { return proxy.servers().empty(); }, MonoDelta::FromSeconds(2)))
      << "the drained server's key did not go";
}

TEST_F(EtcdTlsTest, AClientThatDoesNotTrustEtcdsCertificateReadsNothing) {
  const test::CertFiles stranger = test::MakeCert(dir_, "stranger-ca");
  Status s = LoadWith({stranger.cert, files_.cert_file, files_.key_file});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("certificate")) << s.ToString();
  std::cerr << "an etcd the client does not trust: " << s.ToString() << "\n";
  // Nor with the system's CAs, which did not sign it either.
  EXPECT_FALSE(LoadWith({"", files_.cert_file, files_.key_file}).ok());
  ASSERT_TRUE(LoadWith(files_).ok());
}

TEST_F(EtcdTlsTest, AClientWithoutACertificateEtcdTrustsIsRefused) {
  EXPECT_FALSE(LoadWith({files_.ca_file, "", ""}).ok());
  const test::CertFiles stranger = test::MakeCert(dir_, "stranger");
  EXPECT_FALSE(LoadWith({files_.ca_file, stranger.cert, stranger.key}).ok());
  // And plain HTTP to it answers nothing a client takes.
  EtcdTarget plain;
  ASSERT_TRUE(EtcdTarget::Parse("etcd://" + etcd_->endpoint() + "/calc", &plain).ok());
  EtcdWatcher watcher(plain, [](const std::vector<std::string>&) {});
  EXPECT_FALSE(watcher.Load(MonoDelta::FromSeconds(5)).ok());
}

// etcd with authentication on (its RBAC), over TLS: the gateway knows a
// client only by the token it got for a user's password. Tokens live 1 s
// here (--auth-token-ttl 1), so that every test also renews them. The
// attackers: a client with a wrong password, and a user of another team
// reaching for this team's servers (its role grants only /other).
class EtcdAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_ETCD();
    etcd_id_ = test::MakeCert(dir_, "etcd");
    MiniEtcd::Tls tls{etcd_id_.cert, etcd_id_.key, "", {etcd_id_.cert, "", ""}};
    Status s = MiniEtcd::Start(&etcd_, &tls, {"--auth-token-ttl", "1"});
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = etcd_->EnableAuth({{"svc", "svc-secret", "/calc"}, {"other", "other-secret", "/other"}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    svc_password_ = PasswordFile("svc", "svc-secret\n");
  }

  std::string PasswordFile(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name + ".password";
    std::ofstream(path) << text;
    return path;
  }

  MessengerBuilder As(const std::string& name, const std::string& user,
                      const std::string& password_file) {
    return MessengerBuilder(name)
        .set_etcd_tls(etcd_id_.cert)
        .set_etcd_credentials(user, password_file);
  }

  // A watcher's first read of /calc as `credentials`.
  Status LoadAs(const EtcdCredentials& credentials) {
    EtcdTarget target;
    EXPECT_TRUE(EtcdTarget::Parse(etcd_->Target("/calc"), &target).ok());
    target.tls_files = {etcd_id_.cert, "", ""};
    target.credentials = credentials;
    EtcdWatcher watcher(target, [](const std::vector<std::string>&) {});
    return watcher.Load(MonoDelta::FromSeconds(5));
  }

  test::TempDir dir_;
  test::CertFiles etcd_id_;
  std::unique_ptr<MiniEtcd> etcd_;
  std::string svc_password_;
};

// A server and a client, both as "svc": the server registers, the client
// finds and calls it, and 6 s later (its lease is 5 s, kept alive every
// 1.7 s, each time with a token etcd has forgotten) it is still there.
// Then etcd restarts: the watch, made again, is canceled for its stale
// token ("invalid auth token"), asks for a new one, and finds a server
// registered after; that server's drain takes its key away.
TEST_F(EtcdAuthTest, AServerAndAClientWithAUserFindEachOtherAcrossExpiredTokensAndARestart) {
  Watchdog dog(std::chrono::seconds(60));
  const std::string target = etcd_->Target("/calc");
  // Without the watch's probe, which would also renew the client's token:
  // the watch made again after the restart must learn from etcd itself
  // that its token is stale.
  auto client = MakeClient(1, As("client", "svc", svc_password_).set_etcd_watch_probe(MonoDelta()));
  Messenger* c = client.get();
  CalculatorServiceProxy proxy(client, target);
  EXPECT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));
  TestServer a;
  ASSERT_TRUE(
      a.Start(1, ServicePoolOptions(), As("calc", "svc", svc_password_).set_registry(target)).ok());
  EXPECT_TRUE(
      WaitUntil([&] { return AddVia(proxy) == a.address.ToString(); }, MonoDelta::FromSeconds(3)))
      << "the server registered as svc got no call";
  // A second client probes its silent watch every second, as the user may:
  // a read inside the prefix, answered (or refused for a stale token, the
  // member alive all the same), so its watch is kept.
  auto prober = MakeClient(
      1, As("prober", "svc", svc_password_).set_etcd_watch_probe(MonoDelta::FromSeconds(1)));
  CalculatorServiceProxy probing(prober, target);
  EXPECT_TRUE(WaitUntil([&] { return probing.registry_connected(); }, MonoDelta::FromSeconds(5)));
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_EQ(1u, proxy.servers().size()) << "the lease was not kept alive past expired tokens";
  EXPECT_EQ(a.address.ToString(), AddVia(proxy));
  EXPECT_EQ(0, RegistryMetric(prober.get(), "osprey_client_registry_reconnects_total", target))
      << "a watch whose member answered its probes was given up";
  EXPECT_EQ(a.address.ToString(), AddVia(probing));

  ASSERT_TRUE(etcd_->Stop().ok());
  ASSERT_TRUE(etcd_->Restart().ok());
  EXPECT_TRUE(WaitUntil(
      [&] {
        return RegistryMetric(c, "osprey_client_registry_reconnects_total", target) >= 1 &&
               proxy.registry_connected();
      },
      MonoDelta::FromSeconds(10)))
      << "the watch was not made again after the restart";
  TestServer b;
  ASSERT_TRUE(
      b.Start(1, ServicePoolOptions(), As("calc", "svc", svc_password_).set_registry(target)).ok());
  EXPECT_TRUE(WaitUntil([&] { return proxy.servers().size() == 2; }, MonoDelta::FromSeconds(5)))
      << "a server registered after the restart was not found";
  b.messenger->Drain(MonoDelta::FromSeconds(2));
  EXPECT_TRUE(WaitUntil([&] { return proxy.servers().size() == 1; }, MonoDelta::FromSeconds(3)))
      << "the drained server's key did not go";
}

TEST_F(EtcdAuthTest, AWrongPasswordOrAnotherTeamsUserReadsNothingAndIsToldWhy) {
  Status s = LoadAs({"svc", "guess"});
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("authentication failed")) << s.ToString();
  EXPECT_EQ(std::string::npos, s.ToString().find("guess")) << "the message holds the password";
  std::cerr << "a wrong password: " << s.ToString() << "\n";
  s = LoadAs({"other", "other-secret"});
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("permission denied")) << s.ToString();
  std::cerr << "another team's user: " << s.ToString() << "\n";
  s = LoadAs({});
  EXPECT_FALSE(s.ok()) << "no user at all read an etcd with authentication on";
  ASSERT_TRUE(LoadAs({"svc", "svc-secret"}).ok());

  // A caller of a proxy with the wrong password is told why it has no
  // server, not that none is registered.
  auto client = MakeClient(1, As("client", "svc", PasswordFile("wrong", "guess\n")));
  CalculatorServiceProxy proxy(client, etcd_->Target("/calc"));
  AddVia(proxy, &s);
  EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("authentication failed")) << s.ToString();
  std::cerr << "a call through a proxy with a wrong password: " << s.ToString() << "\n";

  // A server with the wrong password is not registered, and says why.
  EtcdTarget target;
  ASSERT_TRUE(EtcdTarget::Parse(etcd_->Target("/calc"), &target).ok());
  target.tls_files = {etcd_id_.cert, "", ""};
  target.credentials = {"svc", "guess"};
  EtcdRegistration registration(target, {"127.0.0.1:1"}, MonoDelta::FromSeconds(5));
  registration.Start();
  EXPECT_FALSE(registration.WaitRegistered(MonoDelta::FromSeconds(2)));
}

TEST_F(EtcdAuthTest, APasswordIsNeverSentInTheClear) {
  // Plain HTTP to the same etcd: refused before any byte is sent, by the
  // registry's Build and by a proxy's target.
  const std::string plain = "etcd://" + etcd_->endpoint() + "/calc";
  std::shared_ptr<Messenger> m;
  Status s = As("calc", "svc", svc_password_).set_registry(plain).Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("only over TLS")) << s.ToString();
  auto client = MakeClient(1, As("client", "svc", svc_password_));
  CalculatorServiceProxy proxy(client, plain);
  AddVia(proxy, &s);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("only over TLS")) << s.ToString();
  // The password file: read at Build, its first line, never echoed.
  for (const auto& [file, why] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent/pw", "cannot read /nonexistent/pw"},
           {PasswordFile("empty", "\n"), "holds no password"},
           {PasswordFile("long", std::string(1025, 'p')), "longer than 1 KiB"}}) {
    s = As("client", "svc", file).Build(&m);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(std::string::npos, s.ToString().find(why)) << s.ToString();
  }
  s = As("client", "svc", "").Build(&m);
  EXPECT_NE(std::string::npos, s.ToString().find("both a user and a password file"))
      << s.ToString();
  ASSERT_TRUE(As("client", "svc", PasswordFile("crlf", "svc-secret\r\nignored\n")).Build(&m).ok());
  CalculatorServiceProxy crlf(m, etcd_->Target("/calc"));
  EXPECT_TRUE(WaitUntil([&] { return crlf.registry_connected(); }, MonoDelta::FromSeconds(5)))
      << "the first line of a CRLF file is not the password";
}

// --- Server processes (test_server), a client at a steady open-loop rate ---

struct CallRecord {
  MonoDelta at;  // when it started, since the loop began
  Status status;
  std::string server;
};

// Async Adds at `rate_per_s` for `duration` (an open loop: a slow answer
// does not delay the next call), idempotent with retries; bounded in count
// and time.
std::vector<CallRecord> RunOpenLoop(CalculatorServiceProxy* proxy, int rate_per_s,
                                    MonoDelta duration, MonoTime begin) {
  const int total = static_cast<int>(rate_per_s * duration.ToSeconds());
  std::vector<CallRecord> records(total);
  CountDownLatch done(total);
  RetryPolicy retries;
  retries.max_attempts = 5;
  retries.initial_backoff = MonoDelta::FromMilliseconds(5);
  retries.max_backoff = MonoDelta::FromMilliseconds(50);
  for (int i = 0; i < total; ++i) {
    const MonoTime due = begin + MonoDelta::FromNanoseconds(int64_t{1000000000} * i / rate_per_s);
    const MonoTime now = MonoTime::Now();
    if (due > now)
      std::this_thread::sleep_for(std::chrono::nanoseconds((due - now).ToNanoseconds()));
    struct Call {
      AddRequestPB add;
      AddResponsePB sum;
      RpcController ctl;
    };
    auto c = std::make_shared<Call>();
    c->add.set_x(20);
    c->add.set_y(22);
    c->ctl.set_timeout(MonoDelta::FromSeconds(5));
    EXPECT_TRUE(c->ctl.set_retry_policy(retries).ok());
    c->ctl.set_idempotent(true);
    CallRecord* r = &records[i];
    r->at = MonoTime::Now() - begin;
    proxy->AddAsync(c->add, &c->sum, &c->ctl, [c, r, &done] {
      r->status = c->ctl.status();
      if (r->status.ok() && c->sum.result() != 42) r->status = Status::Corruption("wrong sum");
      r->server = c->ctl.server().ToString();
      done.CountDown();
    });
  }
  EXPECT_TRUE(done.WaitFor(MonoDelta::FromSeconds(30))) << "calls still unanswered";
  return records;
}

struct RegisteredFleet {
  std::vector<std::unique_ptr<ChildServer>> children;
  std::vector<Sockaddr> addrs;
  Status Add(const std::string& target, int ttl_s) {
    children.push_back(std::make_unique<ChildServer>());
    Sockaddr a;
    OSPREY_RETURN_NOT_OK(children.back()->Spawn(
        "0", {}, &a, {"--register", target, "--register-ttl", std::to_string(ttl_s)}));
    addrs.push_back(a);
    return Status::OK();
  }
};

// A cluster of 3 etcd members, `target` naming all three under `prefix`,
// and one test_server registered there with a lease of `ttl_s`.
Status StartRegisteredCluster(const std::string& prefix, int ttl_s,
                              std::vector<std::unique_ptr<MiniEtcd>>* cluster, std::string* target,
                              RegisteredFleet* fleet) {
  OSPREY_RETURN_NOT_OK(MiniEtcd::StartCluster(3, cluster));
  *target = MiniEtcd::ClusterTarget(*cluster, prefix);
  return fleet->Add(*target, ttl_s);
}

// When `server` answered its first call of `calls` (Max if never).
MonoDelta FirstAnswerFrom(const std::vector<CallRecord>& calls, const Sockaddr& server) {
  MonoDelta first = MonoDelta::Max();
  for (const CallRecord& c : calls) {
    if (c.status.ok() && c.server == server.ToString()) first = std::min(first, c.at);
  }
  return first;
}

int FailedCalls(const std::vector<CallRecord>& calls, std::string* first) {
  int failed = 0;
  for (const CallRecord& c : calls) {
    if (!c.status.ok() && failed++ == 0) *first = c.status.ToString();
  }
  return failed;
}

// Three servers registered; a client on the etcd target at 200 calls/s; a
// fourth registers under load and takes calls within 2 s; kill -9 of one:
// its key is gone within its lease's TTL, and no call goes to it after.
TEST(RegistryProcessTest, AServerJoiningUnderLoadTakesCallsAndAKilledOneIsForgotten) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(60));
  auto etcd = StartEtcd();
  ASSERT_NE(nullptr, etcd);
  const std::string target = etcd->Target("/fleet");
  constexpr int kTtl = 2;
  RegisteredFleet fleet;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fleet.Add(target, kTtl).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, target);
  ASSERT_EQ(3u, proxy.servers().size());

  const MonoTime begin = MonoTime::Now();
  MonoDelta joined_at, killed_at, key_gone_at;
  std::thread events([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    Status s = fleet.Add(target, kTtl);  // registered when it says it listens
    EXPECT_TRUE(s.ok()) << s.ToString();
    joined_at = MonoTime::Now() - begin;
    std::this_thread::sleep_for(std::chrono::seconds(2));
    fleet.children[0]->Kill();
    killed_at = MonoTime::Now() - begin;
    const std::string key = "/fleet/" + fleet.addrs[0].ToString();
    for (int i = 0; i < 100 && Keys(*etcd, "/fleet").count(key) == 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    key_gone_at = MonoTime::Now() - begin;
  });
  std::vector<CallRecord> calls = RunOpenLoop(&proxy, 200, MonoDelta::FromSeconds(9), begin);
  events.join();
  ASSERT_EQ(4u, fleet.addrs.size());
  std::string first;
  EXPECT_EQ(0, FailedCalls(calls, &first)) << "e.g. " << first;

  const MonoDelta first_on_new = FirstAnswerFrom(calls, fleet.addrs[3]);
  std::cerr << "4th server joined at " << joined_at.ToString() << ", first call at "
            << first_on_new.ToString() << "; server killed at " << killed_at.ToString()
            << ", key gone at " << key_gone_at.ToString() << "\n";
  EXPECT_LE(first_on_new, joined_at + MonoDelta::FromSeconds(2))
      << "the 4th server took no call within 2 s of registering";
  // etcd expires leases in passes; a second of slack past the TTL.
  EXPECT_LE(key_gone_at, killed_at + MonoDelta::FromSeconds(kTtl + 1))
      << "the killed server's key outlived its lease";
  int after_gone = 0;
  for (const CallRecord& c : calls) {
    if (c.at > key_gone_at && c.server == fleet.addrs[0].ToString()) ++after_gone;
  }
  EXPECT_EQ(0, after_gone) << "calls went to the killed server after its key was gone";
  // And the client forgot it.
  for (const auto& r : proxy.servers()) EXPECT_NE(fleet.addrs[0].ToString(), r.address);
  EXPECT_EQ(3u, proxy.servers().size());
}

// etcd stopped for 5 s under load: no call fails, calls keep going to the
// last known servers, the client says etcd is unreachable (in
// registry_connected() and on its /metrics); once etcd is back (same data),
// a server that registers is found again.
TEST(RegistryProcessTest, EtcdDownFor5sUnderLoadFailsNoCallAndTheWatchResumes) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(60));
  auto etcd = StartEtcd();
  ASSERT_NE(nullptr, etcd);
  const std::string target = etcd->Target("/outage");
  RegisteredFleet fleet;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fleet.Add(target, 5).ok());
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, target);
  ASSERT_EQ(3u, proxy.servers().size());
  ASSERT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));
  Messenger* c = client.get();
  EXPECT_EQ(1, RegistryMetric(c, "osprey_client_registry_connected", target));
  EXPECT_EQ(3, RegistryMetric(c, "osprey_client_registry_servers", target));

  const MonoTime begin = MonoTime::Now();
  MonoDelta stopped_at, restarted_at, joined_at;
  std::atomic<bool> saw_disconnected{false};
  std::atomic<double> connected_metric_during{-1};
  std::thread events([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    EXPECT_TRUE(etcd->Stop().ok());
    stopped_at = MonoTime::Now() - begin;
    saw_disconnected =
        WaitUntil([&] { return !proxy.registry_connected(); }, MonoDelta::FromSeconds(3));
    connected_metric_during = RegistryMetric(c, "osprey_client_registry_connected", target);
    std::this_thread::sleep_until((begin + stopped_at + MonoDelta::FromSeconds(5)).time_point());
    Status s = etcd->Restart();
    EXPECT_TRUE(s.ok()) << s.ToString();
    restarted_at = MonoTime::Now() - begin;
    s = fleet.Add(target, 5);
    EXPECT_TRUE(s.ok()) << s.ToString();
    joined_at = MonoTime::Now() - begin;
  });
  std::vector<CallRecord> calls = RunOpenLoop(&proxy, 200, MonoDelta::FromSeconds(11), begin);
  events.join();
  ASSERT_EQ(4u, fleet.addrs.size());
  std::string first;
  EXPECT_EQ(0, FailedCalls(calls, &first)) << "e.g. " << first;
  EXPECT_TRUE(saw_disconnected) << "the client never said etcd was unreachable";
  EXPECT_EQ(0, connected_metric_during.load()) << "/metrics did not say etcd was unreachable";
  // During the outage every one of the three kept serving.
  std::map<std::string, int> during;
  const MonoDelta first_on_new = FirstAnswerFrom(calls, fleet.addrs[3]);
  for (const CallRecord& c : calls) {
    if (c.status.ok() && c.at > stopped_at && c.at < restarted_at) ++during[c.server];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(during[fleet.addrs[i].ToString()], 50) << "server " << i << " during the outage";
  }
  std::cerr << "etcd stopped at " << stopped_at.ToString() << ", back at "
            << restarted_at.ToString() << "; a new server registered at " << joined_at.ToString()
            << " took its first call at " << first_on_new.ToString() << "\n";
  // The watch resumes within its backoff (1 s at most, with jitter) and
  // finds the newcomer.
  EXPECT_LE(first_on_new, joined_at + MonoDelta::FromSeconds(3))
      << "a server registered after etcd came back was not found";
  EXPECT_TRUE(proxy.registry_connected());
  EXPECT_EQ(4u, proxy.servers().size());
  EXPECT_EQ(1, RegistryMetric(c, "osprey_client_registry_connected", target));
  EXPECT_EQ(4, RegistryMetric(c, "osprey_client_registry_servers", target));
  EXPECT_GE(RegistryMetric(c, "osprey_client_registry_reconnects_total", target), 1);
}

// A cluster of 3 etcd members, the target naming all three; a server
// registered and a client watching, at 200 calls/s. The member both reach
// first (the target's first) is killed: the registration's keep-alives go
// to another member (its key outlives its 2 s lease), the watch moves too
// (a server that registers after is found), and no call fails.
TEST(RegistryProcessTest, AnEtcdMemberLostMovesTheWatchAndTheKeepAlivesToAnother) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(60));
  constexpr int kTtl = 2;
  std::vector<std::unique_ptr<MiniEtcd>> cluster;
  std::string target;
  RegisteredFleet fleet;
  Status started = StartRegisteredCluster("/members", kTtl, &cluster, &target, &fleet);
  ASSERT_TRUE(started.ok()) << started.ToString();
  auto client = MakeClient(1);
  Messenger* c = client.get();
  CalculatorServiceProxy proxy(client, target);
  ASSERT_EQ(1u, proxy.servers().size());
  ASSERT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));

  const MonoTime begin = MonoTime::Now();
  MonoDelta killed_at, joined_at;
  std::thread events([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    EXPECT_TRUE(cluster[0]->Stop().ok());
    killed_at = MonoTime::Now() - begin;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    Status s = fleet.Add(target, kTtl);  // through the members left
    EXPECT_TRUE(s.ok()) << s.ToString();
    joined_at = MonoTime::Now() - begin;
  });
  std::vector<CallRecord> calls = RunOpenLoop(&proxy, 200, MonoDelta::FromSeconds(6), begin);
  events.join();
  ASSERT_EQ(2u, fleet.addrs.size());
  std::string first;
  EXPECT_EQ(0, FailedCalls(calls, &first)) << "e.g. " << first;
  const MonoDelta first_on_new = FirstAnswerFrom(calls, fleet.addrs[1]);
  std::cerr << "member 0 killed at " << killed_at.ToString() << "; a server registered at "
            << joined_at.ToString() << " took its first call at " << first_on_new.ToString()
            << "\n";
  // More than twice the TTL after the kill: kept alive through another.
  auto keys = Keys(*cluster[1], "/members");
  EXPECT_EQ(1u, keys.count("/members/" + fleet.addrs[0].ToString()))
      << "the first server's key did not outlive its lease";
  EXPECT_EQ(1u, keys.count("/members/" + fleet.addrs[1].ToString()));
  EXPECT_LE(first_on_new, joined_at + MonoDelta::FromSeconds(3))
      << "a server registered after the member went was not found";
  EXPECT_TRUE(proxy.registry_connected());
  EXPECT_EQ(2u, proxy.servers().size());
  EXPECT_GE(RegistryMetric(c, "osprey_client_registry_reconnects_total", target), 1);
}

// A cluster of 3 whose other two members hang (SIGSTOP): the member a
// client watches through has no leader, so its view may be stale. The
// client says so (registry_connected() false, from etcd's "no leader"), no
// call fails meanwhile, and once the members are back it watches again and
// finds a server registered then. Before: the watch stayed up on the
// member without a leader, and the client said it was connected.
TEST(RegistryProcessTest, AMemberWithoutALeaderIsNotTakenForAWorkingRegistry) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(90));
  std::vector<std::unique_ptr<MiniEtcd>> cluster;
  std::string target;
  RegisteredFleet fleet;
  Status started = StartRegisteredCluster("/quorum", 5, &cluster, &target, &fleet);
  ASSERT_TRUE(started.ok()) << started.ToString();
  auto client = MakeClient(1);
  CalculatorServiceProxy proxy(client, target);
  ASSERT_EQ(1u, proxy.servers().size());
  ASSERT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));

  ASSERT_TRUE(cluster[1]->Pause().ok());
  ASSERT_TRUE(cluster[2]->Pause().ok());
  const MonoTime paused = MonoTime::Now();
  const bool noticed =
      WaitUntil([&] { return !proxy.registry_connected(); }, MonoDelta::FromSeconds(15));
  std::cerr << "without a leader: the client "
            << (noticed ? "noticed after " : "did not notice in ")
            << (MonoTime::Now() - paused).ToString() << "\n";
  EXPECT_TRUE(noticed) << "the client still says its registry works";
  Status s;
  EXPECT_EQ(fleet.addrs[0].ToString(), AddVia(proxy, &s)) << s.ToString();

  ASSERT_TRUE(cluster[1]->Resume().ok());
  ASSERT_TRUE(cluster[2]->Resume().ok());
  EXPECT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(15)))
      << "the client did not watch again once the members were back";
  ASSERT_TRUE(fleet.Add(target, 5).ok());
  EXPECT_TRUE(WaitUntil([&] { return proxy.servers().size() == 2; }, MonoDelta::FromSeconds(5)))
      << "a server registered after the members came back was not found";
}

// A cluster of 3; the member a client watches through hangs (SIGSTOP)
// after the watch began, while the other two go on. Its TCP stays up, so
// only silence says anything: the client probes the member after 1 s of
// it, leaves it when the probe goes unanswered, and watches through
// another, where it finds a server registered meanwhile. First, a healthy
// watch as silent: its probes are answered and it is kept. Before: the
// watch stayed on the hung member, and the client said it was connected
// and never learnt of the new server.
TEST(RegistryProcessTest, AMemberThatHangsMidWatchIsLeftForAnother) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(60));
  std::vector<std::unique_ptr<MiniEtcd>> cluster;
  std::string target;
  RegisteredFleet fleet;
  Status started = StartRegisteredCluster("/hung", 5, &cluster, &target, &fleet);
  ASSERT_TRUE(started.ok()) << started.ToString();
  auto client =
      MakeClient(1, MessengerBuilder("client").set_etcd_watch_probe(MonoDelta::FromSeconds(1)));
  Messenger* c = client.get();
  CalculatorServiceProxy proxy(client, target);
  ASSERT_EQ(1u, proxy.servers().size());
  ASSERT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));

  // Silent and healthy for 3.5 s: probed about three times, kept.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  EXPECT_TRUE(proxy.registry_connected());
  EXPECT_EQ(0, RegistryMetric(c, "osprey_client_registry_reconnects_total", target))
      << "a silent watch on a member that answers its probes was given up";

  ASSERT_TRUE(cluster[0]->Pause().ok());  // the target's first: the watch's
  const MonoTime paused = MonoTime::Now();
  ASSERT_TRUE(fleet.Add(target, 5).ok());  // through the members left
  const bool found =
      WaitUntil([&] { return proxy.servers().size() == 2; }, MonoDelta::FromSeconds(15));
  std::cerr << "member 0 hung: a server registered meanwhile was "
            << (found ? "found after " : "not found in ") << (MonoTime::Now() - paused).ToString()
            << "\n";
  EXPECT_TRUE(found) << "the client stayed on the hung member";
  EXPECT_TRUE(proxy.registry_connected());
  EXPECT_GE(RegistryMetric(c, "osprey_client_registry_reconnects_total", target), 1);
  Status s;
  EXPECT_NE("", AddVia(proxy, &s)) << s.ToString();
  EXPECT_TRUE(cluster[0]->Resume().ok());
}

// A client whose only etcd member hangs while the others move on: a server
// registers, other keys change, and etcd compacts its history past the
// revision the client watched from. When the member is back, the client's
// watch from that revision is refused as compacted: it reads the prefix
// again and finds the server.
TEST(RegistryProcessTest, AWatchResumedPastACompactionReadsEverythingAgain) {
  SKIP_WITHOUT_ETCD();
  Watchdog dog(std::chrono::seconds(60));
  std::vector<std::unique_ptr<MiniEtcd>> cluster;
  std::string target;
  RegisteredFleet fleet;
  Status started = StartRegisteredCluster("/compacted", 5, &cluster, &target, &fleet);
  ASSERT_TRUE(started.ok()) << started.ToString();
  // The client knows member 0 alone.
  const std::string only_member0 = cluster[0]->Target("/compacted");
  auto client =
      MakeClient(1, MessengerBuilder("client").set_etcd_watch_probe(MonoDelta::FromSeconds(1)));
  CalculatorServiceProxy proxy(client, only_member0);
  ASSERT_EQ(1u, proxy.servers().size());
  ASSERT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));

  ASSERT_TRUE(cluster[0]->Pause().ok());
  // The watch is given up (its probe unanswered), and made again only once
  // the member is back: from the revision before the compaction.
  ASSERT_TRUE(WaitUntil([&] { return !proxy.registry_connected(); }, MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(fleet.Add(target, 5).ok());  // through the members left
  int64_t revision = 0;
  {
    EtcdHttp http({cluster[1]->endpoint()});
    for (int i = 0; i < 20; ++i) {
      std::string answer;
      nlohmann::json put{{"key", Base64Encode("/other/" + std::to_string(i))},
                         {"value", Base64Encode("x")}};
      ASSERT_TRUE(http.Post("/v3/kv/put", put.dump(), MonoDelta::FromSeconds(2), &answer).ok());
      revision = std::stoll(nlohmann::json::parse(answer)["header"]["revision"].get<std::string>());
    }
    std::string answer;
    Status s =
        http.Post("/v3/kv/compaction",
                  nlohmann::json{{"revision", std::to_string(revision)}, {"physical", true}}.dump(),
                  MonoDelta::FromSeconds(5), &answer);
    ASSERT_TRUE(s.ok()) << s.ToString() << " " << answer;
  }
  EXPECT_EQ(1u, proxy.servers().size()) << "a hung member told the client of a new server";
  ASSERT_TRUE(cluster[0]->Resume().ok());
  const MonoTime resumed = MonoTime::Now();
  const bool found =
      WaitUntil([&] { return proxy.servers().size() == 2; }, MonoDelta::FromSeconds(15));
  std::cerr << "member 0 back: the server registered while it hung was "
            << (found ? "found after " : "not found in ") << (MonoTime::Now() - resumed).ToString()
            << "\n";
  EXPECT_TRUE(found) << "the client's watch did not get past the compaction";
  EXPECT_TRUE(WaitUntil([&] { return proxy.registry_connected(); }, MonoDelta::FromSeconds(5)));
  std::set<std::string> answered;
  for (int i = 0; i < 50; ++i) {
    Status s;
    const std::string server = AddVia(proxy, &s);
    EXPECT_NE("", server) << s.ToString();
    answered.insert(server);
  }
  EXPECT_EQ((std::set<std::string>{fleet.addrs[0].ToString(), fleet.addrs[1].ToString()}),
            answered);
}

}  // namespace
}  // namespace osprey::rpc_test
