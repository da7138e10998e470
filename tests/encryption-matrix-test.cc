// Every pairing of an Osprey client and an Osprey server at each
// rpc_encryption setting (disabled, optional, required), with loopback
// encryption on and off on each side, over 127.0.0.1 and [::1]. Each
// outcome is asserted against Kudu's rules, written out here as a table of
// their own (wire-protocol.md section 5), not derived from the code under
// test:
//
// - A client lists TLS unless its encryption is disabled, and
//   TLS_AUTHENTICATION_ONLY too on loopback unless it encrypts loopback.
// - A server lists TLS unless its encryption is disabled, and
//   TLS_AUTHENTICATION_ONLY on the same terms, whatever the client listed.
// - A required side refuses a peer that does not list TLS.
// - Otherwise TLS runs when both list TLS; it only authenticates when both
//   also list TLS_AUTHENTICATION_ONLY, and encrypts everything if not.
//
// Each outcome is checked three ways: the call's status, what both
// messengers say they negotiated (DumpConnections), and the bytes a
// recording proxy saw: the NEGOTIATE lists each side sent, whether a
// TLS_HANDSHAKE step ran, and whether the payload crossed in the clear.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "osprey/rpc/messenger.h"
#include "osprey/wire/frame_decoder.h"
#include "recording_proxy.h"
#include "rpc_test_util.h"

namespace osprey {
// For gtest's names of the parameters.
void PrintTo(RpcEncryption e, std::ostream* os) {
  *os << (e == RpcEncryption::kDisabled   ? "disabled"
          : e == RpcEncryption::kOptional ? "optional"
                                          : "required");
}
}  // namespace osprey

namespace osprey::rpc_test {
namespace {

struct Side {
  RpcEncryption encryption;
  bool encrypt_loopback;
};

enum class Outcome { kClear, kAuthenticationOnly, kEncrypted, kRefusedByServer, kRefusedByClient };

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kClear:
      return "clear";
    case Outcome::kAuthenticationOnly:
      return "TLS authentication only";
    case Outcome::kEncrypted:
      return "TLS encrypted";
    case Outcome::kRefusedByServer:
      return "refused by the server";
    case Outcome::kRefusedByClient:
      return "refused by the client";
  }
  return "?";
}

// What each side lists in NEGOTIATE on a loopback connection.
std::vector<int> KuduListedFeatures(const Side& side) {
  std::vector<int> f{wire::APPLICATION_FEATURE_FLAGS};
  if (side.encryption == RpcEncryption::kDisabled) return f;
  f.push_back(wire::TLS);
  if (!side.encrypt_loopback) f.push_back(wire::TLS_AUTHENTICATION_ONLY);
  return f;
}

Outcome KuduOutcome(const Side& client, const Side& server) {
  const bool client_tls = client.encryption != RpcEncryption::kDisabled;
  const bool server_tls = server.encryption != RpcEncryption::kDisabled;
  if (!client_tls && server.encryption == RpcEncryption::kRequired) {
    return Outcome::kRefusedByServer;
  }
  if (!server_tls && client.encryption == RpcEncryption::kRequired) {
    return Outcome::kRefusedByClient;
  }
  if (!client_tls || !server_tls) return Outcome::kClear;
  if (!client.encrypt_loopback && !server.encrypt_loopback) return Outcome::kAuthenticationOnly;
  return Outcome::kEncrypted;
}

