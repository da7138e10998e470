#include "osprey/transport/tls_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <string.h>

#include <mutex>

namespace osprey::transport {
namespace {

// OpenSSL's queued errors as one line, clearing the queue.
std::string OpenSslErrors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error queued" : out;
}

Status LoadCredentials(SSL_CTX* ctx, const TlsOptions& o) {
  if (o.cert_file.empty() != o.key_file.empty()) {
    return Status::InvalidArgument("TLS needs both a certificate and a key file, or neither");
  }
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
      return Status::InvalidArgument("cannot load TLS certificate " + o.cert_file + ": " +
                                     OpenSslErrors());
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return Status::InvalidArgument("cannot load TLS key " + o.key_file + ": " + OpenSslErrors());
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return Status::InvalidArgument("TLS key " + o.key_file + " does not match certificate " +
                                     o.cert_file);
    }
  }
  if (!o.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("cannot load TLS CA bundle " + o.ca_file + ": " +
                                     OpenSslErrors());
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return Status::OK();
}

SSL_CTX* NewCtx(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Tickets would be post-handshake records: KRPC's handshake is a fixed
  // exchange of tokens, with nothing after the last one.
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  // A renegotiation would need handshake messages in the middle of the
  // records, which the reactor's I/O does not expect: refuse it.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_num_tickets(ctx, 0);
  return ctx;
}

}  // namespace

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

Status TlsContext::MakeSelfSigned(const std::string& common_name, std::string* cert_pem,
                                  std::string* key_pem, const std::string& subject_alt_names) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) return Status::IllegalState("cannot make a key: " + OpenSslErrors());
  X509* x = X509_new();
  Status s;
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 10L * 365 * 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x, name);
  // A CA as well, so that a peer can trust it directly as its CA bundle.
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x, x, nullptr, nullptr, 0);
  X509_EXTENSION* bc = X509V3_EXT_conf_nid(nullptr, &v3, NID_basic_constraints, "critical,CA:TRUE");
  if (bc != nullptr) {
    X509_add_ext(x, bc, -1);
    X509_EXTENSION_free(bc);
  }
  if (!subject_alt_names.empty()) {
    X509_EXTENSION* san =
        X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, subject_alt_names.c_str());
    if (san == nullptr) {
      X509_free(x);
      EVP_PKEY_free(key);
      return Status::InvalidArgument("bad subject alternative names '" + subject_alt_names + "'");
    }
    X509_add_ext(x, san, -1);
    X509_EXTENSION_free(san);
  }
  if (X509_sign(x, key, EVP_sha256()) == 0) {
    s = Status::IllegalState("cannot sign a certificate: " + OpenSslErrors());
  }
  if (s.ok()) {
    BIO* cb = BIO_new(BIO_s_mem());
    BIO* kb = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(cb, x);
    PEM_write_bio_PrivateKey(kb, key, nullptr, nullptr, 0, nullptr, nullptr);
    char* p;
    long n = BIO_get_mem_data(cb, &p);
    cert_pem->assign(p, static_cast<size_t>(n));
    n = BIO_get_mem_data(kb, &p);
    key_pem->assign(p, static_cast<size_t>(n));
    BIO_free(cb);
    BIO_free(kb);
  }
  X509_free(x);
  EVP_PKEY_free(key);
  return s;
}

Status TlsContext::CreateServer(const TlsOptions& options, std::unique_ptr<TlsContext>* out) {
  SSL_CTX* ctx = NewCtx(true);
  if (ctx == nullptr) return Status::IllegalState("SSL_CTX_new: " + OpenSslErrors());
  std::unique_ptr<TlsContext> c(new TlsContext(ctx, true));
  OSPREY_RETURN_NOT_OK(LoadCredentials(ctx, options));
  c->by_certificate_ = !options.cert_file.empty() && !options.ca_file.empty();
  c->verifies_peer_ = !options.ca_file.empty();
  c->presents_certificate_ = !options.cert_file.empty();
  if (options.cert_file.empty()) {
    std::string cert, key;
    OSPREY_RETURN_NOT_OK(MakeSelfSigned("osprey-server", &cert, &key));
    BIO* cb = BIO_new_mem_buf(cert.data(), static_cast<int>(cert.size()));
    BIO* kb = BIO_new_mem_buf(key.data(), static_cast<int>(key.size()));
    X509* x = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
    EVP_PKEY* k = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
    bool ok = x && k && SSL_CTX_use_certificate(ctx, x) == 1 && SSL_CTX_use_PrivateKey(ctx, k) == 1;
    X509_free(x);
    EVP_PKEY_free(k);
    BIO_free(cb);
    BIO_free(kb);
    if (!ok)
      return Status::IllegalState("cannot use the self-signed certificate: " + OpenSslErrors());
  }
  *out = std::move(c);
  return Status::OK();
}

