// TLS sessions over memory BIOs: the handshake as an exchange of tokens
// (as KRPC carries them in NegotiatePB), records both ways, verification
// against a CA, and garbage in place of records.
#include "osprey/transport/tls_context.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace osprey::transport {
namespace {

class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    char tmpl[] = "/tmp/osprey-tls-XXXXXX";
    int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
    std::ofstream(path_) << contents;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs the token exchange to its end; returns the first error.
Status Handshake(TlsSession* client, TlsSession* server) {
  std::string to_server, to_client;
  bool client_done = false, server_done = false;
  OSPREY_RETURN_NOT_OK(client->Handshake(Slice(), &to_server, &client_done));
  for (int round = 0; round < 10 && !(client_done && server_done); ++round) {
    to_client.clear();
    OSPREY_RETURN_NOT_OK(server->Handshake(to_server, &to_client, &server_done));
    to_server.clear();
    if (!to_client.empty() || !client_done) {
      OSPREY_RETURN_NOT_OK(client->Handshake(to_client, &to_server, &client_done));
    }
  }
  if (!(client_done && server_done)) return Status::IllegalState("handshake did not finish");
  return Status::OK();
}

struct Pair {
  std::unique_ptr<TlsContext> server_ctx, client_ctx;
  std::unique_ptr<TlsSession> server, client;
};

Pair MakePair(const TlsOptions& server_opts, const TlsOptions& client_opts) {
  Pair p;
  EXPECT_TRUE(TlsContext::CreateServer(server_opts, &p.server_ctx).ok());
  EXPECT_TRUE(TlsContext::CreateClient(client_opts, &p.client_ctx).ok());
  EXPECT_TRUE(p.server_ctx->NewSession(&p.server).ok());
  EXPECT_TRUE(p.client_ctx->NewSession(&p.client).ok());
  return p;
}

TEST(TlsContextTest, SelfSignedServerUnverifiedClientExchangesRecords) {
  Pair p = MakePair(TlsOptions(), TlsOptions());
  ASSERT_TRUE(Handshake(p.client.get(), p.server.get()).ok());
  std::string records, plain;
  std::string big(1 << 20, 'x');  // spans many records
  ASSERT_TRUE(p.client->Encrypt(big, &records).ok());
  EXPECT_EQ(std::string::npos, records.find(std::string(64, 'x')));  // it is encrypted
  // Fed a byte at a time for the first record, then the rest.
  for (size_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(p.server->Decrypt(Slice(records.data() + i, 1), &plain).ok());
  }
  ASSERT_TRUE(p.server->Decrypt(Slice(records.data() + 100, records.size() - 100), &plain).ok());
  EXPECT_TRUE(plain == big);

  records.clear();
  plain.clear();
  ASSERT_TRUE(p.server->Encrypt("pong", &records).ok());
  ASSERT_TRUE(p.client->Decrypt(records, &plain).ok());
  EXPECT_EQ("pong", plain);
}

// The shape of Kudu's TLS 1.3 exchange (tests/testdata/kudu-wire/tls):
// client token, server token, client token, then nothing more from the
// server, which is done once it has read the client's second token.
TEST(TlsContextTest, HandshakeIsThreeTokens) {
  Pair p = MakePair(TlsOptions(), TlsOptions());
  std::string c1, s1, c2, s2;
  bool client_done = false, server_done = false;
  ASSERT_TRUE(p.client->Handshake(Slice(), &c1, &client_done).ok());
  EXPECT_FALSE(c1.empty());
  EXPECT_FALSE(client_done);
  ASSERT_TRUE(p.server->Handshake(c1, &s1, &server_done).ok());
  EXPECT_FALSE(s1.empty());
  EXPECT_FALSE(server_done);
  ASSERT_TRUE(p.client->Handshake(s1, &c2, &client_done).ok());
  EXPECT_FALSE(c2.empty());
  EXPECT_TRUE(client_done);
  ASSERT_TRUE(p.server->Handshake(c2, &s2, &server_done).ok());
  EXPECT_TRUE(server_done);
  EXPECT_TRUE(s2.empty());
}

TEST(TlsContextTest, ClientVerifiesServerAgainstItsCa) {
  std::string cert, key;
  ASSERT_TRUE(TlsContext::MakeSelfSigned("server.test", &cert, &key).ok());
  TempFile cert_file(cert), key_file(key);
  TlsOptions server_opts;
  server_opts.cert_file = cert_file.path();
  server_opts.key_file = key_file.path();
  TlsOptions client_opts;
  client_opts.ca_file = cert_file.path();
  Pair p = MakePair(server_opts, client_opts);
  ASSERT_TRUE(Handshake(p.client.get(), p.server.get()).ok());
  EXPECT_NE(std::string::npos, p.client->PeerSubject().find("server.test"));
}

// Issue 40, finding 4: under rpc_authentication=required a certificate
// names its user by its UID only; a certificate with just a CN names none.
TEST(TlsContextTest, ACertificateWithoutUidNamesNoUserWhenTheUidIsRequired) {
  std::string server_cert, server_key, client_cert, client_key;
  ASSERT_TRUE(TlsContext::MakeSelfSigned("server.test", &server_cert, &server_key).ok());
  ASSERT_TRUE(TlsContext::MakeSelfSigned("client.test", &client_cert, &client_key).ok());
  TempFile sc(server_cert), sk(server_key), cc(client_cert), ck(client_key);
  TlsOptions server_opts;
  server_opts.cert_file = sc.path();
  server_opts.key_file = sk.path();
  server_opts.ca_file = cc.path();
  TlsOptions client_opts;
  client_opts.cert_file = cc.path();
  client_opts.key_file = ck.path();
  client_opts.ca_file = sc.path();
  client_opts.verify_server_host = false;
  Pair p = MakePair(server_opts, client_opts);
  ASSERT_TRUE(Handshake(p.client.get(), p.server.get()).ok());
  std::string user, principal;
  ASSERT_TRUE(p.server->PeerCertificateIdentity(&user, &principal, false).ok());
  EXPECT_EQ("client.test", user);
  user.clear();
  Status s = p.server->PeerCertificateIdentity(&user, &principal, true);
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("no user id (UID)")) << s.ToString();
  EXPECT_EQ("", user);
}

