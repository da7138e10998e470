#include "osprey/transport/negotiation.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <climits>

#include "osprey/base/log_escape.h"
#include "osprey/wire/sasl_plain.h"

namespace osprey::transport {

using wire::NegotiatePB;

namespace {
constexpr const char* kPlain = "PLAIN";
constexpr const char* kGssapi = "GSSAPI";
}  // namespace

SaslMechanisms ListedMechanisms(const NegotiatePB& pb) {
  SaslMechanisms listed;
  for (const auto& m : pb.sasl_mechanisms()) {
    listed.plain |= m.mechanism() == kPlain;
    listed.gssapi |= m.mechanism() == kGssapi;
  }
  return listed;
}

std::string StepName(const NegotiatePB& pb) { return NegotiatePB::NegotiateStep_Name(pb.step()); }

TlsFeatures ListedTlsFeatures(const NegotiatePB& pb) {
  TlsFeatures listed;
  for (int f : pb.supported_features()) {
    listed.tls |= f == wire::TLS;
    listed.authentication_only |= f == wire::TLS_AUTHENTICATION_ONLY;
  }
  return listed;
}

NegotiatePB ClientNegotiateRequest(const TlsFeatures& offer, OtherAuthn others) {
  NegotiatePB pb;
  pb.add_supported_features(wire::APPLICATION_FEATURE_FLAGS);
  if (offer.tls) pb.add_supported_features(wire::TLS);
  if (offer.tls && offer.authentication_only) {
    pb.add_supported_features(wire::TLS_AUTHENTICATION_ONLY);
  }
  pb.set_step(NegotiatePB::NEGOTIATE);
  pb.add_authn_types()->mutable_sasl();
  if (others.certificate && offer.tls) pb.add_authn_types()->mutable_certificate();
  if (others.token && offer.tls) pb.add_authn_types()->mutable_token();
  return pb;
}

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Deeper than any message a peer may send before authentication
// (NegotiatePB > AuthenticationTypePB > Sasl is 3); protobuf would follow
// unknown groups 100 deep.
constexpr int kMaxCountedDepth = 8;

enum class FieldCount { kWithin, kTooMany, kMalformed };

// Counts the fields of one message of `type` (nullptr: an unknown group,
// whose fields are all unknown) into *fields, recursing into sub-messages
// the descriptor names and into groups, since protobuf keeps each nested
// field, known or not, as an object of its own. A packed list counts one a
// byte, its most entries. `end_tag`: the tag that closes the group being
// read, 0 for a message that runs to the stream's limit.
FieldCount CountFields(CodedInputStream* in, const Descriptor* type, uint32_t end_tag, int depth,
                       int64_t max_fields, int64_t* fields) {
  if (depth > kMaxCountedDepth) return FieldCount::kMalformed;
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) {
      // The end of the message, or bytes that are no tag.
      return end_tag == 0 && in->BytesUntilLimit() == 0 ? FieldCount::kWithin
                                                        : FieldCount::kMalformed;
    }
    if (tag == end_tag) return FieldCount::kWithin;
    if (WireFormatLite::GetTagFieldNumber(tag) == 0) return FieldCount::kMalformed;
    if (++*fields > max_fields) return FieldCount::kTooMany;
    const FieldDescriptor* field =
        type == nullptr ? nullptr : type->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    FieldCount nested = FieldCount::kWithin;
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t len;
        if (!in->ReadVarint32(&len) || len > static_cast<uint32_t>(INT32_MAX)) {
          return FieldCount::kMalformed;
        }
        if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE) {
          CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(len));
          nested = CountFields(in, field->message_type(), 0, depth + 1, max_fields, fields);
          in->PopLimit(limit);
        } else {
          if (field != nullptr && field->is_packable()) *fields += len;
          if (!in->Skip(static_cast<int>(len))) return FieldCount::kMalformed;
        }
        break;
      }
      case WireFormatLite::WIRETYPE_START_GROUP: {
        const Descriptor* group_type =
            field != nullptr && field->type() == FieldDescriptor::TYPE_GROUP ? field->message_type()
                                                                             : nullptr;
        nested = CountFields(in, group_type,
                             WireFormatLite::MakeTag(WireFormatLite::GetTagFieldNumber(tag),
                                                     WireFormatLite::WIRETYPE_END_GROUP),
                             depth + 1, max_fields, fields);
        break;
      }
      case WireFormatLite::WIRETYPE_END_GROUP:
        return FieldCount::kMalformed;  // closes no group that is open
      default:  // varint, fixed32, fixed64; SkipField refuses wire types 6 and 7
        if (!WireFormatLite::SkipField(in, tag)) return FieldCount::kMalformed;
        break;
    }
    if (nested != FieldCount::kWithin) return nested;
    if (*fields > max_fields) return FieldCount::kTooMany;
  }
}