Status TlsContext::CreateClient(const TlsOptions& options, std::unique_ptr<TlsContext>* out) {
  SSL_CTX* ctx = NewCtx(false);
  if (ctx == nullptr) return Status::IllegalState("SSL_CTX_new: " + OpenSslErrors());
  std::unique_ptr<TlsContext> c(new TlsContext(ctx, false));
  OSPREY_RETURN_NOT_OK(LoadCredentials(ctx, options));
  c->check_host_ = !options.ca_file.empty() && options.verify_server_host;
  c->by_certificate_ = !options.cert_file.empty() && !options.ca_file.empty();
  c->verifies_peer_ = !options.ca_file.empty();
  c->presents_certificate_ = !options.cert_file.empty();
  *out = std::move(c);
  return Status::OK();
}

// The BIO under every session: reads take the caller's records in place,
// writes append to the caller's buffer. Memory BIOs would copy each way and
// clear every byte they grow into first.
struct SessionBio {
  static int Write(BIO* b, const char* data, int len) {
    auto* s = static_cast<TlsSession*>(BIO_get_data(b));
    s->out_->append(data, static_cast<size_t>(len));
    return len;
  }
  static int Read(BIO* b, char* dst, int len) {
    auto* s = static_cast<TlsSession*>(BIO_get_data(b));
    BIO_clear_retry_flags(b);
    if (s->in_.empty()) {
      BIO_set_retry_read(b);
      return -1;
    }
    size_t n = std::min(s->in_.size(), static_cast<size_t>(len));
    memcpy(dst, s->in_.data(), n);
    s->in_.remove_prefix(n);
    return static_cast<int>(n);
  }
  static long Ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }
  static int Create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
  }

  static const BIO_METHOD* Method() {
    static const BIO_METHOD* method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "osprey-session");
      BIO_meth_set_write(m, Write);
      BIO_meth_set_read(m, Read);
      BIO_meth_set_ctrl(m, Ctrl);
      BIO_meth_set_create(m, Create);
      return m;
    }();
    return method;
  }
};

Status TlsContext::NewSession(std::unique_ptr<TlsSession>* out,
                              const std::string& peer_host) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return Status::IllegalState("SSL_new: " + OpenSslErrors());
  std::unique_ptr<TlsSession> session(new TlsSession(ssl, server_));
  // A Unix socket has no host to check: the socket file's permissions
  // decide who may serve it.
  if (check_host_ && !peer_host.empty()) {
    // An address dialled is matched against the certificate's IP SANs, a
    // name against its DNS SANs (and CN, as OpenSSL does without SANs).
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    bool ok = X509_VERIFY_PARAM_set1_ip_asc(param, peer_host.c_str()) == 1 ||
              SSL_set1_host(ssl, peer_host.c_str()) == 1;
    if (!ok) return Status::IllegalState("TLS: cannot check for host " + peer_host);
  }
  // The connection moves the bytes; OpenSSL never touches the socket.
  BIO* bio = BIO_new(SessionBio::Method());
  if (bio == nullptr) return Status::IllegalState("BIO_new: " + OpenSslErrors());
  BIO_set_data(bio, session.get());
  SSL_set_bio(ssl, bio, bio);  // one BIO both ways: SSL_free frees it once
  if (server_) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
  }
  *out = std::move(session);
  return Status::OK();
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

namespace {
// Points a session's output at `target` for one call.
class OutputTo {
 public:
  OutputTo(std::string** out, std::string* target) : out_(out), saved_(*out) { *out = target; }
  ~OutputTo() { *out_ = saved_; }

