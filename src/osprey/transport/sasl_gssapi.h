// Kerberos for KRPC negotiation: the SASL GSSAPI mechanism (RFC 4752) over
// MIT's GSS-API, as a Kudu peer's Cyrus SASL speaks it; and for the HTTP
// pages, the Negotiate token of a browser or curl --negotiate.
//
// KerberosCredentials is one side's Kerberos identity: a server's keytab
// and principal, or a client's ticket cache or keytab login. Immutable once
// made; any thread.
//
// GssapiSaslClient and GssapiSaslServer are one connection's exchange: the
// GSS context tokens, then the security-layer offer and choice of RFC 4752
// section 3.1, after which Wrap and Unwrap protect the nonce and channel
// bindings as Cyrus's sasl_encode and sasl_decode do (a 4-byte big-endian
// length, then a gss_wrap token). Owned by one connection; its reactor
// thread only.
//
// A client's first step may talk to the KDC (a service ticket it does not
// hold yet); everything else is local computation.
#pragma once

#include <memory>
#include <string>

#include "osprey/base/slice.h"
#include "osprey/base/status.h"

namespace osprey::transport {

class KerberosCredentials {
 public:
  ~KerberosCredentials();
  KerberosCredentials(const KerberosCredentials&) = delete;
  KerberosCredentials& operator=(const KerberosCredentials&) = delete;

  // A server: accepts tickets for `principal` ("kudu/_HOST": _HOST becomes
  // this machine's fully qualified name) with keys from `keytab_file`.
  // Checked now, so that a wrong keytab fails at start, not at the first
  // client.
  static Status ForServer(const std::string& keytab_file, const std::string& principal,
                          std::shared_ptr<const KerberosCredentials>* out);
  // A client: empty `keytab_file`: the tickets in the default ticket cache
  // (KRB5CCNAME), the one kinit fills; else logs in as `principal` from
  // `keytab_file` into a cache of its own. NotAuthorized, saying what to
  // do, when there is no usable ticket.
  static Status ForClient(const std::string& keytab_file, const std::string& principal,
                          std::shared_ptr<const KerberosCredentials>* out);

  // The principal these credentials are for ("kudu/db-1.example.com@EXAMPLE.COM").
  const std::string& principal() const { return principal_; }
  // The first component of the server principal: the service name clients
  // ask for ("kudu"), Kudu's sasl_proto_name.
  std::string service_name() const;

 private:
  friend class GssapiSaslClient;
  friend class GssapiSaslServer;
  friend Status AcceptHttpNegotiateToken(const KerberosCredentials&, Slice, std::string*,
                                         std::string*);
  struct Rep;
  explicit KerberosCredentials(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
  std::string principal_;
};

// `principal` with _HOST replaced by this machine's fully qualified name.
Status ResolveHostInPrincipal(const std::string& principal, std::string* out);

// The local user name for an authenticated principal, as a Kudu server
// maps it: krb5.conf's auth_to_local rules, else the principal's first
// component ("alice/admin@EXAMPLE.COM" -> "alice").
Status MapPrincipalToLocalName(const std::string& principal, std::string* local_name);

// HTTP's Negotiate authentication (SPNEGO, RFC 4559), a server's side: one
// token from an "Authorization: Negotiate" header, which for Kerberos
// carries the whole login. Sets the principal it proves
// ("alice@EXAMPLE.COM") and the token to send back, if any (Kerberos's
// mutual authentication). NotAuthorized with Kerberos's reason when it does
// not verify, or when the mechanism wants more rounds than one (NTLM), which
// stateless pages do not keep. Any thread; `server` stays unchanged.
Status AcceptHttpNegotiateToken(const KerberosCredentials& server, Slice token,
                                std::string* client_principal, std::string* reply);

class GssapiSaslClient {
 public:
  // Asks for service `service_name` on `host` (the host the client
  // dialled: "kudu@db-1.example.com", which Kerberos turns into
  // kudu/db-1.example.com@REALM).
  GssapiSaslClient(std::shared_ptr<const KerberosCredentials> credentials, std::string service_name,
                   std::string host);
  ~GssapiSaslClient();
  GssapiSaslClient(const GssapiSaslClient&) = delete;
  GssapiSaslClient& operator=(const GssapiSaslClient&) = delete;

  // The SASL_INITIATE token.
  Status Start(std::string* token);
  // A SASL_CHALLENGE token in, the SASL_RESPONSE token out.
  Status Step(Slice challenge, std::string* response);
  // Whether the security layer is chosen: the server's SASL_SUCCESS may
  // come.
  bool layer_chosen() const { return state_ == State::kLayerChosen; }

  Status Wrap(Slice plaintext, std::string* out);
  Status Unwrap(Slice wrapped, std::string* out);

 private:
  enum class State { kStart, kContext, kAwaitingLayerOffer, kLayerChosen };
  struct Rep;
  std::shared_ptr<const KerberosCredentials> credentials_;
  const std::string service_name_;
  const std::string host_;
  State state_ = State::kStart;
  bool confidential_ = false;
  std::unique_ptr<Rep> rep_;
};

class GssapiSaslServer {
 public:
  explicit GssapiSaslServer(std::shared_ptr<const KerberosCredentials> credentials);
  ~GssapiSaslServer();
  GssapiSaslServer(const GssapiSaslServer&) = delete;
  GssapiSaslServer& operator=(const GssapiSaslServer&) = delete;

  // The SASL_INITIATE token, then each SASL_RESPONSE token: *done when the
  // exchange succeeded (answer SASL_SUCCESS), else *challenge is the next
  // SASL_CHALLENGE. NotAuthorized with Kerberos's reason when the client
  // cannot be authenticated.
  Status Step(Slice token, std::string* challenge, bool* done);

  // Once done: who the client proved to be ("alice@EXAMPLE.COM").
  const std::string& client_principal() const { return client_principal_; }

  Status Wrap(Slice plaintext, std::string* out);
  Status Unwrap(Slice wrapped, std::string* out);

 private:
  enum class State { kContext, kOfferLayers, kAwaitingLayerChoice, kDone };
  struct Rep;
  Status OfferLayers(std::string* challenge);
  Status TakeLayerChoice(Slice token);

  std::shared_ptr<const KerberosCredentials> credentials_;
  State state_ = State::kContext;
  bool confidential_ = false;
  std::string client_principal_;
  std::unique_ptr<Rep> rep_;
};

}  // namespace osprey::transport
