// ClientNegotiator and ServerNegotiator: each side of KRPC negotiation
// (wire-protocol.md section 5) as a state machine over NegotiatePB
// messages, with no socket. The connection parses each negotiation frame,
// feeds the message in, and carries out the steps that come back: messages
// to send, the point where the wire switches to TLS records, the end.
// Tested on their own against each other (negotiator-test.cc). Each is
// owned by one connection and used on its reactor's thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "osprey/base/connection_types.h"
#include "osprey/base/status.h"
#include "osprey/base/token_verifier.h"
#include "osprey/transport/negotiation.h"
#include "osprey/transport/sasl_gssapi.h"
#include "osprey/transport/tls_context.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::transport {

// What to do after a message from the peer.
struct NegotiationSteps {
  // To send, in order.
  std::vector<wire::NegotiatePB> send;
  // The TLS handshake finished with this message: take the session
  // (TakeTlsSession), whether or not records follow.
  bool tls_handshake_done = false;
  // From send[records_from] on, every byte is a TLS record (send.size():
  // after all of them). -1: no switch.
  int records_from = -1;
  // Negotiation is over: the client sends its connection context and its
  // calls; the server expects the context.
  bool done = false;
  // Client: Kerberos's first step is next, and it may block (a service
  // ticket from the KDC): run TakeKerberosStart's Start off the reactor,
  // then hand the result to KerberosStarted.
  bool start_kerberos = false;
};

// How a client authenticates (Kudu's --rpc_authentication).
struct ClientAuthPolicy {
  RpcAuthentication mode = RpcAuthentication::kDisabled;
  // Logged in from a keytab; null: the ticket cache is read when a server
  // offers Kerberos.
  std::shared_ptr<const KerberosCredentials> kerberos;
  // Kudu's sasl_proto_name: the service part of the server's principal.
  std::string service_name = "kudu";
  // The host dialled: the rest of the server's principal, and what its
  // certificate must name.
  std::string host;
  // Offer certificate authentication: this side's TLS context presents a
  // certificate from files and trusts a CA, and the operator turned it on.
  bool certificate = false;
  // A token to present (Kudu's SignedTokenPB bytes); offered only when the
  // client verifies the server's certificate, as Kudu requires.
  std::string token;
  bool verifies_server = false;
  // This side's TLS context presents a certificate from files (whether or
  // not certificate authentication is on).
  bool presents_certificate = false;
};

// How a server authenticates its clients.
struct ServerAuthPolicy {
  RpcAuthentication mode = RpcAuthentication::kDisabled;
  // Null: no Kerberos (no keytab).
  std::shared_ptr<const KerberosCredentials> kerberos;
  // Accept certificate authentication: this side presents a certificate
  // from files, trusts a CA, and the operator turned it on
  // (MessengerBuilder::set_tls_client_cert_authentication). Under
  // mode == kRequired the certificate must carry a UID.
  bool certificate = false;
  // This side presents a certificate from files and trusts a CA: clients
  // can verify it.
  bool verifiable_certificate = false;
  // Accept tokens, checked by this; offered only with a certificate
  // clients can verify (`verifiable_certificate`), as Kudu requires.
  std::shared_ptr<const TokenVerifier> token_verifier;
  // The peer's address when it is outside the server's trusted subnets
  // (Kudu's --trusted_subnets); empty when it is inside. As Kudu
  // (KUDU-1875), such a peer must negotiate TLS and then authenticate by
  // something stronger than SASL PLAIN, a name it chose: Kerberos, a
  // certificate or a token. Both refusals come after the client's first
  // message past NEGOTIATE, where Kudu's come.
  std::string untrusted_peer;
};

class ClientNegotiator {
 public:
  // `tls_context` is null when this side's encryption is disabled.
  // `offer.authentication_only` (a loopback connection, loopback not
  // encrypted) is dropped when the client has something a man in the
  // middle wants: a token to send, or, requiring encryption, a CA to verify
  // the server or a certificate of its own (issue 47, finding 2). The
  // server's NEGOTIATE answer is clear and unauthenticated, so anyone on
  // the path can list the feature there; the handshake that follows proves
  // the real server, and then the SASL step, the token and every call would
  // go in the clear to whoever listed it.
  ClientNegotiator(std::string user, TlsFeatures offer, bool tls_required,
                   const TlsContext* tls_context, ClientAuthPolicy auth = {});
  ~ClientNegotiator();

  // The first message, NEGOTIATE.
  wire::NegotiatePB Start() const { return ClientNegotiateRequest(offer_, Others()); }
  // The server's next message. An error ends the negotiation; the
  // connection closes with it.
  Status Handle(const wire::NegotiatePB& server, NegotiationSteps* steps);