// `body` into `out` if it has at most `max_fields` fields at every depth,
// counted before protobuf parses anything; `what` names the message in
// errors.
Status ParseCounted(Slice body, google::protobuf::Message* out, int max_fields,
                    const std::string& what) {
  if (body.size() > static_cast<size_t>(INT32_MAX)) {
    return Status::Corruption(what + " of " + std::to_string(body.size()) + " bytes is too long");
  }
  CodedInputStream in(body.data(), static_cast<int>(body.size()));
  in.PushLimit(static_cast<int>(body.size()));
  int64_t fields = 0;
  switch (CountFields(&in, out->GetDescriptor(), 0, 0, max_fields, &fields)) {
    case FieldCount::kWithin:
      break;
    case FieldCount::kTooMany:
      return Status::Corruption(what + " has more than " + std::to_string(max_fields) +
                                " fields (counted at every depth)");
    case FieldCount::kMalformed:
      return Status::Corruption(what + " does not parse as " + out->GetDescriptor()->name());
  }
  if (!out->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Status::Corruption(what + " does not parse as " + out->GetDescriptor()->name());
  }
  return Status::OK();
}

}  // namespace

Status ParseNegotiate(Slice body, wire::NegotiatePB* out) {
  return ParseCounted(body, out, kMaxNegotiateFields, "negotiation message");
}

Status ParseConnectionContext(Slice body, wire::ConnectionContextPB* out) {
  return ParseCounted(body, out, kMaxNegotiateFields, "connection context");
}

Status ClientClearFrameAfterTls(int32_t call_id, bool is_error, Slice body) {
  wire::ErrorStatusPB err;
  if (is_error && (call_id == -33 || call_id == -1) &&
      err.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Status::NotAuthorized("server rejected negotiation: " + err.message());
  }
  return Status::NetworkError(
      "server sent clear bytes after the TLS handshake (a frame with call id " +
      std::to_string(call_id) +
      "): refused, as only a man in the middle sends those where records must be");
}

Status ClientCheckNegotiate(const NegotiatePB& server, const TlsFeatures& offered,
                            bool tls_required, TlsFeatures* agreed, OtherAuthn offered_others,
                            AuthnType* chosen) {
  if (chosen != nullptr) *chosen = AuthnType::kSasl;
  if (server.step() != NegotiatePB::NEGOTIATE) {
    return Status::NetworkError("negotiation: expected NEGOTIATE from server, got " +
                                StepName(server));
  }
  if (server.authn_types_size() > 1) {
    return Status::NotAuthorized("negotiation: server chose more than one authentication type");
  }
  const bool one = server.authn_types_size() == 1;
  const bool by_certificate =
      one && server.authn_types(0).has_certificate() && offered_others.certificate;
  const bool by_token = one && server.authn_types(0).has_token() && offered_others.token;
  if (one && !server.authn_types(0).has_sasl() && !by_certificate && !by_token) {
    return Status::NotAuthorized(
        "negotiation: server chose an authentication type other than "
        "SASL, which this client does not support");
  }
  SaslMechanisms mechanisms = ListedMechanisms(server);
  if (!by_certificate && !by_token && !mechanisms.plain && !mechanisms.gssapi) {
    return Status::NotAuthorized(
        "negotiation: server offers neither SASL mechanism PLAIN nor GSSAPI");
  }
  // The server lists what it supports, not a choice made for this client:
  // both sides act on the intersection, and a feature only the server
  // lists is ignored (wire-protocol.md section 5; capture server-lists-tls).
  TlsFeatures listed = ListedTlsFeatures(server);
  *agreed = TlsFeatures();
  agreed->tls = offered.tls && listed.tls;
  agreed->authentication_only =
      agreed->tls && offered.authentication_only && listed.authentication_only;
  if (!agreed->tls && tls_required) {
    return Status::NotAuthorized(
        "negotiation: server does not support TLS, which this client requires "
        "(rpc_encryption=required)");
  }
  if (by_certificate || by_token) {
    if (!agreed->tls) {
      return Status::NotAuthorized(std::string("negotiation: server chose ") +
                                   (by_token ? "token" : "certificate") +
                                   " authentication without TLS");
    }
    if (chosen != nullptr) *chosen = by_token ? AuthnType::kToken : AuthnType::kCertificate;
  }
  return Status::OK();
}