 private:
  std::string** out_;
  std::string* saved_;
};
}  // namespace

void TlsSession::FeedRecords(Slice records) {
  if (in_.empty()) {
    in_ = records;
    return;
  }
  // Unread bytes from before: keep the stream in order, in our own buffer.
  if (in_.data() != reinterpret_cast<const uint8_t*>(unread_.data()) ||
      in_.size() != unread_.size()) {
    unread_.assign(reinterpret_cast<const char*>(in_.data()), in_.size());
  }
  unread_.append(reinterpret_cast<const char*>(records.data()), records.size());
  in_ = Slice(unread_);
}

Status TlsSession::Handshake(Slice peer_token, std::string* out, bool* done) {
  OutputTo redirect(&out_, out);
  FeedRecords(peer_token);
  ERR_clear_error();
  int rc = SSL_do_handshake(ssl_);
  if (!in_.empty()) FeedRecords(Slice());  // the token's memory is the caller's
  if (rc == 1) {
    handshake_done_ = true;
    *done = true;
    return Status::OK();
  }
  int err = SSL_get_error(ssl_, rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    *done = false;
    return Status::OK();
  }
  long verify = SSL_get_verify_result(ssl_);
  std::string why = OpenSslErrors();
  if (verify != X509_V_OK) {
    why = std::string("certificate verification failed: ") + X509_verify_cert_error_string(verify) +
          " (" + why + ")";
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      why +=
          "; the server's certificate does not name the host this client dialled: give the "
          "server a certificate with it among its subject alternative names, dial a name the "
          "certificate has, or turn the check off (MessengerBuilder::"
          "set_tls_verify_server_host(false)) and trust any certificate the CA signed";
    }
  }
  return Status::NotAuthorized("TLS handshake failed: " + why);
}

int TlsSession::version() const { return SSL_version(ssl_); }

bool TlsSession::sent_finished() const {
  unsigned char finished[EVP_MAX_MD_SIZE];
  return SSL_get_finished(ssl_, finished, sizeof(finished)) > 0;
}

Status TlsSession::Encrypt(Slice plaintext, std::string* records) {
  if (!handshake_done_) return Status::IllegalState("TLS: encrypt before the handshake finished");
  TakeOutput(records);
  OutputTo redirect(&out_, records);
  size_t off = 0;
  while (off < plaintext.size()) {
    size_t written = 0;
    ERR_clear_error();
    if (SSL_write_ex(ssl_, plaintext.data() + off, plaintext.size() - off, &written) != 1) {
      return Status::NetworkError("TLS write failed: " + OpenSslErrors());
    }
    off += written;
  }
  return Status::OK();
}

Status TlsSession::ReadPlaintext(uint8_t* dst, size_t cap, size_t* n) {
  *n = 0;
  if (!handshake_done_) return Status::IllegalState("TLS: decrypt before the handshake finished");
  ERR_clear_error();
  int rc = SSL_read_ex(ssl_, dst, cap, n);
  if (rc == 1) return Status::OK();
  *n = 0;
  int err = SSL_get_error(ssl_, rc);
  // OpenSSL keeps a partial record in its own buffer, so nothing the caller
  // owns is left to read; if it ever were, keep a copy.
  if (!in_.empty()) FeedRecords(Slice());
  if (err == SSL_ERROR_WANT_READ) return Status::OK();
  if (err == SSL_ERROR_ZERO_RETURN) return Status::Aborted("TLS: peer sent close_notify");
  // OpenSSL's reasons for an alert from the peer are the alert's code plus
  // SSL_AD_REASON_OFFSET: a peer that refused us, not a bad record.
  const int reason = ERR_GET_REASON(ERR_peek_last_error());
  if (reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) {
    return Status::NotAuthorized("TLS alert from the peer: " + OpenSslErrors());
  }
  return Status::NetworkError("TLS: bad record from peer: " + OpenSslErrors());
}

Status TlsSession::Decrypt(Slice records, std::string* plaintext) {
  FeedRecords(records);
  while (true) {
    size_t old = plaintext->size();
    plaintext->resize(old + 16384);
    size_t n;
    Status s = ReadPlaintext(reinterpret_cast<uint8_t*>(plaintext->data()) + old, 16384, &n);
    plaintext->resize(old + n);
    if (!s.ok() || n == 0) return s;
  }
}

