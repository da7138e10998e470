// The negotiation steps of KRPC (wire-protocol.md section 5) as pure
// functions over NegotiatePB messages: what a client sends, and how a server
// answers. Connection drives them on its reactor; tests and fuzzers call
// them directly.
#pragma once

#include <string>

#include "osprey/base/slice.h"
#include "osprey/base/status.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::transport {

// The step's name, for error messages: "TLS_HANDSHAKE".
std::string StepName(const wire::NegotiatePB& pb);

// What one side offers about TLS, or what both sides agreed on.
struct TlsFeatures {
  bool tls = false;
  // TLS_AUTHENTICATION_ONLY: after the handshake, traffic stays in the clear.
  bool authentication_only = false;
};

// Authentication without SASL (Kudu's authn_types): a TLS client
// certificate, or a token the client presents (TOKEN_EXCHANGE).
struct OtherAuthn {
  bool certificate = false;
  bool token = false;
};
enum class AuthnType { kSasl, kCertificate, kToken };

// The TLS features a NEGOTIATE message lists; other features are ignored.
TlsFeatures ListedTlsFeatures(const wire::NegotiatePB& pb);

// Client: the first NEGOTIATE message. Lists APPLICATION_FEATURE_FLAGS, the
// TLS features of `offer` and the sasl authentication type, no mechanisms
// (as Kudu's client).
// `others`: also list certificate (this client has a certificate signed by
// a CA) and token authentication (it has a token and verifies the
// server's certificate); either only with TLS.
wire::NegotiatePB ClientNegotiateRequest(const TlsFeatures& offer, OtherAuthn others = {});

// The SASL mechanisms a NEGOTIATE message lists, of those Osprey speaks.
struct SaslMechanisms {
  bool plain = false;
  bool gssapi = false;  // Kerberos
};
SaslMechanisms ListedMechanisms(const wire::NegotiatePB& pb);

// Client: checks the server's NEGOTIATE answer: the sasl type (if one was
// chosen), PLAIN or GSSAPI among the mechanisms, and TLS. The server lists what it
// supports; *agreed gets the intersection with `offered`, and a feature
// only the server lists is ignored. NotAuthorized if the server offers
// neither PLAIN nor GSSAPI, chose another authentication type, or lacks TLS while
// `tls_required`.
// The server may choose one of `offered_others` (and then lists no
// mechanisms); *chosen says which type it chose; the others need TLS
// agreed.
Status ClientCheckNegotiate(const wire::NegotiatePB& server_negotiate, const TlsFeatures& offered,
                            bool tls_required, TlsFeatures* agreed, OtherAuthn offered_others = {},
                            AuthnType* chosen = nullptr);

// Most fields a NegotiatePB or a ConnectionContextPB may have on the wire,
// at every depth together: repeated entries each counted, the fields inside
// sub-messages and groups too, known or not (a packed list by its bytes).
// Real ones have about a dozen; a peer that has not authenticated could
// otherwise fill a 1 MiB frame with 2-byte empty fields, at the top level or
// inside one nested entry, that parse into some 30 times their size.
inline constexpr int kMaxNegotiateFields = 64;

// `body` as a NegotiatePB: Corruption if it has more than
// kMaxNegotiateFields fields (counted before anything is parsed), nests
// deeper than 8, or does not parse.
Status ParseNegotiate(Slice body, wire::NegotiatePB* out);

// `body` as a ConnectionContextPB, its fields bounded as ParseNegotiate's:
// a server parses it after SASL, which under PLAIN anyone passes.
Status ParseConnectionContext(Slice body, wire::ConnectionContextPB* out);

// A client that switched to TLS records got clear bytes instead, and this
// frame is the first of them: why its connection ends. The server's
// refusal (NotAuthorized, with its message) if the frame is an error of
// negotiation (call id -33) or of the connection (-1), else NetworkError
// refusing clear bytes. Never OK: the frame reaches neither the negotiator
// nor the call table, and nothing after it is read, since anyone on the
// path can write clear bytes (issue 40).
Status ClientClearFrameAfterTls(int32_t call_id, bool is_error, Slice body);

// Client: SASL_INITIATE with PLAIN for `user`.
wire::NegotiatePB ClientSaslInitiate(const std::string& user);

// Client: checks that the server accepted the SASL exchange.
Status ClientCheckSaslSuccess(const wire::NegotiatePB& server_reply);

// Client: SASL_INITIATE with GSSAPI and the first Kerberos token.
wire::NegotiatePB ClientGssapiInitiate(std::string token);

// Client: the connection context sent with call id -3; `encoded_nonce`
// (the server's nonce, wrapped by Kerberos) when the server sent one.
wire::ConnectionContextPB ClientConnectionContext(const std::string& user,
                                                  const std::string* encoded_nonce = nullptr);

// What a server does about TLS on one connection.
struct ServerTlsPolicy {
  bool available = false;  // it has a TLS context and encryption is not disabled
  bool required = false;   // refuse a client that does not list TLS
  // List TLS_AUTHENTICATION_ONLY too (a loopback peer, loopback not encrypted).
  bool allow_authentication_only = false;
};

// Server: answers a client's NEGOTIATE as a Kudu server does, offering
// `mechanisms` (GSSAPI first, as Kudu lists them). It lists the
// features it supports whatever the client listed (APPLICATION_FEATURE_FLAGS
// always; TLS when available; TLS_AUTHENTICATION_ONLY when also allowed),
// mechanism PLAIN, and the sasl type when the client listed authentication
// types; *agreed gets the TLS features both sides listed.
// NotAuthorized when the client offers no type this server accepts, or no
// TLS while the policy requires it; Corruption for a wrong step.
// `acceptable`: what the server can authenticate without SASL. As a Kudu
// server, it chooses (*chosen) certificate, else token, else SASL, of what
// the client lists, the first two only with TLS agreed.
Status ServerAnswerNegotiate(const wire::NegotiatePB& client_negotiate,
                             const ServerTlsPolicy& policy, wire::NegotiatePB* answer,
                             TlsFeatures* agreed, SaslMechanisms mechanisms = {true, false},
                             OtherAuthn acceptable = {}, AuthnType* chosen = nullptr);

// Client: TOKEN_EXCHANGE with `token`.
wire::NegotiatePB ClientTokenExchange(const std::string& token);

// The one mechanism a SASL_INITIATE names; Corruption for another step,
// NotAuthorized for none, several or one not in `offered`.
Status InitiatedMechanism(const wire::NegotiatePB& client_initiate, SaslMechanisms offered,
                          SaslMechanisms* chosen);

// Server: checks SASL_INITIATE with PLAIN, sets *user to the authcid and
// builds the SASL_SUCCESS answer. NotAuthorized for another mechanism.
Status ServerAnswerSaslInitiate(const wire::NegotiatePB& client_initiate, std::string* user,
                                wire::NegotiatePB* answer);

}  // namespace osprey::transport
