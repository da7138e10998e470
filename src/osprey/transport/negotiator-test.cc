// The two negotiators against each other, in memory: every message one
// sends is handed to the other, with real TLS handshake tokens. No socket:
// what is checked is the state machine (who says what, in which order,
// where the wire switches to records, who the server authenticated).
#include "osprey/transport/negotiator.h"

#include <gtest/gtest.h>

#include <deque>

namespace osprey::transport {
namespace {

using wire::NegotiatePB;

struct Side {
  Status status;
  bool done = false;
  bool handshake_done = false;
  // The step (NegotiatePB::NegotiateStep) of the first message sent as a
  // TLS record, or -1 if none was; kAfterLast if the switch came after the
  // last message.
  int first_record_step = -1;
  bool switched = false;
  std::vector<int> sent_steps;
};
constexpr int kAfterLast = 1000;

struct Outcome {
  Side client, server;
  TlsFeatures client_agreed, server_agreed;
  std::string user;
};

void Take(const NegotiationSteps& steps, Side* side, std::deque<NegotiatePB>* to_peer) {
  for (size_t i = 0; i < steps.send.size(); ++i) {
    if (static_cast<int>(i) == steps.records_from) {
      side->switched = true;
      side->first_record_step = steps.send[i].step();
    }
    side->sent_steps.push_back(steps.send[i].step());
    to_peer->push_back(steps.send[i]);
  }
  if (steps.records_from == static_cast<int>(steps.send.size())) {
    side->switched = true;
    side->first_record_step = kAfterLast;
  }
  side->done |= steps.done;
  side->handshake_done |= steps.tls_handshake_done;
}

Outcome Negotiate(TlsFeatures offer, bool client_required, ServerTlsPolicy policy,
                  ClientAuthPolicy auth = {}, ServerAuthPolicy server_auth = {}) {
  std::unique_ptr<TlsContext> server_tls, client_tls;
  EXPECT_TRUE(TlsContext::CreateServer(TlsOptions(), &server_tls).ok());
  EXPECT_TRUE(TlsContext::CreateClient(TlsOptions(), &client_tls).ok());
  ClientNegotiator client("alice", offer, client_required, offer.tls ? client_tls.get() : nullptr,
                          auth);
  ServerNegotiator server(policy, policy.available ? server_tls.get() : nullptr, server_auth);
  Outcome out;
  std::deque<NegotiatePB> to_server{client.Start()}, to_client;
  for (int round = 0; round < 20 && (!to_server.empty() || !to_client.empty()); ++round) {
    while (!to_server.empty() && out.server.status.ok()) {
      NegotiationSteps steps;
      out.server.status = server.Handle(to_server.front(), &steps);
      to_server.pop_front();
      Take(steps, &out.server, &to_client);
    }
    while (!to_client.empty() && out.client.status.ok() && out.server.status.ok()) {
      NegotiationSteps steps;
      out.client.status = client.Handle(to_client.front(), &steps);
      to_client.pop_front();
      Take(steps, &out.client, &to_server);
    }
    if (!out.client.status.ok() || !out.server.status.ok()) break;
  }
  out.client_agreed = client.agreed();
  out.server_agreed = server.agreed();
  out.user = server.user();
  if (out.client.handshake_done) {
    EXPECT_NE(nullptr, client.TakeTlsSession());
  }
  if (out.server.handshake_done) {
    EXPECT_NE(nullptr, server.TakeTlsSession());
  }
  return out;
}

const ServerTlsPolicy kNoTls{false, false, false};
const ServerTlsPolicy kOptional{true, false, false};
const ServerTlsPolicy kOptionalLoopback{true, false, true};
const ServerTlsPolicy kRequired{true, true, false};

TEST(NegotiatorTest, ClearNegotiationAuthenticatesTheUser) {
  Outcome o = Negotiate({false, false}, false, kNoTls);
  ASSERT_TRUE(o.client.status.ok()) << o.client.status.ToString();
  ASSERT_TRUE(o.server.status.ok()) << o.server.status.ToString();
  EXPECT_TRUE(o.client.done);
  EXPECT_TRUE(o.server.done);
  EXPECT_EQ("alice", o.user);
  EXPECT_FALSE(o.client_agreed.tls);
  EXPECT_FALSE(o.client.switched);
  EXPECT_FALSE(o.server.switched);
  EXPECT_EQ((std::vector<int>{NegotiatePB::SASL_INITIATE}), o.client.sent_steps);
  EXPECT_EQ((std::vector<int>{NegotiatePB::NEGOTIATE, NegotiatePB::SASL_SUCCESS}),
            o.server.sent_steps);
}

TEST(NegotiatorTest, EncryptedTlsSwitchesToRecordsRightAfterTheHandshake) {
  // A server with TLS, to a client without it: clear (the intersection).
  Outcome clear = Negotiate({false, false}, false, kOptionalLoopback);
  ASSERT_TRUE(clear.client.status.ok() && clear.server.status.ok());
  EXPECT_FALSE(clear.client.switched || clear.server.switched);

  Outcome o = Negotiate({true, false}, true, kOptionalLoopback);
  ASSERT_TRUE(o.client.status.ok()) << o.client.status.ToString();
  ASSERT_TRUE(o.server.status.ok()) << o.server.status.ToString();
  EXPECT_TRUE(o.client.done && o.server.done);
  EXPECT_TRUE(o.client_agreed.tls && o.server_agreed.tls);
  EXPECT_FALSE(o.client_agreed.authentication_only || o.server_agreed.authentication_only);
  EXPECT_TRUE(o.client.handshake_done && o.server.handshake_done);
  // The client's SASL_INITIATE is its first record; the server switches
  // once its handshake ends, so its SASL_SUCCESS is a record too.
  EXPECT_EQ(NegotiatePB::SASL_INITIATE, o.client.first_record_step);
  EXPECT_TRUE(o.server.switched);
  EXPECT_EQ("alice", o.user);
  // Handshake tokens travel in TLS_HANDSHAKE steps, the client's first.
  ASSERT_GE(o.client.sent_steps.size(), 2u);
  EXPECT_EQ(NegotiatePB::TLS_HANDSHAKE, o.client.sent_steps[0]);
}

TEST(NegotiatorTest, AuthenticationOnlyTlsNeverSwitches) {
  Outcome o = Negotiate({true, true}, false, kOptionalLoopback);
  ASSERT_TRUE(o.client.status.ok()) << o.client.status.ToString();
  ASSERT_TRUE(o.server.status.ok()) << o.server.status.ToString();
  EXPECT_TRUE(o.client_agreed.authentication_only && o.server_agreed.authentication_only);
  EXPECT_TRUE(o.client.handshake_done && o.server.handshake_done);
  EXPECT_FALSE(o.client.switched);
  EXPECT_FALSE(o.server.switched);
  EXPECT_TRUE(o.client.done && o.server.done);
}

// Issue 47, finding 2: a loopback client that requires encryption and can
// verify the server, or has a certificate, never lists authentication-only
// (a relay could list it for the server), so it encrypts even against a
// server that would allow it. With optional encryption Kudu's rule stands.
TEST(NegotiatorTest, AClientWithCredentialsRequiringEncryptionNeverOffersAuthenticationOnly) {
  ClientAuthPolicy verifies, presents, by_certificate;
  verifies.verifies_server = true;
  presents.presents_certificate = true;
  by_certificate.certificate = true;
  for (const ClientAuthPolicy& auth : {verifies, presents, by_certificate}) {
    ClientNegotiator client("alice", {true, true}, /*tls_required=*/true, nullptr, auth);
    EXPECT_FALSE(ListedTlsFeatures(client.Start()).authentication_only);
    EXPECT_TRUE(ListedTlsFeatures(client.Start()).tls);
    Outcome o = Negotiate({true, true}, true, kOptionalLoopback, auth);
    ASSERT_TRUE(o.client.status.ok()) << o.client.status.ToString();
    ASSERT_TRUE(o.server.status.ok()) << o.server.status.ToString();
    EXPECT_FALSE(o.client_agreed.authentication_only || o.server_agreed.authentication_only);
    EXPECT_EQ(NegotiatePB::SASL_INITIATE, o.client.first_record_step);
  }
  Outcome optional = Negotiate({true, true}, false, kOptionalLoopback, verifies);
  ASSERT_TRUE(optional.client.status.ok() && optional.server.status.ok());
  EXPECT_TRUE(optional.client_agreed.authentication_only);
  // A token never leaves the records, whatever the encryption setting.
  ClientAuthPolicy token;
  token.token = "signed token";
  token.verifies_server = true;
  for (bool required : {false, true}) {
    ClientNegotiator client("alice", {true, true}, required, nullptr, token);
    NegotiatePB start = client.Start();
    EXPECT_FALSE(ListedTlsFeatures(start).authentication_only);
    bool token_offered = false;
    for (const auto& t : start.authn_types()) token_offered |= t.has_token();
    EXPECT_TRUE(token_offered);
  }
}

TEST(NegotiatorTest, RequiredSidesRefuseAPeerWithoutTls) {
  Outcome by_server = Negotiate({false, false}, false, kRequired);
  EXPECT_TRUE(by_server.server.status.IsNotAuthorized()) << by_server.server.status.ToString();
  EXPECT_FALSE(by_server.client.done);
  Outcome by_client = Negotiate({true, false}, true, kNoTls);
  EXPECT_TRUE(by_client.client.status.IsNotAuthorized()) << by_client.client.status.ToString();
  EXPECT_FALSE(by_client.server.done);
  // Optional on both, not loopback: encrypted.
  Outcome o = Negotiate({true, false}, false, kOptional);
  ASSERT_TRUE(o.client.status.ok() && o.server.status.ok());
  EXPECT_TRUE(o.client.switched);
}

// Kudu's --trusted_subnets (KUDU-1875): a peer outside them needs TLS, and
// then more than SASL PLAIN. Each refusal answers the client's message
// after NEGOTIATE, as Kudu's server does; the connection sends it as
// FATAL_UNAUTHORIZED.
TEST(NegotiatorTest, AnUntrustedPeerIsRefusedWithoutTlsAndWithPlainOnly) {
  ServerAuthPolicy untrusted;
  untrusted.untrusted_peer = "203.0.113.5";
  Outcome clear = Negotiate({false, false}, false, kOptional, {}, untrusted);
  EXPECT_TRUE(clear.server.status.IsNotAuthorized()) << clear.server.status.ToString();
  EXPECT_NE(std::string::npos,
            clear.server.status.message().find("unencrypted connections from 203.0.113.5 are "
                                               "refused: it is outside this server's trusted "
                                               "subnets"))
      << clear.server.status.ToString();
  EXPECT_FALSE(clear.server.done);
  EXPECT_EQ((std::vector<int>{NegotiatePB::NEGOTIATE}), clear.server.sent_steps);
  EXPECT_EQ((std::vector<int>{NegotiatePB::SASL_INITIATE}), clear.client.sent_steps);

  Outcome plain = Negotiate({true, false}, false, kOptional, {}, untrusted);
  EXPECT_TRUE(plain.server.status.IsNotAuthorized()) << plain.server.status.ToString();
  EXPECT_NE(std::string::npos,
            plain.server.status.message().find("SASL PLAIN (a user name the client chose) from "
                                               "203.0.113.5 is refused"))
      << plain.server.status.ToString();
  EXPECT_TRUE(plain.server.handshake_done);  // TLS came first; PLAIN is what is refused
  EXPECT_FALSE(plain.server.done);
  EXPECT_TRUE(plain.user.empty());

  // The same two, trusted: let in.
  for (TlsFeatures offer : {TlsFeatures{false, false}, TlsFeatures{true, false}}) {
    Outcome o = Negotiate(offer, false, kOptional);
    ASSERT_TRUE(o.server.status.ok()) << o.server.status.ToString();
    EXPECT_TRUE(o.server.done);
    EXPECT_EQ("alice", o.user);
  }
}

TEST(NegotiatorTest, MessagesOutOfOrderAreErrors) {
  ServerNegotiator server(kNoTls, nullptr);
  NegotiationSteps steps;
  Status s = server.Handle(ClientSaslInitiate("alice"), &steps);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(steps.send.empty());

  ClientNegotiator client("alice", {false, false}, false, nullptr);
  NegotiatePB sasl_success;
  sasl_success.set_step(NegotiatePB::SASL_SUCCESS);
  s = client.Handle(sasl_success, &steps);  // before NEGOTIATE's answer
  EXPECT_FALSE(s.ok());

  // A whole clear negotiation, then one message too many, each side.
  ServerNegotiator done_server(kNoTls, nullptr);
  NegotiationSteps a, b;
  ASSERT_TRUE(done_server.Handle(ClientNegotiateRequest({false, false}), &a).ok());
  ASSERT_TRUE(done_server.Handle(ClientSaslInitiate("alice"), &a).ok());
  EXPECT_TRUE(a.done);
  EXPECT_FALSE(done_server.Handle(ClientSaslInitiate("mallory"), &b).ok());
  EXPECT_EQ("alice", done_server.user());
}

}  // namespace
}  // namespace osprey::transport