void TlsSession::TakeOutput(std::string* records) {
  if (pending_out_.empty()) return;
  records->append(pending_out_);
  pending_out_.clear();
}

void TlsSession::CloseNotify(std::string* records) {
  TakeOutput(records);
  OutputTo redirect(&out_, records);
  in_ = Slice();
  ERR_clear_error();
  if (handshake_done_) (void)SSL_shutdown(ssl_);
  ERR_clear_error();
}

std::string TlsSession::PeerSubject() const {
  X509* peer = SSL_get_peer_certificate(ssl_);
  if (peer == nullptr) return "";
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(peer), buf, sizeof(buf));
  X509_free(peer);
  return buf;
}

void TlsSession::DoNotRequirePeerCertificate() {
  if (SSL_get_verify_mode(ssl_) & SSL_VERIFY_PEER) SSL_set_verify(ssl_, SSL_VERIFY_PEER, nullptr);
}

Status TlsSession::PeerCertificateIdentity(std::string* user, std::string* principal,
                                           bool require_user_id) const {
  X509* cert = SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr || SSL_get_verify_result(ssl_) != X509_V_OK) {
    return Status::NotAuthorized("certificate authentication: no verified peer certificate");
  }
  X509_NAME* subject = X509_get_subject_name(cert);
  char buf[1024];
  int n = X509_NAME_get_text_by_NID(subject, NID_userId, buf, sizeof(buf));
  if (n < 0 && require_user_id) {
    return Status::NotAuthorized(
        "certificate authentication: the client certificate has no user id (UID) attribute, "
        "which rpc_authentication=required takes as the only name of the user (no CN "
        "fallback)");
  }
  if (n < 0) n = X509_NAME_get_text_by_NID(subject, NID_commonName, buf, sizeof(buf));
  if (n <= 0) {
    return Status::NotAuthorized(
        "certificate authentication: the client certificate names no user (no UID or CN)");
  }
  user->assign(buf, static_cast<size_t>(n));
  principal->clear();
  static const int kKuduPrincipalNid = [] {
    const char* oid = "2.25.243346677289068076843480765133256509912";
    int nid = OBJ_txt2nid(oid);
    return nid != NID_undef ? nid : OBJ_create(oid, "kuduPrinc", "kuduKerberosPrincipal");
  }();
  int idx = X509_get_ext_by_NID(cert, kKuduPrincipalNid, -1);
  if (idx >= 0) {
    ASN1_OCTET_STRING* data = X509_EXTENSION_get_data(X509_get_ext(cert, idx));
    const unsigned char* p = data->data;
    long len;
    int tag, xclass;
    if (ASN1_get_object(&p, &len, &tag, &xclass, data->length) == 0 && tag == V_ASN1_UTF8STRING &&
        len <= data->length - (p - data->data)) {
      principal->assign(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    }
  }
  return Status::OK();
}

Status TlsSession::ServerEndPointBindings(std::string* out) const {
  // The server's certificate: our own on a server, the peer's on a client.
  X509* cert = server_ ? SSL_get_certificate(ssl_) : SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr) {
    return Status::NotAuthorized("TLS channel bindings: the session has no server certificate");
  }
  int md_nid = NID_undef;
  if (OBJ_find_sigid_algs(X509_get_signature_nid(cert), &md_nid, nullptr) == 0) {
    md_nid = NID_undef;
  }
  // RFC 5929 section 4.1: MD5 and SHA-1 become SHA-256, as does a
  // signature without a single hash (Ed25519).
  if (md_nid == NID_md5 || md_nid == NID_sha1 || md_nid == NID_undef) md_nid = NID_sha256;
  const EVP_MD* md = EVP_get_digestbynid(md_nid);
  if (md == nullptr) {
    return Status::NotAuthorized("TLS channel bindings: no digest for the certificate's signature");
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert, md, digest, &len) != 1) {
    return Status::NotAuthorized("TLS channel bindings: hashing the certificate failed");
  }
  out->assign(reinterpret_cast<const char*>(digest), len);
  return Status::OK();
}

}  // namespace osprey::transport
