#include "osprey/transport/negotiator.h"

#include <openssl/rand.h>
#include <openssl/ssl.h>

namespace osprey::transport {

using wire::NegotiatePB;

namespace {

NegotiatePB TlsHandshakeStep(std::string token) {
  NegotiatePB step;
  step.set_step(NegotiatePB::TLS_HANDSHAKE);
  step.set_tls_handshake(std::move(token));
  return step;
}

// One round of the handshake: the answer to `peer_token`, if any. *done
// once the handshake finished. On failure, *alert (if given) gets the
// alert OpenSSL made for the peer.
Status HandshakeRound(TlsSession* tls, Slice peer_token, NegotiationSteps* steps, bool* done,
                      std::string* alert = nullptr) {
  std::string token;
  Status s = tls->Handshake(peer_token, &token, done);
  if (!s.ok()) {
    if (alert != nullptr) *alert = std::move(token);
    return s;
  }
  if (!token.empty()) {
    steps->send.push_back(TlsHandshakeStep(std::move(token)));
  } else if (!*done) {
    return Status::NotAuthorized("TLS handshake: the peer's token was incomplete");
  }
  return Status::OK();
}

// The client's offer without TLS_AUTHENTICATION_ONLY where a downgrade
// would cost it something (see ClientNegotiator's constructor). Tokens
// never leave the records, whatever the encryption setting; the rest only
// when the user asked for encryption, as Kudu's loopback rule otherwise
// stands (a client with optional encryption can be stripped of TLS anyway).
TlsFeatures ClientOffer(TlsFeatures offer, bool tls_required, const ClientAuthPolicy& auth) {
  const bool sends_token = !auth.token.empty() && auth.verifies_server;
  const bool has_credentials =
      auth.verifies_server || auth.certificate || auth.presents_certificate;
  if (sends_token || (tls_required && has_credentials)) offer.authentication_only = false;
  return offer;
}

}  // namespace

ClientNegotiator::ClientNegotiator(std::string user, TlsFeatures offer, bool tls_required,
                                   const TlsContext* tls_context, ClientAuthPolicy auth)
    : user_(std::move(user)),
      offer_(ClientOffer(offer, tls_required, auth)),
      tls_required_(tls_required),
      tls_context_(tls_context),
      auth_(std::move(auth)) {}

ClientNegotiator::~ClientNegotiator() = default;

Status ClientNegotiator::ChooseMechanism(const NegotiatePB& server) {
  SaslMechanisms offered = ListedMechanisms(server);
  const bool required = auth_.mode == RpcAuthentication::kRequired;
  if (auth_.mode != RpcAuthentication::kDisabled && offered.gssapi) {
    kerberos_ = auth_.kerberos;
    Status creds;
    if (kerberos_ == nullptr) creds = KerberosCredentials::ForClient("", "", &kerberos_);
    if (creds.ok()) {
      method_ = AuthenticationMethod::kKerberos;
      return Status::OK();
    }
    if (required || !offered.plain) {
      return Status::NotAuthorized(
          std::string("negotiation: the server ") +
          (offered.plain ? "offers Kerberos" : "requires Kerberos (it offers only GSSAPI)") +
          ", and this client has no usable Kerberos credentials: " + creds.message());
    }
  }
  if (required) {
    return Status::NotAuthorized(
        "negotiation: the server does not offer Kerberos (SASL GSSAPI), which this client "
        "requires (rpc_authentication=required)");
  }
  if (!offered.plain) {
    return Status::NotAuthorized(
        "negotiation: the server requires Kerberos (it offers only GSSAPI) and this client's "
        "rpc_authentication is disabled");
  }
  method_ = AuthenticationMethod::kPlain;
  return Status::OK();
}

Status ClientNegotiator::BeginSasl(NegotiationSteps* steps) {
  step_ = Step::kSasl;
  if (method_ == AuthenticationMethod::kPlain) {
    steps->send.push_back(ClientSaslInitiate(user_));
    return Status::OK();
  }
  if (auth_.host.empty()) {
    return Status::NotAuthorized(
        "negotiation: Kerberos asks for the server's principal by the host dialled, and this "
        "connection has none (a Unix socket): dial the server by host name");
  }
  gssapi_ = std::make_shared<GssapiSaslClient>(kerberos_, auth_.service_name, auth_.host);
  steps->start_kerberos = true;
  return Status::OK();
}

Status ClientNegotiator::KerberosStarted(std::shared_ptr<GssapiSaslClient> gssapi,
                                         const Status& started, std::string token,
                                         NegotiationSteps* steps) {
  if (step_ != Step::kSasl || gssapi == nullptr) {
    return Status::IllegalState("negotiation: a Kerberos start nobody asked for");
  }
  OSPREY_RETURN_NOT_OK(started);
  gssapi_ = std::move(gssapi);
  steps->send.push_back(ClientGssapiInitiate(std::move(token)));
  return Status::OK();
}

Status ClientNegotiator::HandleSasl(const NegotiatePB& server, NegotiationSteps* steps) {
  if (method_ == AuthenticationMethod::kPlain) {
    OSPREY_RETURN_NOT_OK(ClientCheckSaslSuccess(server));
  } else if (server.step() == NegotiatePB::SASL_CHALLENGE) {
    NegotiatePB response;
    response.set_step(NegotiatePB::SASL_RESPONSE);
    OSPREY_RETURN_NOT_OK(gssapi_->Step(server.token(), response.mutable_token()));
    steps->send.push_back(std::move(response));
    return Status::OK();
  } else if (server.step() != NegotiatePB::SASL_SUCCESS) {
    return Status::NetworkError("negotiation: expected SASL_CHALLENGE or SASL_SUCCESS, got " +
                                StepName(server));
  } else {
    OSPREY_RETURN_NOT_OK(CheckKerberosSuccess(server));
  }
  step_ = Step::kDone;
  steps->done = true;
  return Status::OK();
}

Status ClientNegotiator::CheckKerberosSuccess(const NegotiatePB& server) {
  if (!gssapi_->layer_chosen()) {
    return Status::NotAuthorized(
        "negotiation: the server said SASL_SUCCESS before Kerberos chose its security layer");
  }
  if (server.has_nonce()) {
    nonce_ = server.nonce();
    have_nonce_ = true;
  }
  if (!agreed_.tls) return Status::OK();
  if (!server.has_channel_bindings()) {
    return Status::NotAuthorized(
        "negotiation: the server sent no channel bindings after Kerberos over TLS");
  }
  std::string got;
  OSPREY_RETURN_NOT_OK(gssapi_->Unwrap(server.channel_bindings(), &got));
  if (got != channel_bindings_) {
    return Status::NotAuthorized(
        "negotiation: the channel bindings do not match the certificate this client saw: "
        "someone between client and server terminated TLS (a man in the middle)");
  }
  return Status::OK();
}

Status ClientNegotiator::ConnectionContext(wire::ConnectionContextPB* context) {
  if (!have_nonce_) {
    *context = ClientConnectionContext(user_);
    return Status::OK();
  }
  std::string wrapped;
  OSPREY_RETURN_NOT_OK(gssapi_->Wrap(nonce_, &wrapped));
  *context = ClientConnectionContext(user_, &wrapped);
  return Status::OK();
}

Status ClientNegotiator::Handle(const NegotiatePB& server, NegotiationSteps* steps) {
  switch (step_) {
    case Step::kNegotiate: {
      AuthnType chosen = AuthnType::kSasl;
      OSPREY_RETURN_NOT_OK(
          ClientCheckNegotiate(server, offer_, tls_required_, &agreed_, Others(), &chosen));
      if (chosen == AuthnType::kCertificate) {
        method_ = AuthenticationMethod::kCertificate;
      } else if (chosen == AuthnType::kToken) {
        method_ = AuthenticationMethod::kToken;
      } else {
        OSPREY_RETURN_NOT_OK(ChooseMechanism(server));
      }
      if (agreed_.tls) {
        if (tls_context_ == nullptr) {
          return Status::IllegalState("negotiation: TLS agreed without a TLS context");
        }
        OSPREY_RETURN_NOT_OK(tls_context_->NewSession(&tls_, auth_.host));
        step_ = Step::kTlsHandshake;
        return ContinueHandshake(Slice(), steps);  // the ClientHello
      }
      return BeginSasl(steps);
    }
    case Step::kTlsHandshake:
      if (server.step() != NegotiatePB::TLS_HANDSHAKE) {
        return Status::NetworkError("negotiation: expected TLS_HANDSHAKE from server, got " +
                                    StepName(server));
      }
      return ContinueHandshake(server.tls_handshake(), steps);
    case Step::kSasl:
      return HandleSasl(server, steps);
    case Step::kToken:
      if (server.step() != NegotiatePB::TOKEN_EXCHANGE) {
        return Status::NetworkError("negotiation: expected TOKEN_EXCHANGE from server, got " +
                                    StepName(server));
      }
      step_ = Step::kDone;
      steps->done = true;
      return Status::OK();
    case Step::kDone:
      break;
  }
  return Status::NetworkError("unexpected negotiation message from server");
}

Status ClientNegotiator::ContinueHandshake(Slice server_token, NegotiationSteps* steps) {
  bool done = false;
  OSPREY_RETURN_NOT_OK(HandshakeRound(tls_.get(), server_token, steps, &done));
  if (!done) return Status::OK();
  steps->tls_handshake_done = true;
  if (method_ == AuthenticationMethod::kToken) {
    if (!agreed_.authentication_only) steps->records_from = static_cast<int>(steps->send.size());
    steps->send.push_back(ClientTokenExchange(auth_.token));
    step_ = Step::kToken;
    return Status::OK();
  }
  if (method_ == AuthenticationMethod::kCertificate) {
    // The certificate was the proof: no SASL; the context and calls follow
    // inside the records unless both sides chose authentication only.
    if (!agreed_.authentication_only) steps->records_from = static_cast<int>(steps->send.size());
    step_ = Step::kDone;
    steps->done = true;
    return Status::OK();
  }
  if (method_ == AuthenticationMethod::kKerberos) {
    OSPREY_RETURN_NOT_OK(tls_->ServerEndPointBindings(&channel_bindings_));
  }
  // The SASL exchange follows at once, without waiting for an answer (with
  // TLS 1.3 the client's last token needs none), inside the records unless
  // both sides chose authentication only.
  if (!agreed_.authentication_only) steps->records_from = static_cast<int>(steps->send.size());
  return BeginSasl(steps);
}

ServerNegotiator::ServerNegotiator(ServerTlsPolicy policy, const TlsContext* tls_context,
                                   ServerAuthPolicy auth)
    : policy_(policy), tls_context_(tls_context), auth_(std::move(auth)) {}

ServerNegotiator::~ServerNegotiator() = default;

SaslMechanisms ServerNegotiator::Offered() const {
  SaslMechanisms m;
  m.gssapi = auth_.mode != RpcAuthentication::kDisabled && auth_.kerberos != nullptr;
  m.plain = auth_.mode != RpcAuthentication::kRequired;
  return m;
}

Status ServerNegotiator::HandleGssapiToken(Slice token, NegotiationSteps* steps) {
  NegotiatePB answer;
  bool done = false;
  OSPREY_RETURN_NOT_OK(gssapi_->Step(token, answer.mutable_token(), &done));
  if (!done) {
    answer.set_step(NegotiatePB::SASL_CHALLENGE);
    steps->send.push_back(std::move(answer));
    return Status::OK();
  }
  identity_.principal = gssapi_->client_principal();
  identity_.method = AuthenticationMethod::kKerberos;
  OSPREY_RETURN_NOT_OK(MapPrincipalToLocalName(identity_.principal, &identity_.user));
  answer.Clear();
  answer.set_step(NegotiatePB::SASL_SUCCESS);
  // A fresh nonce the client must return wrapped in its connection
  // context: a recorded exchange replayed on a new connection cannot.
  nonce_.resize(16);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce_.data()), 16) != 1) {
    return Status::IllegalState("negotiation: no random bytes for the nonce");
  }
  answer.set_nonce(nonce_);
  if (agreed_.tls) {
    OSPREY_RETURN_NOT_OK(gssapi_->Wrap(channel_bindings_, answer.mutable_channel_bindings()));
  }
  steps->send.push_back(std::move(answer));
  step_ = Step::kDone;
  steps->done = true;
  return Status::OK();
}

