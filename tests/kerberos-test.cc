// Kerberos (SASL GSSAPI) end to end, against a real MIT KDC that the suite
// starts on loopback (MiniKdc): servers with keytabs, clients with tickets
// from kinit or a keytab login, Kudu's rpc_authentication settings, and
// every way it can go wrong that a user can cause.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "http_test_util.h"
#include "mini_kdc.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/socket.h"
#include "osprey/transport/negotiator.h"
#include "osprey/transport/sasl_gssapi.h"
#include "osprey/transport/tls_context.h"
#include "rpc_test_util.h"

namespace osprey {
namespace {

using rpc_test::CalculatorServiceProxy;
using rpc_test::TestServer;
using rpc_test::WhoAmIRequestPB;
using rpc_test::WhoAmIResponsePB;
using test::MiniKdc;
using transport::ClientAuthPolicy;
using transport::ClientNegotiator;
using transport::KerberosCredentials;
using transport::NegotiationSteps;
using transport::ServerAuthPolicy;
using transport::ServerNegotiator;
using transport::ServerTlsPolicy;
using transport::TlsFeatures;
using wire::NegotiatePB;

const std::string kServerPrincipal = "osprey/127.0.0.1";
const std::string kRealmSuffix = std::string("@") + MiniKdc::kRealm;

// What a connection does after steps.start_kerberos, inline: Kerberos's
// first step, then the SASL_INITIATE it makes.
Status StartKerberosInline(ClientNegotiator* client, NegotiationSteps* steps) {
  if (!steps->start_kerberos) return Status::OK();
  auto gssapi = client->TakeKerberosStart();
  std::string token;
  Status started = gssapi->Start(&token);
  return client->KerberosStarted(std::move(gssapi), started, std::move(token), steps);
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A counter of `m` with exactly these labels (0 if absent).
double CounterValue(const std::shared_ptr<Messenger>& m, const std::string& name,
                    const MetricLabels& labels) {
  for (const MetricValue& v : m->metrics()->Snapshot()) {
    if (v.name == name && v.labels == labels) return v.value;
  }
  return 0;
}

class KerberosTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Status s = MiniKdc::Start(&kdc_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::pair<const char*, const char*> principals[] = {{"osprey/127.0.0.1", "server"},
                                                              {"alice", "alice"},
                                                              {"bob/admin", "bob"},
                                                              {"HTTP/127.0.0.1", "http"}};
    for (const auto& [principal, name] : principals) {
      s = kdc_->AddPrincipalWithKeytab(principal, std::string(name) + ".keytab");
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  static void TearDownTestSuite() { kdc_.reset(); }

  void SetUp() override {
    ASSERT_NE(kdc_, nullptr);
    ASSERT_TRUE(kdc_->StartKdc().ok());
    Status s = kdc_->Kinit("alice", "alice.keytab");
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  static MessengerBuilder Server(RpcAuthentication mode) {
    MessengerBuilder b("kerberized-server");
    b.set_rpc_authentication(mode)
        .set_keytab_file(kdc_->Path("server.keytab"))
        .set_principal(kServerPrincipal)
        .set_sasl_protocol_name("osprey");
    return b;
  }
  static MessengerBuilder Client(RpcAuthentication mode) {
    MessengerBuilder b("kerberized-client");
    b.set_rpc_authentication(mode).set_sasl_protocol_name("osprey");
    return b;
  }

  // `keep`: the client stays up (and its connection open) in *keep.
  static Status WhoAmI(const MessengerBuilder& client_builder, const Sockaddr& server,
                       WhoAmIResponsePB* resp, std::shared_ptr<Messenger>* keep = nullptr) {
    std::shared_ptr<Messenger> client;
    OSPREY_RETURN_NOT_OK(client_builder.Build(&client));
    CalculatorServiceProxy proxy(client, server);
    WhoAmIRequestPB req;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    Status s = proxy.WhoAmI(req, resp, &ctl);
    if (keep != nullptr) {
      *keep = client;
    } else {
      client->Shutdown();
    }
    return s;
  }

  static std::unique_ptr<MiniKdc> kdc_;
};

std::unique_ptr<MiniKdc> KerberosTest::kdc_;

TEST_F(KerberosTest, ARequiredServerKnowsWhoCalls) {
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  WhoAmIResponsePB resp;
  std::shared_ptr<Messenger> client;
  s = WhoAmI(Client(RpcAuthentication::kRequired), server.address, &resp, &client);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("alice", resp.user());
  EXPECT_EQ("alice" + kRealmSuffix, resp.principal());
  EXPECT_EQ("GSSAPI", resp.authentication());

  // The server's connections say who and how.
  std::vector<ConnectionInfo> conns;
  ASSERT_TRUE(server.messenger->DumpConnections(&conns).ok());
  ASSERT_FALSE(conns.empty());
  EXPECT_EQ("alice" + kRealmSuffix, conns[0].principal);
  EXPECT_EQ(AuthenticationMethod::kKerberos, conns[0].authentication);
  EXPECT_EQ(1, CounterValue(server.messenger, "osprey_connections_authenticated_total",
                            {{"direction", "inbound"}, {"method", "gssapi"}}));
  EXPECT_EQ(1, CounterValue(client, "osprey_connections_authenticated_total",
                            {{"direction", "outbound"}, {"method", "gssapi"}}));
  client->Shutdown();
}

// Issue 40, finding 3: a server that requires Kerberos serves its pages
// (every client's principal and calls) to no one on its RPC port, where
// HTTP authenticates nobody; ListenHttp serves them on an address of their
// own.
TEST_F(KerberosTest, ARequiredServerServesNoPagesOnItsRpcPort) {
  TestServer server;
  MessengerBuilder b = Server(RpcAuthentication::kRequired);
  b.set_http_endpoints(true);
  Status s = server.Start(1, ServicePoolOptions(), b);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Socket http;
  ASSERT_TRUE(http.Init(server.address).ok());
  ASSERT_TRUE(http.Connect(server.address).ok());
  const std::string get = "GET /connections HTTP/1.1\r\nHost: localhost\r\n\r\n";
  ASSERT_TRUE(http.WriteAll(reinterpret_cast<const uint8_t*>(get.data()), get.size()).ok());
  timeval tv{5, 0};
  setsockopt(http.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[512];
  ssize_t n = ::recv(http.fd(), buf, sizeof(buf), 0);
  EXPECT_LE(n, 0) << "the RPC port answered: " << std::string(buf, n > 0 ? n : 0);
  Sockaddr pages;
  ASSERT_TRUE(server.messenger->ListenHttp(Sockaddr::Loopback(0), &pages).ok());
  Socket direct;
  ASSERT_TRUE(direct.Init(pages).ok());
  ASSERT_TRUE(direct.Connect(pages).ok());
  ASSERT_TRUE(direct.WriteAll(reinterpret_cast<const uint8_t*>(get.data()), get.size()).ok());
  setsockopt(direct.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  n = ::recv(direct.fd(), buf, sizeof(buf), 0);
  ASSERT_GT(n, 12);
  EXPECT_EQ("HTTP/1.1 200", std::string(buf, 12));
}

TEST_F(KerberosTest, OverTlsBothWaysAndAtEveryEncryptionSetting) {
  for (RpcEncryption enc : {RpcEncryption::kOptional, RpcEncryption::kRequired}) {
    for (bool encrypt_loopback : {false, true}) {
      SCOPED_TRACE(std::string(enc == RpcEncryption::kRequired ? "required" : "optional") +
                   (encrypt_loopback ? ", loopback encrypted" : ""));
      TestServer server;
      MessengerBuilder sb = Server(RpcAuthentication::kRequired);
      sb.set_rpc_encryption(enc).set_rpc_encrypt_loopback(encrypt_loopback);
      Status s = server.Start(1, ServicePoolOptions(), sb);
      ASSERT_TRUE(s.ok()) << s.ToString();
      MessengerBuilder cb = Client(RpcAuthentication::kRequired);
      cb.set_rpc_encryption(enc).set_rpc_encrypt_loopback(encrypt_loopback);
      WhoAmIResponsePB resp;
      std::shared_ptr<Messenger> client;
      s = WhoAmI(cb, server.address, &resp, &client);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ("alice" + kRealmSuffix, resp.principal());
      std::vector<ConnectionInfo> conns;
      ASSERT_TRUE(server.messenger->DumpConnections(&conns).ok());
      ASSERT_FALSE(conns.empty());
      EXPECT_EQ(encrypt_loopback ? ConnectionSecurity::kTlsEncrypted
                                 : ConnectionSecurity::kTlsAuthenticationOnly,
                conns[0].security);
      client->Shutdown();
    }
  }
}

TEST_F(KerberosTest, AKeytabLoginNeedsNoTicketCache) {
  ASSERT_TRUE(kdc_->Kdestroy().ok());
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  MessengerBuilder cb = Client(RpcAuthentication::kRequired);
  cb.set_keytab_file(kdc_->Path("bob.keytab")).set_principal("bob/admin");
  WhoAmIResponsePB resp;
  s = WhoAmI(cb, server.address, &resp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("bob/admin" + kRealmSuffix, resp.principal());
  EXPECT_EQ("bob", resp.user());  // no auth_to_local rule: the first component
}

TEST_F(KerberosTest, ARequiredServerRefusesPlain) {
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  WhoAmIResponsePB resp;
  std::shared_ptr<Messenger> plain;
  s = WhoAmI(MessengerBuilder("plain-client"), server.address, &resp, &plain);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "requires Kerberos")) << s.ToString();
  // The client refused: the server offers only GSSAPI.
  EXPECT_EQ(1, CounterValue(plain, "osprey_negotiation_failures_total", {{"reason", "kerberos"}}));
  plain->Shutdown();
  // And it still serves a Kerberos client.
  s = WhoAmI(Client(RpcAuthentication::kRequired), server.address, &resp);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST_F(KerberosTest, AnOptionalServerServesPlainAndKerberos) {
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kOptional));
  ASSERT_TRUE(s.ok()) << s.ToString();
  WhoAmIResponsePB resp;
  s = WhoAmI(MessengerBuilder("plain-client"), server.address, &resp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("PLAIN", resp.authentication());
  EXPECT_EQ("", resp.principal());
  s = WhoAmI(Client(RpcAuthentication::kOptional), server.address, &resp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("GSSAPI", resp.authentication());
}

TEST_F(KerberosTest, AnOptionalClientWithoutATicketUsesPlain) {
  ASSERT_TRUE(kdc_->Kdestroy().ok());
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kOptional));
  ASSERT_TRUE(s.ok()) << s.ToString();
  WhoAmIResponsePB resp;
  s = WhoAmI(Client(RpcAuthentication::kOptional), server.address, &resp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("PLAIN", resp.authentication());
}

TEST_F(KerberosTest, NoTicketSaysRunKinit) {
  ASSERT_TRUE(kdc_->Kdestroy().ok());
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  WhoAmIResponsePB resp;
  s = WhoAmI(Client(RpcAuthentication::kRequired), server.address, &resp);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "kinit")) << s.ToString();
}

TEST_F(KerberosTest, AWrongServicePrincipalIsNamed) {
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  MessengerBuilder cb = Client(RpcAuthentication::kRequired);
  cb.set_sasl_protocol_name("nosuchservice");
  WhoAmIResponsePB resp;
  s = WhoAmI(cb, server.address, &resp);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "does not know the server's principal")) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "nosuchservice@127.0.0.1")) << s.ToString();
}

