// Token authentication (KRPC's TOKEN_EXCHANGE) with Kudu's tokens: a
// SignedTokenPB over a TokenPB, RSA-SHA256 by a token-signing key, as a
// Kudu master issues them. The verifier on its own with an injected clock,
// then end to end over TLS.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "forging_relay.h"
#include "osprey/rpc/kudu_token_verifier.h"
#include "osprey/transport/negotiator.h"
#include "osprey/transport/tls_context.h"
#include "osprey/wire/kudu_token.pb.h"
#include "rpc_test_util.h"

namespace osprey {
namespace {

using rpc_test::CalculatorServiceProxy;
using rpc_test::TestServer;
using rpc_test::WhoAmIRequestPB;
using rpc_test::WhoAmIResponsePB;

constexpr int64_t kNow = 1'800'000'000;  // the injected clock's "now"

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A token-signing key pair, as a Kudu master has.
struct SigningKey {
  EVP_PKEY* pkey = EVP_RSA_gen(2048);
  ~SigningKey() { EVP_PKEY_free(pkey); }
  std::string PublicDer() const {
    unsigned char* der = nullptr;
    int n = i2d_PUBKEY(pkey, &der);
    std::string out(reinterpret_cast<char*>(der), n > 0 ? static_cast<size_t>(n) : 0);
    OPENSSL_free(der);
    return out;
  }
  std::string Sign(const std::string& data) const {
    EVP_MD_CTX* md = EVP_MD_CTX_new();
    size_t len = 0;
    EXPECT_EQ(1, EVP_DigestSignInit(md, nullptr, EVP_sha256(), nullptr, pkey));
    EXPECT_EQ(1, EVP_DigestSign(md, nullptr, &len,
                                reinterpret_cast<const unsigned char*>(data.data()), data.size()));
    std::string sig(len, '\0');
    EXPECT_EQ(1, EVP_DigestSign(md, reinterpret_cast<unsigned char*>(sig.data()), &len,
                                reinterpret_cast<const unsigned char*>(data.data()), data.size()));
    sig.resize(len);
    EVP_MD_CTX_free(md);
    return sig;
  }
};

std::string MakeToken(const SigningKey& key, int64_t seq, const std::string& user, int64_t expires,
                      bool incompatible = false) {
  wire::TokenPB t;
  t.set_expire_unix_epoch_seconds(expires);
  if (!user.empty()) t.mutable_authn()->set_username(user);
  if (incompatible) t.add_incompatible_features(7);
  wire::SignedTokenPB signed_token;
  signed_token.set_token_data(t.SerializeAsString());
  signed_token.set_signature(key.Sign(signed_token.token_data()));
  signed_token.set_signing_key_seq_num(seq);
  return signed_token.SerializeAsString();
}

class KuduTokenVerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(key_.pkey, nullptr);
    ASSERT_TRUE(verifier_.AddPublicKey(1, key_.PublicDer(), kNow + 3600).ok());
  }
  int64_t now_ = kNow;
  SigningKey key_;
  KuduTokenVerifier verifier_{[this] { return now_; }};
};

TEST_F(KuduTokenVerifierTest, AGoodTokenNamesItsUser) {
  std::string user;
  Status s = verifier_.Verify(MakeToken(key_, 1, "alice", kNow + 60), &user);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("alice", user);
}

TEST_F(KuduTokenVerifierTest, EveryBadTokenIsRefusedSayingWhy) {
  std::string user;
  auto refused = [&](const std::string& token, const std::string& why) {
    Status s = verifier_.Verify(token, &user);
    EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), why)) << s.ToString();
  };
  refused(MakeToken(key_, 1, "alice", kNow - 1), "expired");
  refused(MakeToken(key_, 2, "alice", kNow + 60), "unknown key 2");
  std::string forged = MakeToken(key_, 1, "alice", kNow + 60);
  wire::SignedTokenPB pb;
  ASSERT_TRUE(pb.ParseFromString(forged));
  wire::TokenPB t;
  ASSERT_TRUE(t.ParseFromString(pb.token_data()));
  t.mutable_authn()->set_username("root");  // the signature was over "alice"
  pb.set_token_data(t.SerializeAsString());
  refused(pb.SerializeAsString(), "signature does not verify");
  SigningKey other;
  refused(MakeToken(other, 1, "alice", kNow + 60), "signature does not verify");
  refused(MakeToken(key_, 1, "alice", kNow + 60, /*incompatible=*/true), "features");
  refused(MakeToken(key_, 1, "", kNow + 60), "not an authentication token");
  refused("not a protobuf at all \xff\xff", "not a signed Kudu token");
  refused("", "not a signed Kudu token");
}