ConnectionSecurity ExpectedSecurity(Outcome o) {
  switch (o) {
    case Outcome::kClear:
      return ConnectionSecurity::kClear;
    case Outcome::kAuthenticationOnly:
      return ConnectionSecurity::kTlsAuthenticationOnly;
    default:
      return ConnectionSecurity::kTlsEncrypted;
  }
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The body of the first frame of a byte stream (after `skip` bytes), as a
// NegotiatePB, with whether the frame was an error response.
template <class Header>
testing::AssertionResult FirstNegotiate(const std::string& stream, size_t skip,
                                        wire::NegotiatePB* out, bool* is_error = nullptr) {
  if (stream.size() < skip + 4) return testing::AssertionFailure() << "no frame on the wire";
  const auto* p = reinterpret_cast<const uint8_t*>(stream.data()) + skip;
  size_t len = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
  if (stream.size() < skip + 4 + len) return testing::AssertionFailure() << "frame cut short";
  wire::FrameDecoder<Header> decoder;
  std::vector<wire::InboundFrame<Header>> frames;
  Status s = decoder.Feed(Slice(p, 4 + len), &frames);
  if (!s.ok() || frames.size() != 1) {
    return testing::AssertionFailure() << "first frame does not decode: " << s.ToString();
  }
  if constexpr (std::is_same_v<Header, wire::ResponseHeader>) {
    if (is_error != nullptr) *is_error = frames[0].header.is_error();
    if (frames[0].header.is_error()) return testing::AssertionSuccess();
  }
  const Slice& body = frames[0].main_message;
  if (!out->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return testing::AssertionFailure() << "first frame is not a NegotiatePB";
  }
  return testing::AssertionSuccess();
}

std::vector<int> Features(const wire::NegotiatePB& pb) {
  return {pb.supported_features().begin(), pb.supported_features().end()};
}

MessengerBuilder Builder(const std::string& name, const Side& side) {
  MessengerBuilder b(name);
  b.set_rpc_encryption(side.encryption).set_rpc_encrypt_loopback(side.encrypt_loopback);
  return b;
}

// The one connection of `m` in the given direction; fails if there is not
// exactly one.
testing::AssertionResult OnlyConnection(const std::shared_ptr<Messenger>& m, bool inbound,
                                        ConnectionInfo* out) {
  std::vector<ConnectionInfo> conns;
  Status s = m->DumpConnections(&conns);
  if (!s.ok()) return testing::AssertionFailure() << s.ToString();
  int found = 0;
  for (const auto& c : conns) {
    if (c.inbound == inbound) {
      *out = c;
      ++found;
    }
  }
  if (found != 1) {
    return testing::AssertionFailure()
           << found << " " << (inbound ? "inbound" : "outbound") << " connections, expected 1";
  }
  return testing::AssertionSuccess();
}

// osprey_connections_negotiated_total of `m` for one direction, by
// security slug.
std::map<std::string, double> NegotiatedCounts(const std::shared_ptr<Messenger>& m,
                                               const std::string& direction) {
  std::map<std::string, double> counts;
  for (const MetricValue& v : m->metrics()->Snapshot()) {
    if (v.name != "osprey_connections_negotiated_total") continue;
    std::string dir, security;
    for (const auto& [k, val] : v.labels) {
      if (k == "direction") dir = val;
      if (k == "security") security = val;
    }
    if (dir == direction) counts[security] = v.value;
  }
  return counts;
}

using MatrixParam = std::tuple<RpcEncryption, bool, RpcEncryption, bool, bool>;

class EncryptionMatrixTest : public testing::TestWithParam<MatrixParam> {};

TEST_P(EncryptionMatrixTest, OutcomeFollowsKudusRules) {
  auto [client_enc, client_el, server_enc, server_el, ipv6] = GetParam();
  const Side client_side{client_enc, client_el}, server_side{server_enc, server_el};
  const Outcome want = KuduOutcome(client_side, server_side);
  SCOPED_TRACE(std::string("expected outcome: ") + OutcomeName(want));

  Sockaddr bind;
  ASSERT_TRUE(Sockaddr::Parse(ipv6 ? "[::1]:0" : "127.0.0.1:0", &bind).ok());
  TestServer server;
  Status s = server.Start(1, ServicePoolOptions(), Builder("server", server_side), bind);
  ASSERT_TRUE(s.ok()) << s.ToString();
  RecordingProxy wire(server.address);
  Sockaddr via;
  ASSERT_TRUE(wire.Start(&via).ok());
  ASSERT_EQ(bind.family(), via.family());
  auto client = MakeClient(1, Builder("client", client_side));
  ASSERT_TRUE(client);

  const std::string secret = "matrix-payload-seen-only-in-the-clear";
  CalculatorServiceProxy proxy(client, via);
  EchoRequestPB req;
  req.set_data(secret);
  EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  s = proxy.Echo(req, &resp, &ctl);

  if (want == Outcome::kRefusedByServer || want == Outcome::kRefusedByClient) {
    ASSERT_TRUE(s.IsNotAuthorized()) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), want == Outcome::kRefusedByServer
                                          ? "client does not support TLS, which this server "
                                            "requires (rpc_encryption=required)"
                                          : "server does not support TLS, which this client "
                                            "requires (rpc_encryption=required)"))
        << s.ToString();
    EXPECT_FALSE(Contains(wire.client_to_server(), secret));
  } else {
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(secret, resp.data());

    // What both messengers say they negotiated.
    ConnectionInfo out_conn, in_conn;
    ASSERT_TRUE(OnlyConnection(client, /*inbound=*/false, &out_conn));
    ASSERT_TRUE(OnlyConnection(server.messenger, /*inbound=*/true, &in_conn));
    EXPECT_TRUE(out_conn.negotiated);
    EXPECT_TRUE(in_conn.negotiated);
    EXPECT_EQ(ConnectionSecurityName(ExpectedSecurity(want)),
              std::string(ConnectionSecurityName(out_conn.security)));
    EXPECT_EQ(ConnectionSecurityName(ExpectedSecurity(want)),
              std::string(ConnectionSecurityName(in_conn.security)));
    EXPECT_EQ(via, out_conn.remote);
    EXPECT_EQ(out_conn.user, in_conn.user);  // SASL carried the user across

    // And what each counted, for operators: one negotiation of that kind.
    const std::string slug = ConnectionSecuritySlug(ExpectedSecurity(want));
    const std::map<std::string, double> none = {
        {"clear", 0}, {"tls_authentication_only", 0}, {"tls_encrypted", 0}};
    std::map<std::string, double> one = none;
    one[slug] = 1;
    EXPECT_EQ(one, NegotiatedCounts(client, "outbound"));
    EXPECT_EQ(one, NegotiatedCounts(server.messenger, "inbound"));
    EXPECT_EQ(none, NegotiatedCounts(client, "inbound"));
  }

  // What crossed the wire. The client's first frame follows the 7-byte
  // connection header; the server's starts its stream.
  const std::string c2s = wire.client_to_server(), s2c = wire.server_to_client();
  wire::NegotiatePB client_negotiate, server_negotiate;
  ASSERT_TRUE(FirstNegotiate<wire::RequestHeader>(c2s, 7, &client_negotiate));
  EXPECT_EQ(wire::NegotiatePB::NEGOTIATE, client_negotiate.step());
  EXPECT_EQ(KuduListedFeatures(client_side), Features(client_negotiate));
  bool server_refused = false;
  ASSERT_TRUE(FirstNegotiate<wire::ResponseHeader>(s2c, 0, &server_negotiate, &server_refused));
  EXPECT_EQ(want == Outcome::kRefusedByServer, server_refused);
  if (!server_refused) {
    EXPECT_EQ(wire::NegotiatePB::NEGOTIATE, server_negotiate.step());
    EXPECT_EQ(KuduListedFeatures(server_side), Features(server_negotiate));
  }
  switch (want) {
    case Outcome::kClear:
      EXPECT_TRUE(Contains(c2s, secret));
      EXPECT_TRUE(Contains(s2c, secret));
      EXPECT_TRUE(Contains(c2s, "PLAIN"));
      break;
    case Outcome::kAuthenticationOnly: {
      // The handshake ran inside NEGOTIATE; the calls stayed in the clear.
      wire::RequestFrameDecoder decoder;
      std::vector<wire::InboundRequestFrame> frames;
      ASSERT_TRUE(decoder.Feed(Slice(c2s.data() + 7, c2s.size() - 7), &frames).ok());
      ASSERT_GE(frames.size(), 2u);
      wire::NegotiatePB second;
      ASSERT_TRUE(second.ParseFromArray(frames[1].main_message.data(),
                                        static_cast<int>(frames[1].main_message.size())));
      EXPECT_EQ(wire::NegotiatePB::TLS_HANDSHAKE, second.step());
      EXPECT_TRUE(Contains(c2s, secret));
      EXPECT_TRUE(Contains(s2c, secret));
      break;
    }
    case Outcome::kEncrypted:
      EXPECT_GT(c2s.size(), secret.size());
      EXPECT_FALSE(Contains(c2s, secret));
      EXPECT_FALSE(Contains(s2c, secret));
      EXPECT_FALSE(Contains(c2s, "PLAIN"));
      break;
    case Outcome::kRefusedByServer:
    case Outcome::kRefusedByClient:
      break;
  }
}

std::string EncryptionName(RpcEncryption e) {
  switch (e) {
    case RpcEncryption::kDisabled:
      return "Disabled";
    case RpcEncryption::kOptional:
      return "Optional";
    case RpcEncryption::kRequired:
      return "Required";
  }
  return "?";
}

std::string ParamName(const testing::TestParamInfo<MatrixParam>& info) {
  auto [client_enc, client_el, server_enc, server_el, ipv6] = info.param;
  return "Client" + EncryptionName(client_enc) + (client_el ? "EncryptLoopback" : "") + "_Server" +
         EncryptionName(server_enc) + (server_el ? "EncryptLoopback" : "") +
         (ipv6 ? "_IPv6" : "_IPv4");
}

INSTANTIATE_TEST_SUITE_P(
    AllSettings, EncryptionMatrixTest,
    testing::Combine(testing::Values(RpcEncryption::kDisabled, RpcEncryption::kOptional,
                                     RpcEncryption::kRequired),
                     testing::Bool(),
                     testing::Values(RpcEncryption::kDisabled, RpcEncryption::kOptional,
                                     RpcEncryption::kRequired),
                     testing::Bool(), testing::Bool()),
    ParamName);

}  // namespace
}  // namespace osprey::rpc_test