TEST_F(KerberosTest, ADeadKdcIsNamed) {
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Alice holds a ticket-granting ticket only: the service ticket needs
  // the KDC, which is down.
  ASSERT_TRUE(kdc_->StopKdc().ok());
  WhoAmIResponsePB resp;
  s = WhoAmI(Client(RpcAuthentication::kRequired), server.address, &resp);
  ASSERT_TRUE(kdc_->StartKdc().ok());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "no KDC answered")) << s.ToString();
}

// Kerberos's first client step may wait for the KDC (a service ticket).
// It runs off the reactor: while a KDC host accepts and never answers, the
// same reactor serves every other connection.
TEST_F(KerberosTest, AKdcThatNeverAnswersStallsNoOtherConnection) {
  TestServer kerberized, plain;
  Status s = kerberized.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = plain.Start(1, ServicePoolOptions(), MessengerBuilder("plain-server"));
  ASSERT_TRUE(s.ok()) << s.ToString();
  // A "KDC" whose host takes the connection (the kernel's backlog) and
  // never says a word.
  Socket silent;
  Sockaddr silent_addr;
  ASSERT_TRUE(silent.Init(Sockaddr::Loopback(0)).ok());
  ASSERT_TRUE(silent.Bind(Sockaddr::Loopback(0)).ok());
  ASSERT_TRUE(silent.Listen(16).ok());
  ASSERT_TRUE(silent.GetLocalAddress(&silent_addr).ok());
  ASSERT_TRUE(kdc_->UseKdcPort(silent_addr.port()).ok());

  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(Client(RpcAuthentication::kOptional).set_num_reactors(1).Build(&client).ok());
  CalculatorServiceProxy to_kerberized(client, kerberized.address);
  WhoAmIRequestPB req;
  WhoAmIResponsePB resp;
  RpcController kctl;
  kctl.set_timeout(MonoDelta::FromSeconds(20));
  CountDownLatch kerberos_done(1);
  to_kerberized.WhoAmIAsync(req, &resp, &kctl, [&] { kerberos_done.CountDown(); });
  // Let the Kerberos negotiation reach the KDC, then call elsewhere on the
  // same reactor.
  ASSERT_TRUE(rpc_test::WaitUntil([&] {
    std::vector<ConnectionInfo> conns;
    return client->DumpConnections(&conns).ok() && !conns.empty();
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CalculatorServiceProxy to_plain(client, plain.address);
  s = rpc_test::CheckedAdd(to_plain, 2, 3, MonoDelta::FromSeconds(2));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(kerberos_done.WaitFor(MonoDelta())) << "the Kerberos call ended early";
  // The KDC host goes away: the Kerberos call fails, with a reason.
  silent.Close();
  ASSERT_TRUE(kerberos_done.WaitFor(MonoDelta::FromSeconds(30)));
  EXPECT_FALSE(kctl.status().ok());
  ASSERT_TRUE(kdc_->UseKdcPort(kdc_->port()).ok());
  client->Shutdown();
}

TEST_F(KerberosTest, AnExpiredTicketSaysKinitAgain) {
  // The KDC's clock is the machine's: a ticket of two seconds, then three
  // seconds of waiting (clock skew allowance applies only between hosts).
  Status s = kdc_->Kinit("alice", "alice.keytab", "2s");
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  TestServer server;
  s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  WhoAmIResponsePB resp;
  s = WhoAmI(Client(RpcAuthentication::kRequired), server.address, &resp);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "expired")) << s.ToString();
}

// A client whose principal is of a realm krb5.conf does not list, and no
// DNS to find its KDC by: Kerberos cannot even begin.
TEST_F(KerberosTest, AnUnknownRealmIsNamed) {
  ASSERT_TRUE(kdc_->Kdestroy().ok());
  Status s = kdc_->WriteKeytabOutsideTheKdc("carol@NOWHERE.TEST", "carol.keytab");
  ASSERT_TRUE(s.ok()) << s.ToString();
  TestServer server;
  s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  MessengerBuilder cb = Client(RpcAuthentication::kRequired);
  cb.set_keytab_file(kdc_->Path("carol.keytab")).set_principal("carol@NOWHERE.TEST");
  WhoAmIResponsePB resp;
  s = WhoAmI(cb, server.address, &resp);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "unknown Kerberos realm")) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "NOWHERE.TEST")) << s.ToString();
}

