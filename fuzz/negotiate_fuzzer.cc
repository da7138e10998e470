// Parses input as a NegotiatePB, as a server does with the body of every
// call_id -33 frame, and exercises what server-side negotiation reads from
// it, and the server's and client's negotiation steps under every TLS
// policy. Must never crash; re-serialization must be stable; each side
// must agree on the intersection of the two lists, as the policy allows.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "osprey/base/slice.h"
#include "osprey/rpc/kudu_token_verifier.h"
#include "osprey/transport/negotiation.h"
#include "osprey/transport/negotiator.h"
#include "osprey/wire/rpc_header.pb.h"
#include "osprey/wire/sasl_plain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using osprey::wire::NegotiatePB;
  NegotiatePB pb;
  // What a connection parses with: it counts the fields first, and takes
  // nothing protobuf would refuse.
  NegotiatePB counted;
  const bool parsed = pb.ParseFromArray(data, static_cast<int>(size));
  osprey::Status ps = osprey::transport::ParseNegotiate(osprey::Slice(data, size), &counted);
  if (ps.ok() && !parsed) abort();
  if (!ps.ok() && !ps.IsCorruption()) abort();
  if (!parsed) return 0;

  // What a server looks at: the step, the features, the mechanisms offered
  // or chosen, the authentication types, and for SASL PLAIN the token.
  volatile int sink = pb.step();
  for (int f : pb.supported_features()) sink = sink + f;
  bool plain = false;
  for (const auto& m : pb.sasl_mechanisms()) plain |= m.mechanism() == "PLAIN";
  for (const auto& t : pb.authn_types()) sink = sink + static_cast<int>(t.type_case());
  if (pb.has_token()) {
    osprey::wire::SaslPlainCredentials creds;
    osprey::Status s = osprey::wire::DecodeSaslPlain(osprey::Slice(pb.token()), &creds);
    if (s.ok()) {
      // A token that decodes re-encodes to itself.
      if (osprey::wire::EncodeSaslPlain(creds) != pb.token()) abort();
      if (creds.authcid.empty()) abort();
    } else if (!s.IsCorruption()) {
      abort();
    }
  }
  (void)plain;

  // As the server's first step, under each policy.
  using osprey::transport::ServerTlsPolicy;
  using osprey::transport::TlsFeatures;
  for (int bits = 0; bits < 8; ++bits) {
    ServerTlsPolicy policy;
    policy.available = bits & 1;
    policy.required = policy.available && (bits & 2);
    policy.allow_authentication_only = bits & 4;
    NegotiatePB answer;
    TlsFeatures agreed;
    osprey::Status s = osprey::transport::ServerAnswerNegotiate(pb, policy, &answer, &agreed);
    if (!s.ok()) {
      if (!s.IsNotAuthorized() && !s.IsCorruption()) abort();
      continue;
    }
    if (agreed.authentication_only && !agreed.tls) abort();
    if (agreed.tls && !policy.available) abort();
    if (policy.required && !agreed.tls) abort();
    // The server lists what it supports, whatever the client listed, and
    // agrees on the intersection.
    osprey::transport::TlsFeatures listed = osprey::transport::ListedTlsFeatures(answer);
    osprey::transport::TlsFeatures client = osprey::transport::ListedTlsFeatures(pb);
    if (listed.tls != policy.available) abort();
    if (listed.authentication_only != (policy.available && policy.allow_authentication_only)) {
      abort();
    }
    if (agreed.tls != (listed.tls && client.tls)) abort();
    if (agreed.authentication_only !=
        (agreed.tls && listed.authentication_only && client.authentication_only)) {
      abort();
    }
  }
  // As a client reading a server's NEGOTIATE answer.
  for (int bits = 0; bits < 8; ++bits) {
    TlsFeatures offer{(bits & 1) != 0, (bits & 2) != 0};
    TlsFeatures agreed;
    osprey::Status s = osprey::transport::ClientCheckNegotiate(pb, offer, bits & 4, &agreed);
    if (!s.ok()) continue;
    // The intersection of the offer and the server's list, never more.
    TlsFeatures listed = osprey::transport::ListedTlsFeatures(pb);
    if (agreed.tls != (offer.tls && listed.tls)) abort();
    if (agreed.authentication_only !=
        (agreed.tls && offer.authentication_only && listed.authentication_only)) {
      abort();
    }
    if ((bits & 4) && !agreed.tls) abort();
  }

  // Every authentication a server may accept: mechanisms, certificate and
  // token. What it chooses needs TLS; a choice other than SASL lists no
  // mechanism; a SASL answer lists only mechanisms it offers.
  using osprey::transport::AuthnType;
  for (int bits = 0; bits < 32; ++bits) {
    ServerTlsPolicy policy;
    policy.available = bits & 1;
    osprey::transport::SaslMechanisms mechanisms{(bits & 2) != 0, (bits & 4) != 0};
    if (!mechanisms.plain && !mechanisms.gssapi) mechanisms.plain = true;
    osprey::transport::OtherAuthn acceptable{(bits & 8) != 0, (bits & 16) != 0};
    NegotiatePB answer;
    TlsFeatures agreed;
    AuthnType chosen = AuthnType::kSasl;
    osprey::Status s = osprey::transport::ServerAnswerNegotiate(pb, policy, &answer, &agreed,
                                                                mechanisms, acceptable, &chosen);
    if (!s.ok()) {
      if (!s.IsNotAuthorized() && !s.IsCorruption()) abort();
      continue;
    }
    osprey::transport::SaslMechanisms listed = osprey::transport::ListedMechanisms(answer);
    if (chosen != AuthnType::kSasl) {
      if (!agreed.tls || answer.sasl_mechanisms_size() != 0) abort();
      if (chosen == AuthnType::kCertificate && !acceptable.certificate) abort();
      if (chosen == AuthnType::kToken && !acceptable.token) abort();
    } else {
      if ((listed.plain && !mechanisms.plain) || (listed.gssapi && !mechanisms.gssapi)) abort();
    }
    // A client reading that answer agrees on what was chosen.
    AuthnType client_chose = AuthnType::kSasl;
    s = osprey::transport::ClientCheckNegotiate(answer, {true, false}, false, &agreed, acceptable,
                                                &client_chose);
    if (s.ok() && client_chose != chosen) abort();
  }
  // A server that does not trust the peer's address (trusted subnets) and
  // agreed on no TLS: whatever the peer sends next, it is not let in, and
  // the refusal is NotAuthorized.
  {
    osprey::transport::ServerAuthPolicy untrusted;
    untrusted.untrusted_peer = "203.0.113.5";
    osprey::transport::ServerNegotiator server(ServerTlsPolicy(), nullptr, untrusted);
    osprey::transport::NegotiationSteps first, second;
    if (!server.Handle(osprey::transport::ClientNegotiateRequest({false, false}), &first).ok()) {
      abort();
    }
    osprey::Status s = server.Handle(pb, &second);
    if (s.ok() || second.done || !second.send.empty() || !s.IsNotAuthorized()) abort();
  }
  // A token in the message: the verifier refuses what it cannot check, and
  // never crashes.
  if (pb.has_authn_token()) {
    static osprey::KuduTokenVerifier verifier([] { return int64_t{1'800'000'000}; });
    std::string user;
    osprey::Status s = verifier.Verify(pb.authn_token(), &user);
    if (s.ok() || !s.IsNotAuthorized()) abort();  // it holds no key, so nothing verifies
  }

  // Round trip: serialize, parse, serialize again; the two serializations
  // must agree (the input itself need not be canonical).
  std::string once;
  if (!pb.SerializeToString(&once)) abort();
  NegotiatePB again;
  if (!again.ParseFromString(once)) abort();
  std::string twice;
  if (!again.SerializeToString(&twice)) abort();
  if (once != twice) abort();
  return 0;
}