NegotiatePB ClientSaslInitiate(const std::string& user) {
  NegotiatePB out;
  out.set_step(NegotiatePB::SASL_INITIATE);
  out.add_sasl_mechanisms()->set_mechanism(kPlain);
  out.set_token(wire::EncodeSaslPlain({"", user, ""}));
  return out;
}

Status ClientCheckSaslSuccess(const NegotiatePB& reply) {
  if (reply.step() == NegotiatePB::SASL_CHALLENGE) {
    return Status::NotAuthorized("negotiation: server sent a SASL challenge, which PLAIN has not");
  }
  if (reply.step() != NegotiatePB::SASL_SUCCESS) {
    return Status::NetworkError("negotiation: expected SASL_SUCCESS from server, got " +
                                StepName(reply));
  }
  return Status::OK();
}

NegotiatePB ClientGssapiInitiate(std::string token) {
  NegotiatePB out;
  out.set_step(NegotiatePB::SASL_INITIATE);
  out.add_sasl_mechanisms()->set_mechanism(kGssapi);
  out.set_token(std::move(token));
  return out;
}

wire::ConnectionContextPB ClientConnectionContext(const std::string& user,
                                                  const std::string* encoded_nonce) {
  wire::ConnectionContextPB ctx;
  ctx.mutable_deprecated_user_info()->set_real_user(user);
  if (encoded_nonce != nullptr) ctx.set_encoded_nonce(*encoded_nonce);
  return ctx;
}

NegotiatePB ClientTokenExchange(const std::string& token) {
  NegotiatePB out;
  out.set_step(NegotiatePB::TOKEN_EXCHANGE);
  out.set_authn_token(token);
  return out;
}

Status InitiatedMechanism(const NegotiatePB& client, SaslMechanisms offered,
                          SaslMechanisms* chosen) {
  if (client.step() != NegotiatePB::SASL_INITIATE) {
    return Status::Corruption("negotiation: expected SASL_INITIATE, got " + StepName(client));
  }
  std::string names = std::string(offered.gssapi ? "GSSAPI" : "") +
                      (offered.gssapi && offered.plain ? " or " : "") +
                      (offered.plain ? "PLAIN" : "");
  if (client.sasl_mechanisms_size() != 1) {
    return Status::NotAuthorized("negotiation: SASL_INITIATE must name exactly one mechanism, " +
                                 names);
  }
  *chosen = ListedMechanisms(client);
  if ((chosen->plain && offered.plain) || (chosen->gssapi && offered.gssapi)) return Status::OK();
  // The peer's own text: escaped, as this message is logged.
  std::string named = EscapeForLog(client.sasl_mechanisms(0).mechanism());
  if (chosen->plain) {
    return Status::NotAuthorized(
        "negotiation: this server requires Kerberos authentication (rpc_authentication="
        "required) and the client offered SASL PLAIN: give the client a Kerberos ticket "
        "(kinit) or keytab");
  }
  return Status::NotAuthorized("negotiation: the client chose SASL mechanism '" + named +
                               "'; this server offers " + names);
}