TEST_F(KuduTokenVerifierTest, KeysExpireByTheInjectedClock) {
  std::string token = MakeToken(key_, 1, "alice", kNow + 7200);
  std::string user;
  ASSERT_TRUE(verifier_.Verify(token, &user).ok());
  now_ = kNow + 3600;  // the key's expiry
  Status s = verifier_.Verify(token, &user);
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "has expired")) << s.ToString();
  // Adding a key drops the expired ones.
  SigningKey next;
  ASSERT_TRUE(verifier_.AddPublicKey(2, next.PublicDer(), now_ + 3600).ok());
  EXPECT_EQ(1u, verifier_.num_keys());
  // Keys that cannot be used are refused.
  s = verifier_.AddPublicKey(3, "garbage", now_ + 3600);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = verifier_.AddPublicKey(4, next.PublicDer(), now_ - 1);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST(TokenNegotiationTest, ATokenIsOfferedOnlyToAServerTheClientVerifies) {
  transport::ClientAuthPolicy auth;
  auth.token = "a-token";
  auth.verifies_server = false;
  transport::ClientNegotiator unverified("u", {true, false}, true, nullptr, auth);
  wire::NegotiatePB first = unverified.Start();
  for (const auto& t : first.authn_types()) EXPECT_FALSE(t.has_token());
  auth.verifies_server = true;
  transport::ClientNegotiator verified("u", {true, false}, true, nullptr, auth);
  wire::NegotiatePB second = verified.Start();
  bool offered = false;
  for (const auto& t : second.authn_types()) offered |= t.has_token();
  EXPECT_TRUE(offered);
}

// End to end: the server has a CA-signed certificate and a verifier; the
// client verifies the server and presents a token, and has no certificate.
class TokenAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("osprey-token-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::string cert, key;
    ASSERT_TRUE(transport::TlsContext::MakeSelfSigned("server", &cert, &key, "IP:127.0.0.1").ok());
    cert_ = (dir_ / "server.crt").string();
    key_file_ = (dir_ / "server.key").string();
    std::ofstream(cert_) << cert;
    std::ofstream(key_file_) << key;
    MakeVerifier();
    ASSERT_NE(verifier_, nullptr);
    MessengerBuilder b("token-server");
    b.set_rpc_encryption(RpcEncryption::kRequired)
        .set_tls_certificate_files(cert_, key_file_)
        .set_tls_ca_file(cert_)
        .set_token_verifier(verifier_);
    Status started = server_.Start(1, ServicePoolOptions(), b);
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  virtual void MakeVerifier() {
    verifier_ = std::make_shared<KuduTokenVerifier>([] { return kNow; });
    ASSERT_TRUE(verifier_->AddPublicKey(5, signing_.PublicDer(), kNow + 3600).ok());
  }

  Status WhoAmI(const std::string& token, WhoAmIResponsePB* who) {
    return WhoAmIAt(server_.address, token, who);
  }
  Status WhoAmIAt(const Sockaddr& addr, const std::string& token, WhoAmIResponsePB* who,
                  bool encrypt_loopback = false) {
    std::shared_ptr<Messenger> client;
    OSPREY_RETURN_NOT_OK(MessengerBuilder("token-client")
                             .set_rpc_encryption(RpcEncryption::kRequired)
                             .set_rpc_encrypt_loopback(encrypt_loopback)
                             .set_tls_ca_file(cert_)
                             .set_authn_token(token)
                             .Build(&client));
    CalculatorServiceProxy proxy(client, addr);
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    Status s = proxy.WhoAmI(WhoAmIRequestPB(), who, &ctl);
    client->Shutdown();
    return s;
  }

  std::filesystem::path dir_;
  std::string cert_, key_file_;
  SigningKey signing_;
  std::shared_ptr<KuduTokenVerifier> verifier_;
  TestServer server_;
};