Status ServerNegotiator::CheckConnectionContext(const wire::ConnectionContextPB& context) {
  if (nonce_.empty()) return Status::OK();
  if (!context.has_encoded_nonce()) {
    return Status::NotAuthorized("the connection context lacks the nonce Kerberos requires");
  }
  std::string got;
  Status s = gssapi_->Unwrap(context.encoded_nonce(), &got);
  if (!s.ok()) return Status::NotAuthorized("the connection context's nonce: " + s.message());
  if (got != nonce_) {
    return Status::NotAuthorized(
        "the connection context's nonce is not the one this server sent: a replayed "
        "negotiation?");
  }
  return Status::OK();
}

Status ServerNegotiator::Handle(const NegotiatePB& client, NegotiationSteps* steps) {
  switch (step_) {
    case Step::kNegotiate: {
      NegotiatePB answer;
      OtherAuthn acceptable{auth_.certificate,
                            auth_.verifiable_certificate && auth_.token_verifier != nullptr};
      OSPREY_RETURN_NOT_OK(ServerAnswerNegotiate(client, policy_, &answer, &agreed_, Offered(),
                                                 acceptable, &chosen_));
      if (agreed_.tls) {
        if (tls_context_ == nullptr) {
          return Status::IllegalState("negotiation: TLS agreed without a TLS context");
        }
        OSPREY_RETURN_NOT_OK(tls_context_->NewSession(&tls_));
        // As Kudu: a token, not a certificate, proves who this client is.
        if (chosen_ == AuthnType::kToken) tls_->DoNotRequirePeerCertificate();
        step_ = Step::kTlsHandshake;
      } else {
        step_ = Step::kSasl;
      }
      steps->send.push_back(std::move(answer));
      return Status::OK();
    }
    case Step::kTlsHandshake: {
      if (client.step() != NegotiatePB::TLS_HANDSHAKE) {
        return Status::NotAuthorized("negotiation: expected TLS_HANDSHAKE, got " +
                                     StepName(client));
      }
      bool done = false;
      std::string alert;
      Status hs = HandshakeRound(tls_.get(), client.tls_handshake(), steps, &done, &alert);
      if (!hs.ok()) {
        // With TLS 1.3 the client finished its handshake on this server's
        // first flight, and reads records since: a clear frame would be
        // refused (as anyone could send it), an alert is its own record.
        if (sent_flight_ && tls_->version() == TLS1_3_VERSION) {
          alert_for_records_ = std::move(alert);
        }
        return hs;
      }
      sent_flight_ = tls_->sent_finished();
      if (done) {
        steps->tls_handshake_done = true;
        if (Offered().gssapi)
          OSPREY_RETURN_NOT_OK(tls_->ServerEndPointBindings(&channel_bindings_));
        // Our last token goes in the clear; what follows is records.
        if (!agreed_.authentication_only) {
          steps->records_from = static_cast<int>(steps->send.size());
        }
        step_ = Step::kSasl;
        if (chosen_ == AuthnType::kToken) step_ = Step::kToken;
        if (chosen_ == AuthnType::kCertificate) {
          OSPREY_RETURN_NOT_OK(tls_->PeerCertificateIdentity(
              &identity_.user, &identity_.principal, auth_.mode == RpcAuthentication::kRequired));
          identity_.method = AuthenticationMethod::kCertificate;
          step_ = Step::kDone;
          steps->done = true;
        }
      }
      return Status::OK();
    }
    case Step::kSasl: {
      if (!auth_.untrusted_peer.empty() && !agreed_.tls) {
        return Status::NotAuthorized(
            "unencrypted connections from " + auth_.untrusted_peer +
            " are refused: it is outside this server's trusted subnets (Kudu's "
            "--trusted_subnets, MessengerBuilder::set_trusted_subnets); connect with TLS");
      }
      SaslMechanisms chosen;
      OSPREY_RETURN_NOT_OK(InitiatedMechanism(client, Offered(), &chosen));
      if (chosen.gssapi) {
        gssapi_ = std::make_unique<GssapiSaslServer>(auth_.kerberos);
        step_ = Step::kGssapi;
        return HandleGssapiToken(client.token(), steps);
      }
      if (!auth_.untrusted_peer.empty()) {
        return Status::NotAuthorized(
            "SASL PLAIN (a user name the client chose) from " + auth_.untrusted_peer +
            " is refused: it is outside this server's trusted subnets (Kudu's "
            "--trusted_subnets, MessengerBuilder::set_trusted_subnets); authenticate with "
            "Kerberos, a certificate or a token");
      }
      NegotiatePB answer;
      OSPREY_RETURN_NOT_OK(ServerAnswerSaslInitiate(client, &identity_.user, &answer));
      identity_.method = AuthenticationMethod::kPlain;
      steps->send.push_back(std::move(answer));
      step_ = Step::kDone;
      steps->done = true;
      return Status::OK();
    }
    case Step::kToken: {
      if (client.step() != NegotiatePB::TOKEN_EXCHANGE || !client.has_authn_token()) {
        return Status::NotAuthorized("negotiation: expected TOKEN_EXCHANGE with a token, got " +
                                     StepName(client));
      }
      Status s = auth_.token_verifier->Verify(client.authn_token(), &identity_.user);
      if (!s.ok()) {
        token_refused_ = true;
        return s;
      }
      identity_.principal.clear();
      identity_.method = AuthenticationMethod::kToken;
      NegotiatePB answer;
      answer.set_step(NegotiatePB::TOKEN_EXCHANGE);
      steps->send.push_back(std::move(answer));
      step_ = Step::kDone;
      steps->done = true;
      return Status::OK();
    }
    case Step::kGssapi:
      if (client.step() != NegotiatePB::SASL_RESPONSE) {
        return Status::NotAuthorized("negotiation: expected SASL_RESPONSE, got " +
                                     StepName(client));
      }
      if (!client.has_token()) {
        return Status::NotAuthorized("negotiation: a SASL_RESPONSE without a token");
      }
      return HandleGssapiToken(client.token(), steps);
    case Step::kDone:
      break;
  }
  return Status::NotAuthorized("negotiation: unexpected " + StepName(client) +
                               " after negotiation finished");
}

}  // namespace osprey::transport