Status ServerAnswerNegotiate(const NegotiatePB& client, const ServerTlsPolicy& policy,
                             NegotiatePB* answer, TlsFeatures* agreed, SaslMechanisms mechanisms,
                             OtherAuthn acceptable, AuthnType* chosen) {
  if (chosen != nullptr) *chosen = AuthnType::kSasl;
  if (client.step() != NegotiatePB::NEGOTIATE) {
    return Status::Corruption("negotiation: expected NEGOTIATE, got " + StepName(client));
  }
  bool sasl = client.authn_types_size() == 0;  // no list: SASL is implied
  bool client_certificate = false, client_token = false;
  for (const auto& t : client.authn_types()) {
    sasl |= t.has_sasl();
    client_certificate |= t.has_certificate() && acceptable.certificate;
    client_token |= t.has_token() && acceptable.token;
  }
  if (!sasl && !client_certificate && !client_token) {
    return Status::NotAuthorized(
        "negotiation: client offers no authentication type this "
        "server supports (only SASL)");
  }
  if (client.sasl_mechanisms_size() > 0) {
    SaslMechanisms listed = ListedMechanisms(client);
    if (!(listed.plain && mechanisms.plain) && !(listed.gssapi && mechanisms.gssapi)) {
      return Status::NotAuthorized(
          std::string("negotiation: client offers no SASL mechanism this server supports (only ") +
          (mechanisms.gssapi ? (mechanisms.plain ? "GSSAPI and PLAIN" : "GSSAPI") : "PLAIN") + ")");
    }
  }
  TlsFeatures client_listed = ListedTlsFeatures(client);
  if (policy.required && !client_listed.tls) {
    return Status::NotAuthorized(
        "negotiation: client does not support TLS, which this server requires "
        "(rpc_encryption=required)");
  }
  // As a Kudu server: the features this server supports, whatever the
  // client listed, in ascending order; TLS_AUTHENTICATION_ONLY only where
  // the policy allows it (a loopback connection not set to be encrypted).
  TlsFeatures listed;
  listed.tls = policy.available;
  listed.authentication_only = policy.available && policy.allow_authentication_only;
  *agreed = TlsFeatures();
  agreed->tls = listed.tls && client_listed.tls;
  agreed->authentication_only =
      agreed->tls && listed.authentication_only && client_listed.authentication_only;
  answer->Clear();
  answer->add_supported_features(wire::APPLICATION_FEATURE_FLAGS);
  if (listed.tls) answer->add_supported_features(wire::TLS);
  if (listed.authentication_only) answer->add_supported_features(wire::TLS_AUTHENTICATION_ONLY);
  answer->set_step(NegotiatePB::NEGOTIATE);
  if (client_certificate && agreed->tls) {
    // As a Kudu server: the client's certificate proves who it is; no SASL.
    answer->add_authn_types()->mutable_certificate();
    if (chosen != nullptr) *chosen = AuthnType::kCertificate;
    return Status::OK();
  }
  if (client_token && agreed->tls) {
    answer->add_authn_types()->mutable_token();
    if (chosen != nullptr) *chosen = AuthnType::kToken;
    return Status::OK();
  }
  if (mechanisms.gssapi) answer->add_sasl_mechanisms()->set_mechanism(kGssapi);
  if (mechanisms.plain) answer->add_sasl_mechanisms()->set_mechanism(kPlain);
  if (client.authn_types_size() > 0) answer->add_authn_types()->mutable_sasl();
  return Status::OK();
}

Status ServerAnswerSaslInitiate(const NegotiatePB& client, std::string* user, NegotiatePB* answer) {
  if (client.step() != NegotiatePB::SASL_INITIATE) {
    return Status::Corruption("negotiation: expected SASL_INITIATE, got " + StepName(client));
  }
  if (client.sasl_mechanisms_size() != 1 || client.sasl_mechanisms(0).mechanism() != kPlain) {
    return Status::NotAuthorized(
        "negotiation: SASL_INITIATE must name exactly one mechanism, "
        "PLAIN");
  }
  wire::SaslPlainCredentials creds;
  Status s = wire::DecodeSaslPlain(client.token(), &creds);
  if (!s.ok()) return Status::NotAuthorized(s.message());
  *user = creds.authcid;
  answer->Clear();
  answer->set_step(NegotiatePB::SASL_SUCCESS);
  return Status::OK();
}

}  // namespace osprey::transport