TEST_F(TokenAuthTest, AKuduTokenAuthenticatesTheClient) {
  WhoAmIResponsePB who;
  Status s = WhoAmI(MakeToken(signing_, 5, "bob", kNow + 60), &who);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("TOKEN", who.authentication());
  EXPECT_EQ("bob", who.user());
}

TEST_F(TokenAuthTest, AnExpiredTokenIsRefusedAndTheServerServesOthers) {
  WhoAmIResponsePB who;
  Status s = WhoAmI(MakeToken(signing_, 5, "bob", kNow - 60), &who);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "authentication token: expired")) << s.ToString();
  s = WhoAmI(MakeToken(signing_, 5, "carol", kNow + 60), &who);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("carol", who.user());
}

// Issue 40, finding 1 for tokens: a man in the middle relays the handshake
// (the client verifies the real server, so it sends its token), then forges
// the server's TOKEN_EXCHANGE answer and a WhoAmI result in the clear. The
// client must refuse them.
TEST_F(TokenAuthTest, AForgedClearTokenExchangeAfterTheHandshakeIsRefused) {
  wire::NegotiatePB exchange;
  exchange.set_step(wire::NegotiatePB::TOKEN_EXCHANGE);
  std::string forged = rpc_test::ForgedFrame(-33, exchange);
  WhoAmIResponsePB root;
  root.set_user("root");
  root.set_address("forged");
  for (int32_t id = 0; id < 4; ++id) forged += rpc_test::ForgedFrame(id, root);
  // Encrypted on loopback too: authentication-only TLS leaves the calls in
  // the clear by design, for anyone on the host to read and write.
  TestServer encrypted;
  ASSERT_TRUE(encrypted
                  .Start(1, ServicePoolOptions(),
                         MessengerBuilder("token-server")
                             .set_rpc_encryption(RpcEncryption::kRequired)
                             .set_rpc_encrypt_loopback(true)
                             .set_tls_certificate_files(cert_, key_file_)
                             .set_tls_ca_file(cert_)
                             .set_token_verifier(verifier_))
                  .ok());
  rpc_test::ForgingRelay relay(encrypted.address, forged);
  Sockaddr addr;
  ASSERT_TRUE(relay.Start(&addr).ok());
  WhoAmIResponsePB who;
  Status s = WhoAmIAt(addr, MakeToken(signing_, 5, "bob", kNow + 60), &who,
                      /*encrypt_loopback=*/true);
  EXPECT_TRUE(relay.injected());
  EXPECT_FALSE(s.ok()) << "a forged answer was taken: user " << who.user();
  EXPECT_NE("root", who.user());
  EXPECT_TRUE(Contains(s.message(), "clear bytes after the TLS handshake")) << s.ToString();
}