// The client's clock an hour ahead of the KDC's and the server's (MIT
// allows five minutes): refused, and the message says to sync the clocks.
TEST_F(KerberosTest, AClockSkewIsNamed) {
  Status s = kdc_->SkewTicketCacheClock(3600);
  ASSERT_TRUE(s.ok()) << s.ToString();
  TestServer server;
  s = server.Start(1, ServicePoolOptions(), Server(RpcAuthentication::kRequired));
  ASSERT_TRUE(s.ok()) << s.ToString();
  WhoAmIResponsePB resp;
  s = WhoAmI(Client(RpcAuthentication::kRequired), server.address, &resp);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "clocks of client and server differ")) << s.ToString();
  // Without the skew, the same ticket cache works.
  ASSERT_TRUE(kdc_->SkewTicketCacheClock(0).ok());
  s = WhoAmI(Client(RpcAuthentication::kRequired), server.address, &resp);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(KerberosTest, ServerSettingsThatCannotWorkFailAtStart) {
  std::shared_ptr<Messenger> m;
  // A keytab without the principal's key.
  MessengerBuilder wrong = Server(RpcAuthentication::kRequired);
  wrong.set_principal("osprey/db-9.example.com");
  Status s = wrong.Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument() || s.IsNotAuthorized()) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "osprey/db-9.example.com")) << s.ToString();
  // No keytab file.
  MessengerBuilder missing = Server(RpcAuthentication::kRequired);
  missing.set_keytab_file(kdc_->Path("no-such.keytab"));
  s = missing.Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "no-such.keytab")) << s.ToString();
  // A keytab while authentication is disabled.
  MessengerBuilder disabled = Server(RpcAuthentication::kDisabled);
  s = disabled.Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  // Required with no keytab: it builds (a client), and refuses to listen.
  ASSERT_TRUE(Client(RpcAuthentication::kRequired).Build(&m).ok());
  Sockaddr bound;
  s = m->Listen(Sockaddr::Loopback(0), &bound);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "keytab")) << s.ToString();
  m->Shutdown();
}

