// TlsContext and TlsSession: TLS for KRPC connections, over OpenSSL 3 with
// memory BIOs, so that the handshake can travel inside NegotiatePB
// tls_handshake tokens (wire-protocol.md, section 5, step 2) and records
// can be read and written by a non-blocking reactor.
//
// TlsContext is one side's configuration (certificate, key, CA to verify
// peers with); immutable once created, any thread. TlsSession is one
// connection's TLS state; one thread at a time (its reactor).
//
#pragma once

#include <memory>
#include <string>

#include "osprey/base/slice.h"
#include "osprey/base/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace osprey::transport {

class TlsSession;

struct TlsOptions {
  // PEM files. A server without cert_file/key_file makes a self-signed
  // certificate at start (enough for `optional` encryption, where the
  // client does not verify it).
  std::string cert_file;
  std::string key_file;
  // PEM bundle of CAs whose certificates the peer must present; empty: the
  // peer is not verified.
  std::string ca_file;
  // Client with a ca_file: the server's certificate must also name the host
  // dialled (a DNS name or IP address in its subject alternative names).
  // Off, any certificate the CA signed, for any host, passes as the
  // server: whoever holds one can impersonate every server.
  bool verify_server_host = true;
};

class TlsContext {
 public:
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  static Status CreateServer(const TlsOptions& options, std::unique_ptr<TlsContext>* out);
  static Status CreateClient(const TlsOptions& options, std::unique_ptr<TlsContext>* out);

  // `peer_host`: on a client, the host it dialled ("db-1.example.com" or
  // "10.0.0.7"), which the server certificate must name when the context
  // checks hosts; empty (a Unix socket): not checked.
  Status NewSession(std::unique_ptr<TlsSession>* out, const std::string& peer_host = "") const;
  bool is_server() const { return server_; }
  // It presents a certificate from files and verifies peers against a CA:
  // it can authenticate by certificate (Kudu's authn_types.certificate).
  bool authenticates_by_certificate() const { return by_certificate_; }
  // It verifies the peer's certificate against a CA.
  bool verifies_peer() const { return verifies_peer_; }
  // It presents a certificate from files (a server without files presents
  // a self-signed one, which does not count).
  bool presents_certificate() const { return presents_certificate_; }

  // A self-signed certificate and its key, PEM, for `common_name`: what a
  // server without configured files uses, and what tests build CAs from.
  // `subject_alt_names` in OpenSSL's syntax: "IP:127.0.0.1,DNS:localhost".
  static Status MakeSelfSigned(const std::string& common_name, std::string* cert_pem,
                               std::string* key_pem, const std::string& subject_alt_names = "");

 private:
  TlsContext(SSL_CTX* ctx, bool server) : ctx_(ctx), server_(server) {}
  SSL_CTX* ctx_;
  bool server_;
  bool check_host_ = false;
  bool by_certificate_ = false;
  bool verifies_peer_ = false;
  bool presents_certificate_ = false;
};

class TlsSession {
 public:
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // One handshake step: takes the peer's token (empty for the client's
  // first step) and appends the token to send back to *out (possibly
  // empty). *done once this side has finished; a failed verification or a
  // malformed token is NotAuthorized with OpenSSL's reason.
  // On failure *out holds what OpenSSL wrote for the peer, an alert.
  Status Handshake(Slice peer_token, std::string* out, bool* done);
  bool handshake_done() const { return handshake_done_; }
  // The protocol version agreed so far (TLS1_3_VERSION, ...), 0 before.
  int version() const;
  // This side has sent its Finished message (not, say, only a
  // HelloRetryRequest).
  bool sent_finished() const;

  // After the handshake: plaintext in, TLS records appended to *records.
  Status Encrypt(Slice plaintext, std::string* records);

  // Records in (any split). OpenSSL reads them in place: `records` must
  // stay valid until ReadPlaintext has returned *n == 0 or an error.
  void FeedRecords(Slice records);
  // Up to `cap` bytes of plaintext from the records fed so far; *n == 0
  // when a record is still incomplete. Garbage or a record that fails
  // authentication is NetworkError; the peer's close_notify is Aborted.
  Status ReadPlaintext(uint8_t* dst, size_t cap, size_t* n);
  // FeedRecords and ReadPlaintext until done, appending to *plaintext
  // (also what came before an error).
  Status Decrypt(Slice records, std::string* plaintext);

  // Records OpenSSL made while reading (an alert, a KeyUpdate answer):
  // appended to *records, to be sent after everything Encrypt made so far.
  void TakeOutput(std::string* records);
  // Appends a close_notify alert to *records: a clean end of the session.
  void CloseNotify(std::string* records);

  // The peer certificate's subject, or empty.
  std::string PeerSubject() const;
  // Server, before the handshake: a client without a certificate is let in
  // (one that authenticates with a token); one that presents a certificate
  // is still verified.
  void DoNotRequirePeerCertificate();
  // Who the verified peer certificate names, as a Kudu server reads it:
  // the subject's userId (UID), else (unless `require_user_id`) its CN,
  // and the Kerberos principal of Kudu's extension (OID
  // 2.25.243346677289068076843480765133256509912), if any. NotAuthorized
  // without a peer certificate or a name in it. Kudu's internal CA always
  // writes the UID; a CN is only a host name in most certificates, and
  // whoever has any certificate of the CA could log in as it.
  Status PeerCertificateIdentity(std::string* user, std::string* principal,
                                 bool require_user_id) const;
  // RFC 5929's tls-server-end-point channel bindings (the hash of the
  // server's certificate), which a Kerberos server sends wrapped so that a
  // client can tell that no one in the middle terminated its TLS.
  Status ServerEndPointBindings(std::string* out) const;

 private:
  friend class TlsContext;
  friend struct SessionBio;
  TlsSession(SSL* ssl, bool server) : ssl_(ssl), server_(server) {}
  SSL* ssl_;
  const bool server_;
  bool handshake_done_ = false;
  // What the session's BIO reads from: the caller's records, in place;
  // `unread_` keeps what is left when the caller's buffer goes away.
  Slice in_;
  std::string unread_;
  // Where the session's BIO appends records: the caller's buffer during
  // Handshake, Encrypt and CloseNotify, else `pending_out_`.
  std::string* out_ = &pending_out_;
  std::string pending_out_;
};

}  // namespace osprey::transport