// Issue 47, finding 2 for tokens: on loopback a relay adds
// TLS_AUTHENTICATION_ONLY to the server's clear NEGOTIATE answer. The
// client (loopback not encrypted, Kudu's default) must still send its
// token inside the TLS records: never in the clear, for the relay to read.
TEST_F(TokenAuthTest, ATokenNeverLeavesTheRecordsWhenARelayListsAuthenticationOnly) {
  wire::NegotiatePB exchange;
  exchange.set_step(wire::NegotiatePB::TOKEN_EXCHANGE);
  WhoAmIResponsePB root;
  root.set_user("root");
  root.set_address("forged");
  std::string forged = rpc_test::ForgedFrame(-33, exchange);
  for (int32_t id = 0; id < 4; ++id) forged += rpc_test::ForgedFrame(id, root);
  TestServer encrypted;
  ASSERT_TRUE(encrypted
                  .Start(1, ServicePoolOptions(),
                         MessengerBuilder("token-server")
                             .set_rpc_encryption(RpcEncryption::kRequired)
                             .set_rpc_encrypt_loopback(true)
                             .set_tls_certificate_files(cert_, key_file_)
                             .set_tls_ca_file(cert_)
                             .set_token_verifier(verifier_))
                  .ok());
  rpc_test::DowngradingRelay relay(encrypted.address, forged);
  Sockaddr addr;
  ASSERT_TRUE(relay.Start(&addr).ok());
  const std::string token = MakeToken(signing_, 5, "bob", kNow + 60);
  WhoAmIResponsePB who;
  Status s = WhoAmIAt(addr, token, &who, /*encrypt_loopback=*/false);
  EXPECT_TRUE(relay.rewrote());
  EXPECT_FALSE(relay.downgraded()) << "the token went out in the clear";
  EXPECT_FALSE(Contains(relay.clear_after_handshake(), token));
  EXPECT_NE("root", who.user());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("bob", who.user());
}

// Tokens Apache Kudu's own TokenSigner issued (the class a Kudu master
// issues them with), and its public keys: scripts/kudu-interop.sh builds
// scripts/kudu-token-issuer.cc against a Kudu peer and gives the folder it
// wrote in OSPREY_KUDU_TOKEN_DIR, and the user in OSPREY_KUDU_TOKEN_USER.
// The verifier runs on the system clock, as Kudu's tokens carry real times.
class KuduIssuedTokenTest : public TokenAuthTest {
 protected:
  void SetUp() override {
    const char* dir = getenv("OSPREY_KUDU_TOKEN_DIR");
    const char* user = getenv("OSPREY_KUDU_TOKEN_USER");
    if (dir == nullptr || user == nullptr) {
      GTEST_SKIP() << "no OSPREY_KUDU_TOKEN_DIR and OSPREY_KUDU_TOKEN_USER: tokens from Kudu's "
                      "own TokenSigner come from scripts/kudu-interop.sh with a Kudu peer";
    }
    kudu_dir_ = dir;
    user_ = user;
    std::ifstream in(kudu_dir_ / "token", std::ios::binary);
    token_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_FALSE(token_.empty()) << "no token in " << kudu_dir_;
    TokenAuthTest::SetUp();
  }
  void MakeVerifier() override {
    verifier_ = std::make_shared<KuduTokenVerifier>();
    std::ifstream index(kudu_dir_ / "keys");
    int64_t seq, expires;
    while (index >> seq >> expires) {
      std::ifstream der_in(kudu_dir_ / ("key-" + std::to_string(seq) + ".der"), std::ios::binary);
      std::string der((std::istreambuf_iterator<char>(der_in)), std::istreambuf_iterator<char>());
      Status s = verifier_->AddPublicKey(seq, der, expires);
      ASSERT_TRUE(s.ok()) << "Kudu's key " << seq << ": " << s.ToString();
    }
    ASSERT_GT(verifier_->num_keys(), 0u) << "no keys in " << kudu_dir_;
  }
  std::filesystem::path kudu_dir_;
  std::string user_, token_;
};

TEST_F(KuduIssuedTokenTest, ATokenKudusSignerIssuedAuthenticatesItsUser) {
  WhoAmIResponsePB who;
  Status s = WhoAmI(token_, &who);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("TOKEN", who.authentication());
  EXPECT_EQ(user_, who.user());
}

TEST_F(KuduIssuedTokenTest, AKudusTokenChangedByOneBitIsRefused) {
  wire::SignedTokenPB signed_token;
  ASSERT_TRUE(signed_token.ParseFromString(token_));
  std::string data = signed_token.token_data();
  ASSERT_FALSE(data.empty());
  data[data.size() - 1] ^= 1;
  signed_token.set_token_data(data);
  WhoAmIResponsePB who;
  Status s = WhoAmI(signed_token.SerializeAsString(), &who);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.ToString(), "authentication token")) << s.ToString();
  // The server goes on serving the real token.
  s = WhoAmI(token_, &who);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace osprey