// The pages' Kerberos login (set_http_spnego, Kudu's
// --webserver_require_spnego), with curl --negotiate as an operator would
// use it. The attacker: anyone who reaches the pages' address without a
// ticket of the realm, and reads every client's user, address and calls.
TEST_F(KerberosTest, PagesNeedAKerberosLoginWhenAskedAndHealthzStaysOpen) {
  TestServer server;
  MessengerBuilder b("pages");
  b.set_http_endpoints(true).set_http_spnego(true, "HTTP/127.0.0.1", kdc_->Path("http.keytab"));
  Status s = server.Start(1, ServicePoolOptions(), b);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string url = "http://" + server.address.ToString();
  const std::string curl = "curl -sS --max-time 10 -D - ";
  int rc = 0;

  // No login: 401, asking for one, and saying how.
  std::string out = rpc_test::RunShell(curl + url + "/connections", &rc);
  EXPECT_EQ(0, rc) << out;
  EXPECT_TRUE(Contains(out, "HTTP/1.1 401 Unauthorized")) << out;
  EXPECT_TRUE(Contains(out, "WWW-Authenticate: Negotiate\r\n")) << out;
  EXPECT_TRUE(Contains(out, "need a Kerberos login")) << out;
  EXPECT_FALSE(Contains(out, "\"peer\"")) << out;
  // /healthz answers load balancers without one.
  out = rpc_test::RunShell(curl + url + "/healthz", &rc);
  EXPECT_TRUE(Contains(out, "HTTP/1.1 200 OK")) << out;

  // alice's ticket (SetUp's kinit): the page, and the server's own token
  // back (Kerberos's mutual authentication).
  out = rpc_test::RunShell(curl + "--negotiate -u : " + url + "/metrics", &rc);
  EXPECT_EQ(0, rc) << out;
  EXPECT_TRUE(Contains(out, "HTTP/1.1 200 OK")) << out;
  EXPECT_TRUE(Contains(out, "WWW-Authenticate: Negotiate ")) << out;
  EXPECT_TRUE(Contains(out, "osprey_")) << out;

  // A token that is not a ticket: Kerberos's reason.
  out = rpc_test::RunShell(curl + "-H 'Authorization: Negotiate YWJjZA==' " + url + "/rpcz", &rc);
  EXPECT_TRUE(Contains(out, "HTTP/1.1 401 Unauthorized")) << out;
  EXPECT_TRUE(Contains(out, "Kerberos login (Negotiate): ")) << out;
  // Another scheme: refused, not read as a login.
  out = rpc_test::RunShell(curl + "-u alice:secret " + url + "/rpcz", &rc);
  EXPECT_TRUE(Contains(out, "HTTP/1.1 401 Unauthorized")) << out;
  EXPECT_TRUE(Contains(out, "not 'Negotiate <token>'")) << out;

  // No ticket at all: curl --negotiate has nothing to send.
  ASSERT_TRUE(kdc_->Kdestroy().ok());
  out = rpc_test::RunShell(curl + "--negotiate -u : " + url + "/metrics", &rc);
  EXPECT_TRUE(Contains(out, "HTTP/1.1 401 Unauthorized")) << out;
  EXPECT_FALSE(Contains(out, "osprey_")) << out;
}

