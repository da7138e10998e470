// The negotiation steps as pure functions: which TLS features each side
// lists and agrees on under each policy (wire-protocol.md section 5).
#include "osprey/transport/negotiation.h"

#include <gtest/gtest.h>

#include <vector>

namespace osprey::transport {
namespace {

using wire::NegotiatePB;

std::vector<int> Features(const NegotiatePB& pb) {
  return {pb.supported_features().begin(), pb.supported_features().end()};
}

TEST(NegotiationTest, ClientListsTlsFeaturesItOffers) {
  EXPECT_EQ(std::vector<int>{wire::APPLICATION_FEATURE_FLAGS},
            Features(ClientNegotiateRequest(TlsFeatures())));
  EXPECT_EQ((std::vector<int>{wire::APPLICATION_FEATURE_FLAGS, wire::TLS}),
            Features(ClientNegotiateRequest({.tls = true, .authentication_only = false})));
  EXPECT_EQ(
      (std::vector<int>{wire::APPLICATION_FEATURE_FLAGS, wire::TLS, wire::TLS_AUTHENTICATION_ONLY}),
      Features(ClientNegotiateRequest({.tls = true, .authentication_only = true})));
  // Authentication-only means nothing without TLS.
  EXPECT_EQ(std::vector<int>{wire::APPLICATION_FEATURE_FLAGS},
            Features(ClientNegotiateRequest({.tls = false, .authentication_only = true})));
}

struct ServerCase {
  TlsFeatures client;
  ServerTlsPolicy policy;
  bool ok;
  std::vector<int> listed;  // what the server's answer lists
  TlsFeatures agreed;
};

constexpr int kApp = wire::APPLICATION_FEATURE_FLAGS, kTls = wire::TLS,
              kAuthOnly = wire::TLS_AUTHENTICATION_ONLY;

TEST(NegotiationTest, ServerListsWhatItSupportsAndAgreesOnTheIntersection) {
  const ServerTlsPolicy none, optional{true, false, false}, required{true, true, false},
      optional_loopback{true, false, true};
  const std::vector<ServerCase> cases = {
      {{false, false}, none, true, {kApp}, {false, false}},
      {{true, true}, none, true, {kApp}, {false, false}},  // Kudu's client, server without TLS
      // A server with TLS lists it even to a client that did not.
      {{false, false}, optional, true, {kApp, kTls}, {false, false}},
      {{false, false}, optional_loopback, true, {kApp, kTls, kAuthOnly}, {false, false}},
      {{true, false}, optional, true, {kApp, kTls}, {true, false}},
      {{true, true}, optional, true, {kApp, kTls}, {true, false}},  // not loopback: encrypt
      {{true, true}, optional_loopback, true, {kApp, kTls, kAuthOnly}, {true, true}},
      // The client encrypts loopback: it lists TLS alone, so TLS is all.
      {{true, false}, optional_loopback, true, {kApp, kTls, kAuthOnly}, {true, false}},
      {{false, false}, required, false, {}, {}},
      {{true, false}, required, true, {kApp, kTls}, {true, false}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const ServerCase& c = cases[i];
    NegotiatePB answer;
    TlsFeatures agreed;
    Status s = ServerAnswerNegotiate(ClientNegotiateRequest(c.client), c.policy, &answer, &agreed);
    ASSERT_EQ(c.ok, s.ok()) << "case " << i << ": " << s.ToString();
    if (!s.ok()) {
      EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
      EXPECT_NE(std::string::npos, s.message().find("requires")) << s.ToString();
      continue;
    }
    EXPECT_EQ(c.agreed.tls, agreed.tls) << "case " << i;
    EXPECT_EQ(c.agreed.authentication_only, agreed.authentication_only) << "case " << i;
    EXPECT_EQ(c.listed, Features(answer)) << "case " << i;

    // The client reads the answer back to the same agreement.
    TlsFeatures client_agreed;
    s = ClientCheckNegotiate(answer, c.client, false, &client_agreed);
    ASSERT_TRUE(s.ok()) << "case " << i << ": " << s.ToString();
    EXPECT_EQ(agreed.tls, client_agreed.tls) << "case " << i;
    EXPECT_EQ(agreed.authentication_only, client_agreed.authentication_only) << "case " << i;
  }
}

// The server's answer as a Kudu server at its defaults sends it to every
// client: APPLICATION_FEATURE_FLAGS, TLS and TLS_AUTHENTICATION_ONLY.
NegotiatePB KuduServerNegotiate() {
  NegotiatePB answer;
  answer.set_step(NegotiatePB::NEGOTIATE);
  answer.add_supported_features(wire::APPLICATION_FEATURE_FLAGS);
  answer.add_supported_features(wire::TLS);
  answer.add_supported_features(wire::TLS_AUTHENTICATION_ONLY);
  answer.add_sasl_mechanisms()->set_mechanism("PLAIN");
  answer.add_authn_types()->mutable_sasl();
  return answer;
}

TEST(NegotiationTest, ClientIgnoresFeaturesOnlyTheServerLists) {
  NegotiatePB answer = KuduServerNegotiate();
  TlsFeatures agreed{true, true};
  // A client without TLS: in the clear.
  Status s = ClientCheckNegotiate(answer, TlsFeatures(), false, &agreed);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(agreed.tls);
  EXPECT_FALSE(agreed.authentication_only);
  // A client that encrypts loopback: TLS, fully encrypted.
  s = ClientCheckNegotiate(answer, {true, false}, true, &agreed);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(agreed.tls);
  EXPECT_FALSE(agreed.authentication_only);
  // A client at Kudu's loopback default: authentication only.
  s = ClientCheckNegotiate(answer, {true, true}, false, &agreed);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(agreed.tls);
  EXPECT_TRUE(agreed.authentication_only);
  // Authentication-only without TLS means nothing.
  answer.clear_supported_features();
  answer.add_supported_features(wire::TLS_AUTHENTICATION_ONLY);
  s = ClientCheckNegotiate(answer, {true, true}, false, &agreed);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(agreed.tls);
  EXPECT_FALSE(agreed.authentication_only);
  // Feature numbers this build does not know are ignored too.
  NegotiatePB with_unknown;
  ASSERT_TRUE(with_unknown.ParseFromString(KuduServerNegotiate().SerializeAsString() +
                                           std::string("\x08\x63", 2)));  // feature 99
  with_unknown.add_supported_features(wire::UNKNOWN);
  s = ClientCheckNegotiate(with_unknown, {true, true}, false, &agreed);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(agreed.tls);
  EXPECT_TRUE(agreed.authentication_only);
}

TEST(NegotiationTest, RequiredClientRefusesAServerWithoutTls) {
  NegotiatePB answer;
  TlsFeatures agreed;
  ASSERT_TRUE(ServerAnswerNegotiate(ClientNegotiateRequest({true, false}), ServerTlsPolicy(),
                                    &answer, &agreed)
                  .ok());
  Status s = ClientCheckNegotiate(answer, {true, false}, /*tls_required=*/true, &agreed);
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("server does not support TLS")) << s.ToString();
}

// Issue 40, finding 1, cell by cell: a clear frame after the client's
// switch to records ends the connection, whatever it is; only a server's
// error frame is reported as its refusal.
TEST(NegotiationTest, AClearFrameAfterTheTlsSwitchIsNeverAccepted) {
  wire::ErrorStatusPB err;
  err.set_code(wire::ErrorStatusPB::FATAL_UNAUTHORIZED);
  err.set_message("bad certificate");
  const std::string error_body = err.SerializeAsString();
  NegotiatePB success;
  success.set_step(NegotiatePB::SASL_SUCCESS);
  const std::string success_body = success.SerializeAsString();
  struct Cell {
    int32_t id;
    bool is_error;
    std::string body;
    bool refusal;  // reported as the server's refusal
  };
  for (const Cell& c : std::vector<Cell>{
           {-33, true, error_body, true},
           {-1, true, error_body, true},
           {-33, false, success_body, false},
           {-33, true, "\xff\xff not a protobuf", false},
           {0, false, "\x08\x01", false},
           {0, true, error_body, false},
           {-3, true, error_body, false},
       }) {
    Status s = ClientClearFrameAfterTls(c.id, c.is_error, Slice(c.body));
    ASSERT_FALSE(s.ok()) << c.id;
    if (c.refusal) {
      EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
      EXPECT_EQ("server rejected negotiation: bad certificate", s.message());
    } else {
      EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
      EXPECT_NE(std::string::npos, s.message().find("clear bytes after the TLS handshake"));
    }
  }
}

// `n` empty unknown fields (field 3, varint 0).
std::string EmptyUnknownFields(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += std::string("\x18\x00", 2);
  return out;
}

// A length-delimited field `tag` (one byte) holding `inside`.
std::string Nested(char tag, const std::string& inside) {
  std::string out(1, tag);
  for (uint32_t v = static_cast<uint32_t>(inside.size()); true; v >>= 7) {
    if (v < 0x80) {
      out.push_back(static_cast<char>(v));
      break;
    }
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  }
  return out + inside;
}

// Issue 47, finding 1: the 64 fields are counted at every depth, inside
// sasl_mechanisms and authn_types entries and unknown groups too, so that
// no NEGOTIATE parses into more than 64 fields' worth of objects.
TEST(NegotiationTest, ParseNegotiateCountsFieldsAtEveryDepth) {
  const std::string step("\x10\x01", 2);  // NEGOTIATE
  // step, the entry, its mechanism and `unknown` fields inside the entry.
  auto in_mechanism = [&](int unknown) {
    return step + Nested('\x22', "\x12\x05PLAIN" + EmptyUnknownFields(unknown));
  };
  // step, the entry, its sasl and `unknown` fields inside the sasl.
  auto in_authn_type = [&](int unknown) {
    return step + Nested('\x3a', Nested('\x0a', EmptyUnknownFields(unknown)));
  };
  // step, then an unknown group (field 20) of `unknown` fields.
  auto in_group = [&](int unknown) {
    return step + "\xa3\x01" + EmptyUnknownFields(unknown) + "\xa4\x01";
  };
  struct Cell {
    std::string body;
    bool ok;
  };
  for (const Cell& c : std::vector<Cell>{
           {in_mechanism(61), true},
           {in_mechanism(62), false},
           {in_mechanism(512'000), false},
           {in_authn_type(61), true},
           {in_authn_type(62), false},
           {in_group(62), true},
           {in_group(63), false},
       }) {
    NegotiatePB pb;
    Status s = ParseNegotiate(Slice(c.body), &pb);
    if (c.ok) {
      EXPECT_TRUE(s.ok()) << c.body.size() << " bytes: " << s.ToString();
      EXPECT_EQ(NegotiatePB::NEGOTIATE, pb.step());
    } else {
      EXPECT_TRUE(s.IsCorruption()) << c.body.size() << " bytes: " << s.ToString();
      EXPECT_NE(std::string::npos, s.message().find("more than 64 fields")) << s.ToString();
    }
  }
  // What real peers send parses as before; a packed list counts by its bytes.
  for (const NegotiatePB& real :
       {ClientNegotiateRequest({true, true}, {.certificate = true, .token = true}),
        ClientSaslInitiate("user"), ClientTokenExchange(std::string(4096, 't'))}) {
    NegotiatePB pb;
    ASSERT_TRUE(ParseNegotiate(Slice(real.SerializeAsString()), &pb).ok());
    EXPECT_EQ(real.SerializeAsString(), pb.SerializeAsString());
  }
  NegotiatePB pb;
  EXPECT_TRUE(ParseNegotiate(Slice(step + Nested('\x0a', std::string(62, '\x01'))), &pb).ok());
  EXPECT_FALSE(ParseNegotiate(Slice(step + Nested('\x0a', std::string(63, '\x01'))), &pb).ok());
  // A group never closed, or closed by another field's end, does not parse.
  EXPECT_TRUE(ParseNegotiate(Slice(step + "\xa3\x01\x18\x00"), &pb).IsCorruption());
  EXPECT_TRUE(ParseNegotiate(Slice(step + "\xa3\x01\xac\x01"), &pb).IsCorruption());
}

// The connection context, parsed after SASL PLAIN (which anyone passes), is
// counted the same way.
TEST(NegotiationTest, ParseConnectionContextCountsFieldsAtEveryDepth) {
  const std::string nonce("nonce");
  wire::ConnectionContextPB real = ClientConnectionContext("user", &nonce), ctx;
  ASSERT_TRUE(ParseConnectionContext(Slice(real.SerializeAsString()), &ctx).ok());
  EXPECT_EQ("user", ctx.deprecated_user_info().real_user());
  EXPECT_EQ("nonce", ctx.encoded_nonce());
  // user_info, its real_user and 62 unknown fields: 64.
  EXPECT_TRUE(
      ParseConnectionContext(Slice(Nested('\x12', "\x12\x01x" + EmptyUnknownFields(62))), &ctx)
          .ok());
  for (const std::string& body :
       {Nested('\x12', "\x12\x01x" + EmptyUnknownFields(63)),
        Nested('\x12', "\x12\x01x" + EmptyUnknownFields(512'000)), EmptyUnknownFields(65)}) {
    Status s = ParseConnectionContext(Slice(body), &ctx);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(std::string::npos, s.message().find("connection context has more than 64 fields"))
        << s.ToString();
  }
  EXPECT_TRUE(ParseConnectionContext(Slice("\xff\xff"), &ctx).IsCorruption());
}

}  // namespace
}  // namespace osprey::transport
