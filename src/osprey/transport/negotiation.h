// The negotiation steps of KRPC (wire-protocol.md section 5) as pure
// functions over NegotiatePB messages: what a client sends, and how a server
// answers. Connection drives them on its reactor; tests and fuzzers call
// them directly.
#pragma once

#include <string>

#include "osprey/base/status.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::transport {

// Client: the first NEGOTIATE message. Lists APPLICATION_FEATURE_FLAGS and
// the sasl authentication type, no mechanisms (as Kudu's client), no TLS.
wire::NegotiatePB ClientNegotiateRequest();

// Client: checks the server's NEGOTIATE answer and builds SASL_INITIATE
// with PLAIN for `user`. NotAuthorized if the server offers no PLAIN or
// chose an authentication type other than sasl.
Status ClientSaslInitiate(const wire::NegotiatePB& server_negotiate, const std::string& user,
                          wire::NegotiatePB* sasl_initiate);

// Client: checks that the server accepted the SASL exchange.
Status ClientCheckSaslSuccess(const wire::NegotiatePB& server_reply);

// Client: the connection context sent with call id -3.
wire::ConnectionContextPB ClientConnectionContext(const std::string& user);

// Server: answers a client's NEGOTIATE. Features both sides support (TLS
// left out, this server has none), mechanism PLAIN, and the sasl type when
// the client listed authentication types. NotAuthorized when the client
// offers no type this server accepts; Corruption for a wrong step.
Status ServerAnswerNegotiate(const wire::NegotiatePB& client_negotiate, wire::NegotiatePB* answer);

// Server: checks SASL_INITIATE with PLAIN, sets *user to the authcid and
// builds the SASL_SUCCESS answer. NotAuthorized for another mechanism.
Status ServerAnswerSaslInitiate(const wire::NegotiatePB& client_initiate, std::string* user,
                                wire::NegotiatePB* answer);

}  // namespace osprey::transport