// set_http_readers: alice reads the pages; bob, whose login is as good,
// gets 403 naming him; /healthz stays open.
TEST_F(KerberosTest, OnlyTheListedUsersReadThePagesAndOthersAreToldWhy) {
  TestServer server;
  MessengerBuilder b("pages");
  b.set_http_endpoints(true)
      .set_http_spnego(true, "HTTP/127.0.0.1", kdc_->Path("http.keytab"))
      .set_http_readers({"alice"});
  Status s = server.Start(1, ServicePoolOptions(), b);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string url = "http://" + server.address.ToString();
  const std::string curl = "curl -sS --max-time 10 -D - --negotiate -u : ";
  int rc = 0;
  std::string out = rpc_test::RunShell(curl + url + "/metrics", &rc);
  EXPECT_EQ(0, rc) << out;
  EXPECT_TRUE(Contains(out, "HTTP/1.1 200 OK")) << out;
  EXPECT_TRUE(Contains(out, "osprey_")) << out;

  ASSERT_TRUE(kdc_->Kinit("bob/admin", "bob.keytab").ok());
  out = rpc_test::RunShell(curl + url + "/metrics", &rc);
  EXPECT_EQ(0, rc) << out;
  EXPECT_TRUE(Contains(out, "HTTP/1.1 403 Forbidden")) << out;
  EXPECT_TRUE(Contains(out, "user 'bob' (Kerberos principal bob/admin@")) << out;
  EXPECT_TRUE(Contains(out, "they are for alice")) << out;
  EXPECT_FALSE(Contains(out, "osprey_")) << out;
  out = rpc_test::RunShell(curl + url + "/healthz", &rc);
  EXPECT_TRUE(Contains(out, "HTTP/1.1 200 OK")) << out;
}

