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
  TlsFeatures agreed;
};

TEST(NegotiationTest, ServerAgreesOnWhatBothSidesAllow) {
  const ServerTlsPolicy none, optional{true, false, false}, required{true, true, false},
      optional_loopback{true, false, true};
  const std::vector<ServerCase> cases = {
      {{false, false}, none, true, {false, false}},
      {{true, true}, none, true, {false, false}},  // Kudu's client, server without TLS
      {{false, false}, optional, true, {false, false}},
      {{true, false}, optional, true, {true, false}},
      {{true, true}, optional, true, {true, false}},  // not loopback: encrypt
      {{true, true}, optional_loopback, true, {true, true}},
      {{true, false}, optional_loopback, true, {true, false}},
      {{false, false}, required, false, {}},
      {{true, false}, required, true, {true, false}},
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
    std::vector<int> want{wire::APPLICATION_FEATURE_FLAGS};
    if (c.agreed.tls) want.push_back(wire::TLS);
    if (c.agreed.authentication_only) want.push_back(wire::TLS_AUTHENTICATION_ONLY);
    EXPECT_EQ(want, Features(answer)) << "case " << i;

    // The client reads the answer back to the same agreement.
    TlsFeatures client_agreed;
    s = ClientCheckNegotiate(answer, c.client, false, &client_agreed);
    ASSERT_TRUE(s.ok()) << "case " << i << ": " << s.ToString();
    EXPECT_EQ(agreed.tls, client_agreed.tls) << "case " << i;
    EXPECT_EQ(agreed.authentication_only, client_agreed.authentication_only) << "case " << i;
  }
}

TEST(NegotiationTest, ClientRefusesWhatItDidNotAskFor) {
  NegotiatePB answer;
  TlsFeatures agreed;
  ServerTlsPolicy optional{true, false, false};
  ASSERT_TRUE(
      ServerAnswerNegotiate(ClientNegotiateRequest({true, false}), optional, &answer, &agreed)
          .ok());
  // A server that chooses TLS for a client that did not offer it.
  Status s = ClientCheckNegotiate(answer, TlsFeatures(), false, &agreed);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();

  // A required client and a server without TLS.
  ASSERT_TRUE(ServerAnswerNegotiate(ClientNegotiateRequest({true, false}), ServerTlsPolicy(),
                                    &answer, &agreed)
                  .ok());
  s = ClientCheckNegotiate(answer, {true, false}, /*tls_required=*/true, &agreed);
  EXPECT_TRUE(s.IsNotAuthorized()) << s.ToString();
  EXPECT_NE(std::string::npos, s.message().find("server does not support TLS")) << s.ToString();
}

}  // namespace
}  // namespace osprey::transport