  const TlsFeatures& agreed() const { return agreed_; }
  std::unique_ptr<TlsSession> TakeTlsSession() { return std::move(tls_); }
  // After steps.start_kerberos: the exchange whose Start (any thread) makes
  // the SASL_INITIATE token; then its result goes to KerberosStarted.
  std::shared_ptr<GssapiSaslClient> TakeKerberosStart() { return std::move(gssapi_); }
  Status KerberosStarted(std::shared_ptr<GssapiSaslClient> gssapi, const Status& started,
                         std::string token, NegotiationSteps* steps);
  // Once done: the connection context to send (with the server's nonce,
  // wrapped, after Kerberos).
  Status ConnectionContext(wire::ConnectionContextPB* context);
  AuthenticationMethod method() const { return method_; }

 private:
  enum class Step { kNegotiate, kTlsHandshake, kSasl, kToken, kDone };
  OtherAuthn Others() const {
    return {auth_.certificate, !auth_.token.empty() && auth_.verifies_server};
  }
  Status ContinueHandshake(Slice server_token, NegotiationSteps* steps);
  // Picks PLAIN or GSSAPI from what the server offers.
  Status ChooseMechanism(const wire::NegotiatePB& server);
  Status BeginSasl(NegotiationSteps* steps);
  Status HandleSasl(const wire::NegotiatePB& server, NegotiationSteps* steps);
  // SASL_SUCCESS after Kerberos: keeps the nonce, checks channel bindings.
  Status CheckKerberosSuccess(const wire::NegotiatePB& server);

  const std::string user_;
  const TlsFeatures offer_;
  const bool tls_required_;
  const TlsContext* const tls_context_;
  const ClientAuthPolicy auth_;
  Step step_ = Step::kNegotiate;
  TlsFeatures agreed_;
  std::unique_ptr<TlsSession> tls_;
  AuthenticationMethod method_ = AuthenticationMethod::kPlain;
  std::shared_ptr<const KerberosCredentials> kerberos_;
  std::shared_ptr<GssapiSaslClient> gssapi_;
  // The server certificate's channel bindings, taken when the handshake ends.
  std::string channel_bindings_;
  std::string nonce_;
  bool have_nonce_ = false;
};

class ServerNegotiator {
 public:
  // `tls_context` is null when this side's encryption is disabled.
  ServerNegotiator(ServerTlsPolicy policy, const TlsContext* tls_context,
                   ServerAuthPolicy auth = {});
  ~ServerNegotiator();

  // The client's next message. An error is answered FATAL_UNAUTHORIZED by
  // the connection, which then closes.
  Status Handle(const wire::NegotiatePB& client, NegotiationSteps* steps);

  const TlsFeatures& agreed() const { return agreed_; }
  std::unique_ptr<TlsSession> TakeTlsSession() { return std::move(tls_); }
  // Who authenticated, once done.
  const std::string& user() const { return identity_.user; }
  const AuthenticatedIdentity& identity() const { return identity_; }
  // The client's connection context: after Kerberos it must carry the
  // nonce this server sent, wrapped (a replayed exchange cannot).
  Status CheckConnectionContext(const wire::ConnectionContextPB& context);
  // The last error of Handle was a token that did not verify: answer it
  // FATAL_INVALID_AUTHENTICATION_TOKEN (a Kudu client then gets a new one).
  bool token_refused() const { return token_refused_; }
  // After Handle failed in the handshake of a client that already reads
  // records (TLS 1.3, after this server's flight): the TLS alert to send it
  // raw instead of a clear error frame; empty otherwise.
  std::string TakeAlertForRecords() {
    std::string alert;
    alert.swap(alert_for_records_);
    return alert;
  }

 private:
  enum class Step { kNegotiate, kTlsHandshake, kSasl, kGssapi, kToken, kDone };
  SaslMechanisms Offered() const;
  Status HandleGssapiToken(Slice token, NegotiationSteps* steps);

  const ServerTlsPolicy policy_;
  const TlsContext* const tls_context_;
  const ServerAuthPolicy auth_;
  Step step_ = Step::kNegotiate;
  TlsFeatures agreed_;
  std::unique_ptr<TlsSession> tls_;
  AuthenticatedIdentity identity_;
  std::unique_ptr<GssapiSaslServer> gssapi_;
  std::string channel_bindings_;
  std::string nonce_;
  AuthnType chosen_ = AuthnType::kSasl;
  bool token_refused_ = false;
  bool sent_flight_ = false;  // the server's Finished went to the client
  std::string alert_for_records_;
};

}  // namespace osprey::transport