TEST_F(KerberosTest, APagesLoginThatCannotWorkFailsAtBuild) {
  std::shared_ptr<Messenger> m;
  Status s = MessengerBuilder("x")
                 .set_http_spnego(true, "HTTP/127.0.0.1", kdc_->Path("http.keytab"))
                 .Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "set_http_endpoints(true)")) << s.ToString();
  s = MessengerBuilder("x").set_http_endpoints(true).set_http_spnego(true).Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "no keytab for HTTP/_HOST")) << s.ToString();
  s = MessengerBuilder("x")
          .set_http_endpoints(true)
          .set_http_spnego(true, "HTTP/db-9.example.com", kdc_->Path("http.keytab"))
          .Build(&m);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "set_http_spnego")) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "HTTP/db-9.example.com")) << s.ToString();
  // Readers need a login to know who reads, and names, not principals.
  s = MessengerBuilder("x").set_http_endpoints(true).set_http_readers({"alice"}).Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "no login to tell who reads them")) << s.ToString();
  s = MessengerBuilder("x")
          .set_http_endpoints(true)
          .set_http_spnego(true, "HTTP/127.0.0.1", kdc_->Path("http.keytab"))
          .set_http_readers({"alice@EXAMPLE.COM"})
          .Build(&m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "'alice@EXAMPLE.COM' is not a user name")) << s.ToString();
}

