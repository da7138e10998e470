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

#include "osprey/base/status.h"
#include "osprey/transport/negotiation.h"
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
};

class ClientNegotiator {
 public:
  // `tls_context` is null when this side's encryption is disabled.
  ClientNegotiator(std::string user, TlsFeatures offer, bool tls_required,
                   const TlsContext* tls_context);

  // The first message, NEGOTIATE.
  wire::NegotiatePB Start() const { return ClientNegotiateRequest(offer_); }
  // The server's next message. An error ends the negotiation; the
  // connection closes with it.
  Status Handle(const wire::NegotiatePB& server, NegotiationSteps* steps);

  const TlsFeatures& agreed() const { return agreed_; }
  std::unique_ptr<TlsSession> TakeTlsSession() { return std::move(tls_); }

 private:
  enum class Step { kNegotiate, kTlsHandshake, kSasl, kDone };
  Status ContinueHandshake(Slice server_token, NegotiationSteps* steps);

  const std::string user_;
  const TlsFeatures offer_;
  const bool tls_required_;
  const TlsContext* const tls_context_;
  Step step_ = Step::kNegotiate;
  TlsFeatures agreed_;
  std::unique_ptr<TlsSession> tls_;
};

class ServerNegotiator {
 public:
  // `tls_context` is null when this side's encryption is disabled.
  ServerNegotiator(ServerTlsPolicy policy, const TlsContext* tls_context);

  // The client's next message. An error is answered FATAL_UNAUTHORIZED by
  // the connection, which then closes.
  Status Handle(const wire::NegotiatePB& client, NegotiationSteps* steps);

  const TlsFeatures& agreed() const { return agreed_; }
  std::unique_ptr<TlsSession> TakeTlsSession() { return std::move(tls_); }
  // Who authenticated, once done.
  const std::string& user() const { return user_; }

 private:
  enum class Step { kNegotiate, kTlsHandshake, kSasl, kDone };

  const ServerTlsPolicy policy_;
  const TlsContext* const tls_context_;
  Step step_ = Step::kNegotiate;
  TlsFeatures agreed_;
  std::unique_ptr<TlsSession> tls_;
  std::string user_;
};

}  // namespace osprey::transport
