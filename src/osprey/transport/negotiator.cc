#include "osprey/transport/negotiator.h"

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
// once the handshake finished.
Status HandshakeRound(TlsSession* tls, Slice peer_token, NegotiationSteps* steps, bool* done) {
  std::string token;
  OSPREY_RETURN_NOT_OK(tls->Handshake(peer_token, &token, done));
  if (!token.empty()) {
    steps->send.push_back(TlsHandshakeStep(std::move(token)));
  } else if (!*done) {
    return Status::NotAuthorized("TLS handshake: the peer's token was incomplete");
  }
  return Status::OK();
}

}  // namespace

ClientNegotiator::ClientNegotiator(std::string user, TlsFeatures offer, bool tls_required,
                                   const TlsContext* tls_context)
    : user_(std::move(user)),
      offer_(offer),
      tls_required_(tls_required),
      tls_context_(tls_context) {}

Status ClientNegotiator::Handle(const NegotiatePB& server, NegotiationSteps* steps) {
  switch (step_) {
    case Step::kNegotiate:
      OSPREY_RETURN_NOT_OK(ClientCheckNegotiate(server, offer_, tls_required_, &agreed_));
      if (agreed_.tls) {
        if (tls_context_ == nullptr) {
          return Status::IllegalState("negotiation: TLS agreed without a TLS context");
        }
        OSPREY_RETURN_NOT_OK(tls_context_->NewSession(&tls_));
        step_ = Step::kTlsHandshake;
        return ContinueHandshake(Slice(), steps);  // the ClientHello
      }
      steps->send.push_back(ClientSaslInitiate(user_));
      step_ = Step::kSasl;
      return Status::OK();
    case Step::kTlsHandshake:
      if (server.step() != NegotiatePB::TLS_HANDSHAKE) {
        return Status::NetworkError("negotiation: expected TLS_HANDSHAKE from server, got " +
                                    StepName(server));
      }
      return ContinueHandshake(server.tls_handshake(), steps);
    case Step::kSasl:
      OSPREY_RETURN_NOT_OK(ClientCheckSaslSuccess(server));
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
  // The SASL exchange follows at once, without waiting for an answer (with
  // TLS 1.3 the client's last token needs none), inside the records unless
  // both sides chose authentication only.
  if (!agreed_.authentication_only) steps->records_from = static_cast<int>(steps->send.size());
  steps->send.push_back(ClientSaslInitiate(user_));
  step_ = Step::kSasl;
  return Status::OK();
}

ServerNegotiator::ServerNegotiator(ServerTlsPolicy policy, const TlsContext* tls_context)
    : policy_(policy), tls_context_(tls_context) {}

Status ServerNegotiator::Handle(const NegotiatePB& client, NegotiationSteps* steps) {
  switch (step_) {
    case Step::kNegotiate: {
      NegotiatePB answer;
      OSPREY_RETURN_NOT_OK(ServerAnswerNegotiate(client, policy_, &answer, &agreed_));
      if (agreed_.tls) {
        if (tls_context_ == nullptr) {
          return Status::IllegalState("negotiation: TLS agreed without a TLS context");
        }
        OSPREY_RETURN_NOT_OK(tls_context_->NewSession(&tls_));
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
      OSPREY_RETURN_NOT_OK(HandshakeRound(tls_.get(), client.tls_handshake(), steps, &done));
      if (done) {
        steps->tls_handshake_done = true;
        // Our last token goes in the clear; what follows is records.
        if (!agreed_.authentication_only) {
          steps->records_from = static_cast<int>(steps->send.size());
        }
        step_ = Step::kSasl;
      }
      return Status::OK();
    }
    case Step::kSasl: {
      NegotiatePB answer;
      OSPREY_RETURN_NOT_OK(ServerAnswerSaslInitiate(client, &user_, &answer));
      steps->send.push_back(std::move(answer));
      step_ = Step::kDone;
      steps->done = true;
      return Status::OK();
    }
    case Step::kDone:
      break;
  }
  return Status::NotAuthorized("negotiation: unexpected " + StepName(client) +
                               " after negotiation finished");
}

}  // namespace osprey::transport