// The negotiators on their own, with the real KDC: what no honest client
// sends.
class KerberosNegotiatorTest : public KerberosTest {
 protected:
  void MakeNegotiators() {
    ASSERT_TRUE(KerberosCredentials::ForServer(kdc_->Path("server.keytab"), kServerPrincipal,
                                               &server_creds_)
                    .ok());
    ClientAuthPolicy ca;
    ca.mode = RpcAuthentication::kRequired;
    ca.service_name = "osprey";
    ca.host = "127.0.0.1";
    client_ = std::make_unique<ClientNegotiator>("alice", TlsFeatures(), false, nullptr, ca);
    server_ = NewServer();
  }
  std::unique_ptr<ServerNegotiator> NewServer() {
    ServerAuthPolicy sa;
    sa.mode = RpcAuthentication::kRequired;
    sa.kerberos = server_creds_;
    return std::make_unique<ServerNegotiator>(ServerTlsPolicy(), nullptr, sa);
  }
  // Runs the exchange in memory; the client's messages land in *sent.
  Status Exchange(std::vector<NegotiatePB>* sent) {
    std::vector<NegotiatePB> to_server = {client_->Start()};
    while (!to_server.empty()) {
      NegotiationSteps server_steps;
      for (const NegotiatePB& m : to_server) {
        sent->push_back(m);
        OSPREY_RETURN_NOT_OK(server_->Handle(m, &server_steps));
      }
      to_server.clear();
      for (const NegotiatePB& m : server_steps.send) {
        NegotiationSteps client_steps;
        OSPREY_RETURN_NOT_OK(client_->Handle(m, &client_steps));
        OSPREY_RETURN_NOT_OK(StartKerberosInline(client_.get(), &client_steps));
        for (auto& c : client_steps.send) to_server.push_back(c);
      }
    }
    return Status::OK();
  }
  std::shared_ptr<const KerberosCredentials> server_creds_;
  std::unique_ptr<ClientNegotiator> client_;
  std::unique_ptr<ServerNegotiator> server_;
};

TEST_F(KerberosNegotiatorTest, AReplayedTokenIsRefused) {
  MakeNegotiators();
  std::vector<NegotiatePB> sent;
  Status s = Exchange(&sent);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("alice" + kRealmSuffix, server_->identity().principal);
  // Someone who recorded the client's first message sends it to the
  // server again, on a new connection.
  ASSERT_GE(sent.size(), 2u);
  auto replayed_to = NewServer();
  NegotiationSteps steps;
  s = replayed_to->Handle(sent[0], &steps);  // NEGOTIATE
  ASSERT_TRUE(s.ok()) << s.ToString();
  steps = NegotiationSteps();
  s = replayed_to->Handle(sent[1], &steps);  // SASL_INITIATE with the AP-REQ
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "replay")) << s.ToString();
}