TEST(TlsContextTest, WrongCaFailsWithAClearError) {
  std::string cert, key, other_ca, other_key;
  ASSERT_TRUE(TlsContext::MakeSelfSigned("server.test", &cert, &key).ok());
  ASSERT_TRUE(TlsContext::MakeSelfSigned("someone-else", &other_ca, &other_key).ok());
  TempFile cert_file(cert), key_file(key), ca_file(other_ca);
  TlsOptions server_opts;
  server_opts.cert_file = cert_file.path();
  server_opts.key_file = key_file.path();
  TlsOptions client_opts;
  client_opts.ca_file = ca_file.path();
  Pair p = MakePair(server_opts, client_opts);
  Status s = Handshake(p.client.get(), p.server.get());
  ASSERT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("certificate verification failed")) << s.ToString();
}

TEST(TlsContextTest, GarbageInPlaceOfRecordsIsAnError) {
  Pair p = MakePair(TlsOptions(), TlsOptions());
  ASSERT_TRUE(Handshake(p.client.get(), p.server.get()).ok());
  std::string plain;
  Status s = p.server->Decrypt(std::string(64, '\x17'), &plain);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_TRUE(plain.empty());
}

TEST(TlsContextTest, GarbageHandshakeTokenIsRefused) {
  Pair p = MakePair(TlsOptions(), TlsOptions());
  std::string out;
  bool done = false;
  Status s = p.server->Handshake(std::string("GET / HTTP/1.1\r\n\r\n"), &out, &done);
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_FALSE(done);
}

TEST(TlsContextTest, BadFilesAreClearErrors) {
  std::unique_ptr<TlsContext> ctx;
  TlsOptions o;
  o.cert_file = "/nonexistent/cert.pem";
  Status s = TlsContext::CreateServer(o, &ctx);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();  // key missing
  o.key_file = "/nonexistent/key.pem";
  s = TlsContext::CreateServer(o, &ctx);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("/nonexistent/cert.pem"));
  TlsOptions c;
  c.ca_file = "/nonexistent/ca.pem";
  s = TlsContext::CreateClient(c, &ctx);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST(TlsContextTest, EncryptBeforeHandshakeIsRefused) {
  Pair p = MakePair(TlsOptions(), TlsOptions());
  std::string out;
  EXPECT_TRUE(p.client->Encrypt("x", &out).IsIllegalState());
}

}  // namespace
}  // namespace osprey::transport