TEST_F(KerberosNegotiatorTest, TheConnectionContextMustReturnTheNonce) {
  MakeNegotiators();
  std::vector<NegotiatePB> sent;
  ASSERT_TRUE(Exchange(&sent).ok());
  wire::ConnectionContextPB good;
  ASSERT_TRUE(client_->ConnectionContext(&good).ok());
  EXPECT_TRUE(good.has_encoded_nonce());
  // Without it, or with bytes that are not the wrapped nonce: refused.
  wire::ConnectionContextPB none = good;
  none.clear_encoded_nonce();
  Status s = server_->CheckConnectionContext(none);
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  wire::ConnectionContextPB forged = good;
  forged.set_encoded_nonce(
      std::string("\0\0\0\x04"
                  "abcd",
                  8));
  s = server_->CheckConnectionContext(forged);
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  s = server_->CheckConnectionContext(good);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A man in the middle with a certificate of its own terminates the client's
// TLS, opens its own TLS to the server, and relays the Kerberos exchange
// unchanged. Kerberos alone cannot tell; the channel bindings can: the
// server sends the hash of its certificate, wrapped, and the client saw
// another.
TEST_F(KerberosNegotiatorTest, AManInTheMiddleOfTlsIsCaughtByTheChannelBindings) {
  std::unique_ptr<transport::TlsContext> client_tls, server_tls, mitm_server_tls, mitm_client_tls;
  ASSERT_TRUE(transport::TlsContext::CreateClient({}, &client_tls).ok());
  ASSERT_TRUE(transport::TlsContext::CreateServer({}, &server_tls).ok());
  ASSERT_TRUE(transport::TlsContext::CreateServer({}, &mitm_server_tls).ok());
  ASSERT_TRUE(transport::TlsContext::CreateClient({}, &mitm_client_tls).ok());
  ASSERT_TRUE(
      KerberosCredentials::ForServer(kdc_->Path("server.keytab"), kServerPrincipal, &server_creds_)
          .ok());
  ClientAuthPolicy ca;
  ca.mode = RpcAuthentication::kRequired;
  ca.service_name = "osprey";
  ca.host = "127.0.0.1";
  ServerTlsPolicy tls_policy{true, false, false};
  ServerAuthPolicy sa;
  sa.mode = RpcAuthentication::kRequired;
  sa.kerberos = server_creds_;
  ClientNegotiator client("alice", TlsFeatures{true, false}, true, client_tls.get(), ca);
  ServerNegotiator server(tls_policy, server_tls.get(), sa);
  // The middle: a TLS server to the client, a TLS client to the server.
  ServerNegotiator mitm_to_client(tls_policy, mitm_server_tls.get(), sa);
  ClientNegotiator mitm_to_server("mallory", TlsFeatures{true, false}, true, mitm_client_tls.get(),
                                  ca);

  NegotiatePB hello = client.Start();
  NegotiationSteps s_steps, m_steps, c_steps;
  ASSERT_TRUE(server.Handle(hello, &s_steps).ok());
  ASSERT_TRUE(mitm_to_client.Handle(hello, &m_steps).ok());
  ASSERT_EQ(1u, s_steps.send.size());
  NegotiatePB server_negotiate = s_steps.send[0];
  // The client's handshake, with the middle; it then starts Kerberos.
  ASSERT_TRUE(client.Handle(m_steps.send[0], &c_steps).ok());
  std::vector<NegotiatePB> sasl_from_client;
  while (!c_steps.tls_handshake_done) {
    NegotiationSteps m, c;
    for (const NegotiatePB& msg : c_steps.send) ASSERT_TRUE(mitm_to_client.Handle(msg, &m).ok());
    for (const NegotiatePB& msg : m.send) ASSERT_TRUE(client.Handle(msg, &c).ok());
    ASSERT_TRUE(StartKerberosInline(&client, &c).ok());
    c_steps = c;
  }
  for (const NegotiatePB& msg : c_steps.send) {
    if (msg.step() == NegotiatePB::TLS_HANDSHAKE) {
      NegotiationSteps m;
      ASSERT_TRUE(mitm_to_client.Handle(msg, &m).ok());
    } else {
      sasl_from_client.push_back(msg);
    }
  }
  // The middle's handshake with the server.
  NegotiationSteps mc;
  ASSERT_TRUE(mitm_to_server.Handle(server_negotiate, &mc).ok());
  while (true) {
    NegotiationSteps sv, next;
    bool sent_tls = false;
    for (const NegotiatePB& msg : mc.send) {
      if (msg.step() != NegotiatePB::TLS_HANDSHAKE) continue;  // its own SASL: dropped
      sent_tls = true;
      ASSERT_TRUE(server.Handle(msg, &sv).ok());
    }
    if (!sent_tls) break;
    for (const NegotiatePB& msg : sv.send) ASSERT_TRUE(mitm_to_server.Handle(msg, &next).ok());
    mc = next;
  }
  // Now the Kerberos exchange, relayed unchanged between client and server.
  ASSERT_FALSE(sasl_from_client.empty());
  Status verdict;
  std::vector<NegotiatePB> to_server = sasl_from_client;
  while (!to_server.empty() && verdict.ok()) {
    NegotiationSteps sv;
    for (const NegotiatePB& msg : to_server) ASSERT_TRUE(server.Handle(msg, &sv).ok());
    to_server.clear();
    for (const NegotiatePB& msg : sv.send) {
      NegotiationSteps c;
      verdict = client.Handle(msg, &c);
      if (verdict.ok()) verdict = StartKerberosInline(&client, &c);
      if (!verdict.ok()) break;
      for (auto& m : c.send) to_server.push_back(m);
    }
  }
  ASSERT_FALSE(verdict.ok()) << "the client accepted a server seen through someone else's TLS";
  EXPECT_TRUE(verdict.IsNotAuthorized()) << verdict.ToString();
  EXPECT_TRUE(Contains(verdict.ToString(), "channel bindings do not match")) << verdict.ToString();
}

}  // namespace
}  // namespace osprey
