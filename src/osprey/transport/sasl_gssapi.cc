#include "osprey/transport/sasl_gssapi.h"

#include <gssapi/gssapi.h>
#include <gssapi/gssapi_ext.h>
#include <gssapi/gssapi_krb5.h>
#include <krb5/krb5.h>
#include <netdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>

namespace osprey::transport {

namespace {

// RFC 4752 section 3.1: the security layers, as bits of the first byte.
constexpr uint8_t kLayerNone = 1;
constexpr uint8_t kLayerIntegrity = 2;
constexpr uint8_t kLayerConfidentiality = 4;
// The largest message this side takes wrapped; ours are tens of bytes.
constexpr uint32_t kMaxWrappedBytes = 64 * 1024;

// GSS-API's own text for a status: "Unspecified GSS failure.  Minor code
// may provide more information: Server not found in Kerberos database".
std::string GssText(OM_uint32 major, OM_uint32 minor) {
  std::string text;
  auto append = [&text](OM_uint32 code, int type, gss_OID mech) {
    OM_uint32 context = 0;
    do {
      OM_uint32 m;
      gss_buffer_desc buf = GSS_C_EMPTY_BUFFER;
      if (GSS_ERROR(gss_display_status(&m, code, type, mech, &context, &buf))) break;
      if (!text.empty()) text += ": ";
      text.append(static_cast<const char*>(buf.value), buf.length);
      gss_release_buffer(&m, &buf);
    } while (context != 0);
  };
  append(major, GSS_C_GSS_CODE, GSS_C_NO_OID);
  if (minor != 0) append(minor, GSS_C_MECH_CODE, const_cast<gss_OID>(gss_mech_krb5));
  return text;
}

// What a user should do about a failure, by Kerberos's error code.
std::string Advice(OM_uint32 major, OM_uint32 minor) {
  switch (static_cast<krb5_error_code>(minor)) {
    case KRB5_FCC_NOFILE:
    case KRB5_CC_NOTFOUND:
    case KRB5_CC_NOSUPP:
      return "no Kerberos ticket: run kinit (or give the client a keytab), and check KRB5CCNAME";
    case KRB5KRB_AP_ERR_TKT_EXPIRED:
      return "the Kerberos ticket has expired: run kinit again";
    case KRB5KDC_ERR_S_PRINCIPAL_UNKNOWN:
      return "the KDC does not know the server's principal: check the host name dialled and "
             "the service name (Kudu's sasl_proto_name), and that the server's principal exists";
    case KRB5KRB_AP_WRONG_PRINC:
    case KRB5KRB_AP_ERR_NOT_US:
    case KRB5_KT_NOTFOUND:
      return "the ticket is for another principal than the server's keytab holds: check the "
             "server's principal and keytab, and the host name the client dialled";
    case KRB5_REALM_UNKNOWN:
    case KRB5_REALM_CANT_RESOLVE:
    case KRB5_CONFIG_NODEFREALM:
      return "unknown Kerberos realm: add it to krb5.conf ([realms], [domain_realm]), and check "
             "KRB5_CONFIG";
    case KRB5_KDC_UNREACH:
      return "no KDC answered: check that the KDC runs and that krb5.conf names it";
    case KRB5KRB_AP_ERR_SKEW:
      return "the clocks of client and server differ by more than Kerberos allows: sync them "
             "(NTP)";
    case KRB5KRB_AP_ERR_REPEAT:
      return "the server saw this authenticator before: a replayed token";
    case KRB5KDC_ERR_C_PRINCIPAL_UNKNOWN:
      return "the KDC does not know the client's principal";
    case KRB5KDC_ERR_PREAUTH_FAILED:
    case KRB5KRB_AP_ERR_BAD_INTEGRITY:
      return "the keytab's key does not match the KDC's: export the keytab again";
    default:
      break;
  }
  if (major == GSS_S_CREDENTIALS_EXPIRED) return "the Kerberos ticket has expired: run kinit again";
  if (major == GSS_S_NO_CRED) return "no Kerberos credentials: run kinit, or give a keytab";
  return "";
}

Status GssError(const std::string& what, OM_uint32 major, OM_uint32 minor) {
  std::string msg = what + ": " + GssText(major, minor);
  std::string advice = Advice(major, minor);
  if (!advice.empty()) msg += " (" + advice + ")";
  return Status::NotAuthorized(msg);
}

struct Buffer {
  gss_buffer_desc b = GSS_C_EMPTY_BUFFER;
  ~Buffer() {
    OM_uint32 m;
    if (b.value != nullptr) gss_release_buffer(&m, &b);
  }
  std::string str() const { return std::string(static_cast<const char*>(b.value), b.length); }
};

}  // namespace

// Outside the anonymous namespace: GssapiSaslClient::Rep holds one, and a
// type of external linkage with a member of internal linkage draws GCC's
// -Wsubobject-linkage wherever this file is not the one compiled (a unity
// batch).
struct GssName {
  gss_name_t n = GSS_C_NO_NAME;
  ~GssName() {
    OM_uint32 m;
    if (n != GSS_C_NO_NAME) gss_release_name(&m, &n);
  }
};

namespace {

gss_buffer_desc BufferOf(Slice s) {
  gss_buffer_desc b;
  b.length = s.size();
  b.value = const_cast<uint8_t*>(s.data());
  return b;
}

Status ImportName(const std::string& text, gss_OID type, GssName* out) {
  gss_buffer_desc b = BufferOf(Slice(text));
  OM_uint32 minor;
  OM_uint32 major = gss_import_name(&minor, &b, type, &out->n);
  if (GSS_ERROR(major)) return GssError("Kerberos name '" + text + "'", major, minor);
  return Status::OK();
}

Status DisplayName(gss_name_t name, std::string* out) {
  Buffer b;
  OM_uint32 minor;
  OM_uint32 major = gss_display_name(&minor, name, &b.b, nullptr);
  if (GSS_ERROR(major)) return GssError("Kerberos name", major, minor);
  *out = b.str();
  return Status::OK();
}

std::string LayerBytes(uint8_t layers, uint32_t max_bytes) {
  std::string s(4, '\0');
  s[0] = static_cast<char>(layers);
  s[1] = static_cast<char>((max_bytes >> 16) & 0xff);
  s[2] = static_cast<char>((max_bytes >> 8) & 0xff);
  s[3] = static_cast<char>(max_bytes & 0xff);
  return s;
}

// gss_wrap without a length prefix (the layer negotiation), or with one
// (sasl_encode).
Status WrapWith(gss_ctx_id_t ctx, bool confidential, Slice plaintext, bool length_prefix,
                std::string* out) {
  gss_buffer_desc in = BufferOf(plaintext);
  Buffer wrapped;
  OM_uint32 minor;
  int conf_state = 0;
  OM_uint32 major =
      gss_wrap(&minor, ctx, confidential ? 1 : 0, GSS_C_QOP_DEFAULT, &in, &conf_state, &wrapped.b);
  if (GSS_ERROR(major)) return GssError("Kerberos wrap", major, minor);
  out->clear();
  if (length_prefix) {
    uint32_t n = static_cast<uint32_t>(wrapped.b.length);
    out->push_back(static_cast<char>(n >> 24));
    out->push_back(static_cast<char>((n >> 16) & 0xff));
    out->push_back(static_cast<char>((n >> 8) & 0xff));
    out->push_back(static_cast<char>(n & 0xff));
  }
  out->append(static_cast<const char*>(wrapped.b.value), wrapped.b.length);
  return Status::OK();
}

Status UnwrapWith(gss_ctx_id_t ctx, Slice wrapped, bool length_prefix, std::string* out) {
  if (length_prefix) {
    if (wrapped.size() < 4) {
      return Status::NotAuthorized("Kerberos unwrap: a protected message shorter than its length");
    }
    const uint8_t* p = wrapped.data();
    uint32_t n = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    if (n != wrapped.size() - 4 || n > kMaxWrappedBytes) {
      return Status::NotAuthorized("Kerberos unwrap: a protected message of " +
                                   std::to_string(wrapped.size() - 4) + " bytes says it has " +
                                   std::to_string(n));
    }
    wrapped = Slice(p + 4, n);
  }
  gss_buffer_desc in = BufferOf(wrapped);
  Buffer plain;
  OM_uint32 minor;
  OM_uint32 major = gss_unwrap(&minor, ctx, &in, &plain.b, nullptr, nullptr);
  if (GSS_ERROR(major)) return GssError("Kerberos unwrap", major, minor);
  *out = plain.str();
  return Status::OK();
}

std::atomic<uint64_t> g_client_caches{0};

}  // namespace

// ---------------------------------------------------------------------------

struct KerberosCredentials::Rep {
  gss_cred_id_t cred = GSS_C_NO_CREDENTIAL;
  ~Rep() {
    OM_uint32 m;
    if (cred != GSS_C_NO_CREDENTIAL) gss_release_cred(&m, &cred);
  }
};

KerberosCredentials::KerberosCredentials(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
KerberosCredentials::~KerberosCredentials() = default;

std::string KerberosCredentials::service_name() const {
  size_t end = principal_.find_first_of("/@");
  return principal_.substr(0, end);
}

Status ResolveHostInPrincipal(const std::string& principal, std::string* out) {
  *out = principal;
  size_t at = out->find("_HOST");
  if (at == std::string::npos) return Status::OK();
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    return Status::IOError("gethostname failed: " + std::string(strerror(errno)));
  }
  std::string fqdn = host;
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  if (getaddrinfo(host, nullptr, &hints, &res) == 0) {
    if (res != nullptr && res->ai_canonname != nullptr) fqdn = res->ai_canonname;
    freeaddrinfo(res);
  }
  std::transform(fqdn.begin(), fqdn.end(), fqdn.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  out->replace(at, 5, fqdn);
  return Status::OK();
}

// A keytab file that exists, and `principal` (_HOST resolved, into
// *resolved) as a Kerberos name: what a server's and a client's keytab
// logins both start from.
static Status KeytabPrincipal(const std::string& keytab_file, const std::string& principal,
                              std::string* resolved, GssName* name) {
  struct stat st;
  if (stat(keytab_file.c_str(), &st) != 0) {
    return Status::InvalidArgument("keytab file '" + keytab_file +
                                   "': " + std::string(strerror(errno)));
  }
  OSPREY_RETURN_NOT_OK(ResolveHostInPrincipal(principal, resolved));
  return ImportName(*resolved, const_cast<gss_OID>(GSS_KRB5_NT_PRINCIPAL_NAME), name);
}

Status KerberosCredentials::ForServer(const std::string& keytab_file, const std::string& principal,
                                      std::shared_ptr<const KerberosCredentials>* out) {
  if (keytab_file.empty()) {
    return Status::InvalidArgument("Kerberos needs a keytab file for the server's principal");
  }
  std::string resolved;
  GssName name;
  OSPREY_RETURN_NOT_OK(KeytabPrincipal(keytab_file, principal, &resolved, &name));
  std::string kt = "FILE:" + keytab_file;
  gss_key_value_element_desc element = {"keytab", kt.c_str()};
  gss_key_value_set_desc store = {1, &element};
  // The keytab must hold the principal's key: found now, not by the first
  // client's failure (and before GSS-API, which leaks when it is missing).
  krb5_context kctx;
  if (krb5_init_context(&kctx) == 0) {
    krb5_keytab keytab;
    krb5_principal princ;
    bool found = true;
    if (krb5_kt_resolve(kctx, kt.c_str(), &keytab) == 0) {
      if (krb5_parse_name(kctx, resolved.c_str(), &princ) == 0) {
        krb5_keytab_entry entry;
        if (krb5_kt_get_entry(kctx, keytab, princ, 0, 0, &entry) == 0) {
          krb5_free_keytab_entry_contents(kctx, &entry);
        } else {
          found = false;
        }
        krb5_free_principal(kctx, princ);
      }
      krb5_kt_close(kctx, keytab);
    }
    krb5_free_context(kctx);
    if (!found) {
      return Status::InvalidArgument("keytab file '" + keytab_file + "' has no key for " +
                                     resolved + ": export it with kadmin's ktadd");
    }
  }
  auto rep = std::make_unique<Rep>();
  OM_uint32 minor;
  OM_uint32 major = gss_acquire_cred_from(&minor, name.n, GSS_C_INDEFINITE, GSS_C_NO_OID_SET,
                                          GSS_C_ACCEPT, &store, &rep->cred, nullptr, nullptr);
  if (GSS_ERROR(major)) {
    return Status::InvalidArgument("server principal " + resolved + " from keytab " + keytab_file +
                                   ": " + GssText(major, minor) +
                                   " (list the keytab's principals with klist -k; check the "
                                   "default realm in krb5.conf, KRB5_CONFIG)");
  }
  std::shared_ptr<KerberosCredentials> creds(new KerberosCredentials(std::move(rep)));
  creds->principal_ = resolved;
  *out = std::move(creds);
  return Status::OK();
}

Status KerberosCredentials::ForClient(const std::string& keytab_file, const std::string& principal,
                                      std::shared_ptr<const KerberosCredentials>* out) {
  auto rep = std::make_unique<Rep>();
  OM_uint32 minor;
  OM_uint32 major;
  if (keytab_file.empty()) {
    major = gss_acquire_cred(&minor, GSS_C_NO_NAME, GSS_C_INDEFINITE, GSS_C_NO_OID_SET,
                             GSS_C_INITIATE, &rep->cred, nullptr, nullptr);
    if (GSS_ERROR(major)) return GssError("Kerberos client credentials", major, minor);
  } else {
    if (principal.empty()) {
      return Status::InvalidArgument("a client keytab needs the principal to log in as");
    }
    std::string resolved;
    GssName name;
    OSPREY_RETURN_NOT_OK(KeytabPrincipal(keytab_file, principal, &resolved, &name));
    std::string kt = "FILE:" + keytab_file;
    // A cache of this process's own, so that a keytab login never touches
    // the user's ticket cache.
    std::string cache = "MEMORY:osprey-" + std::to_string(getpid()) + "-" +
                        std::to_string(g_client_caches.fetch_add(1));
    gss_key_value_element_desc elements[] = {{"client_keytab", kt.c_str()},
                                             {"ccache", cache.c_str()}};
    gss_key_value_set_desc store = {2, elements};
    major = gss_acquire_cred_from(&minor, name.n, GSS_C_INDEFINITE, GSS_C_NO_OID_SET,
                                  GSS_C_INITIATE, &store, &rep->cred, nullptr, nullptr);
    if (GSS_ERROR(major)) {
      return GssError("Kerberos login as " + resolved + " from keytab " + keytab_file, major,
                      minor);
    }
  }
  // Who we are, and whether the ticket is still good: an expired one is
  // refused here with advice, not at the first connection.
  // The lifetime alone first: MIT krb5 1.20 leaks the name it made when
  // the credentials turn out expired.
  OM_uint32 lifetime = 0;
  major = gss_inquire_cred(&minor, rep->cred, nullptr, &lifetime, nullptr, nullptr);
  if (GSS_ERROR(major)) return GssError("Kerberos client credentials", major, minor);
  GssName self;
  major = gss_inquire_cred(&minor, rep->cred, &self.n, nullptr, nullptr, nullptr);
  if (GSS_ERROR(major)) return GssError("Kerberos client credentials", major, minor);
  std::shared_ptr<KerberosCredentials> creds(new KerberosCredentials(std::move(rep)));
  OSPREY_RETURN_NOT_OK(DisplayName(self.n, &creds->principal_));
  *out = std::move(creds);
  return Status::OK();
}

Status MapPrincipalToLocalName(const std::string& principal, std::string* local_name) {
  krb5_context kctx;
  if (krb5_init_context(&kctx) != 0) {
    return Status::IllegalState("krb5_init_context failed: check krb5.conf (KRB5_CONFIG)");
  }
  krb5_principal princ;
  krb5_error_code rc = krb5_parse_name(kctx, principal.c_str(), &princ);
  if (rc != 0) {
    krb5_free_context(kctx);
    return Status::NotAuthorized("cannot parse Kerberos principal '" + principal + "'");
  }
  char buf[1024];
  rc = krb5_aname_to_localname(kctx, princ, sizeof(buf), buf);
  Status s;
  if (rc == 0) {
    *local_name = buf;
  } else if (rc == KRB5_LNAME_NOTRANS || rc == KRB5_PLUGIN_NO_HANDLE) {
    // No rule maps it: the first component, as Hadoop and Kudu do.
    if (princ->length > 0) {
      local_name->assign(princ->data[0].data, princ->data[0].length);
    } else {
      s = Status::NotAuthorized("Kerberos principal '" + principal + "' has no components");
    }
  } else {
    const char* msg = krb5_get_error_message(kctx, rc);
    s = Status::NotAuthorized("cannot map Kerberos principal '" + principal +
                              "' to a local user: " + msg);
    krb5_free_error_message(kctx, msg);
  }
  krb5_free_principal(kctx, princ);
  krb5_free_context(kctx);
  return s;
}

// ---------------------------------------------------------------------------

struct GssapiSaslClient::Rep {
  gss_ctx_id_t ctx = GSS_C_NO_CONTEXT;
  GssName target;
  OM_uint32 flags = 0;
  ~Rep() {
    OM_uint32 m;
    if (ctx != GSS_C_NO_CONTEXT) gss_delete_sec_context(&m, &ctx, GSS_C_NO_BUFFER);
  }
};

GssapiSaslClient::GssapiSaslClient(std::shared_ptr<const KerberosCredentials> credentials,
                                   std::string service_name, std::string host)
    : credentials_(std::move(credentials)),
      service_name_(std::move(service_name)),
      host_(std::move(host)),
      rep_(std::make_unique<Rep>()) {}

GssapiSaslClient::~GssapiSaslClient() = default;

Status GssapiSaslClient::Start(std::string* token) {
  if (state_ != State::kStart) return Status::IllegalState("GSSAPI client started twice");
  OSPREY_RETURN_NOT_OK(ImportName(service_name_ + "@" + host_,
                                  const_cast<gss_OID>(GSS_C_NT_HOSTBASED_SERVICE), &rep_->target));
  state_ = State::kContext;
  return Step(Slice(), token);
}

Status GssapiSaslClient::Step(Slice challenge, std::string* response) {
  response->clear();
  switch (state_) {
    case State::kStart:
      return Status::IllegalState("GSSAPI client: Step before Start");
    case State::kContext: {
      gss_buffer_desc in = BufferOf(challenge);
      Buffer out;
      OM_uint32 minor;
      OM_uint32 major = gss_init_sec_context(
          &minor, credentials_->rep_->cred, &rep_->ctx, rep_->target.n,
          const_cast<gss_OID>(gss_mech_krb5),
          GSS_C_MUTUAL_FLAG | GSS_C_SEQUENCE_FLAG | GSS_C_INTEG_FLAG | GSS_C_CONF_FLAG, 0,
          GSS_C_NO_CHANNEL_BINDINGS, challenge.empty() ? GSS_C_NO_BUFFER : &in, nullptr, &out.b,
          &rep_->flags, nullptr);
      if (GSS_ERROR(major)) {
        return GssError("Kerberos authentication to " + service_name_ + "@" + host_, major, minor);
      }
      *response = out.str();
      if (major == GSS_S_COMPLETE) state_ = State::kAwaitingLayerOffer;
      return Status::OK();
    }
    case State::kAwaitingLayerOffer: {
      std::string offer;
      OSPREY_RETURN_NOT_OK(UnwrapWith(rep_->ctx, challenge, /*length_prefix=*/false, &offer));
      if (offer.size() != 4) {
        return Status::NotAuthorized("GSSAPI: the server's security layer offer has " +
                                     std::to_string(offer.size()) + " bytes, not 4");
      }
      uint8_t layers = static_cast<uint8_t>(offer[0]);
      uint8_t choice;
      if ((layers & kLayerConfidentiality) && (rep_->flags & GSS_C_CONF_FLAG)) {
        choice = kLayerConfidentiality;
      } else if (layers & kLayerIntegrity) {
        choice = kLayerIntegrity;
      } else {
        return Status::NotAuthorized(
            "GSSAPI: the server offers no integrity protection, which the nonce and channel "
            "bindings need");
      }
      confidential_ = choice == kLayerConfidentiality;
      OSPREY_RETURN_NOT_OK(WrapWith(rep_->ctx, false, LayerBytes(choice, kMaxWrappedBytes),
                                    /*length_prefix=*/false, response));
      state_ = State::kLayerChosen;
      return Status::OK();
    }
    case State::kLayerChosen:
      break;
  }
  return Status::NotAuthorized("GSSAPI: a challenge after the security layer was chosen");
}

Status GssapiSaslClient::Wrap(Slice plaintext, std::string* out) {
  if (state_ != State::kLayerChosen) return Status::IllegalState("GSSAPI: wrap before the layer");
  return WrapWith(rep_->ctx, confidential_, plaintext, /*length_prefix=*/true, out);
}

Status GssapiSaslClient::Unwrap(Slice wrapped, std::string* out) {
  if (state_ != State::kLayerChosen) {
    return Status::IllegalState("GSSAPI: unwrap before the layer");
  }
  return UnwrapWith(rep_->ctx, wrapped, /*length_prefix=*/true, out);
}

// ---------------------------------------------------------------------------

struct GssapiSaslServer::Rep {
  gss_ctx_id_t ctx = GSS_C_NO_CONTEXT;
  OM_uint32 flags = 0;
  uint8_t offered = 0;
  ~Rep() {
    OM_uint32 m;
    if (ctx != GSS_C_NO_CONTEXT) gss_delete_sec_context(&m, &ctx, GSS_C_NO_BUFFER);
  }
};

GssapiSaslServer::GssapiSaslServer(std::shared_ptr<const KerberosCredentials> credentials)
    : credentials_(std::move(credentials)), rep_(std::make_unique<Rep>()) {}

GssapiSaslServer::~GssapiSaslServer() = default;

Status GssapiSaslServer::Step(Slice token, std::string* challenge, bool* done) {
  challenge->clear();
  *done = false;
  switch (state_) {
    case State::kContext: {
      gss_buffer_desc in = BufferOf(token);
      Buffer out;
      GssName source;
      OM_uint32 minor;
      OM_uint32 major = gss_accept_sec_context(&minor, &rep_->ctx, credentials_->rep_->cred, &in,
                                               GSS_C_NO_CHANNEL_BINDINGS, &source.n, nullptr,
                                               &out.b, &rep_->flags, nullptr, nullptr);
      if (GSS_ERROR(major)) return GssError("Kerberos authentication of the client", major, minor);
      if (major != GSS_S_COMPLETE) {
        *challenge = out.str();
        return Status::OK();
      }
      OSPREY_RETURN_NOT_OK(DisplayName(source.n, &client_principal_));
      state_ = State::kOfferLayers;
      // As Cyrus: the last context token first, if there is one; the
      // layer offer answers the client's (empty) response to it.
      if (out.b.length > 0) {
        *challenge = out.str();
        return Status::OK();
      }
      return OfferLayers(challenge);
    }
    case State::kOfferLayers:
      return OfferLayers(challenge);
    case State::kAwaitingLayerChoice:
      OSPREY_RETURN_NOT_OK(TakeLayerChoice(token));
      state_ = State::kDone;
      *done = true;
      return Status::OK();
    case State::kDone:
      break;
  }
  return Status::NotAuthorized("GSSAPI: a response after the exchange succeeded");
}

Status GssapiSaslServer::OfferLayers(std::string* challenge) {
  // Integrity at least: the nonce and channel bindings are protected with
  // it, as Kudu requires (its minimum protection is integrity).
  rep_->offered = kLayerIntegrity;
  if (rep_->flags & GSS_C_CONF_FLAG) rep_->offered |= kLayerConfidentiality;
  OSPREY_RETURN_NOT_OK(WrapWith(rep_->ctx, false, LayerBytes(rep_->offered, kMaxWrappedBytes),
                                /*length_prefix=*/false, challenge));
  state_ = State::kAwaitingLayerChoice;
  return Status::OK();
}

Status GssapiSaslServer::TakeLayerChoice(Slice token) {
  std::string choice;
  OSPREY_RETURN_NOT_OK(UnwrapWith(rep_->ctx, token, /*length_prefix=*/false, &choice));
  if (choice.size() < 4) {
    return Status::NotAuthorized("GSSAPI: the client's security layer choice has " +
                                 std::to_string(choice.size()) + " bytes, fewer than 4");
  }
  uint8_t layer = static_cast<uint8_t>(choice[0]);
  if (layer == kLayerNone || (layer & rep_->offered) == 0 || (layer & (layer - 1)) != 0) {
    return Status::NotAuthorized("GSSAPI: the client chose security layer " +
                                 std::to_string(layer) + ", which this server did not offer");
  }
  confidential_ = layer == kLayerConfidentiality;
  std::string authzid = choice.substr(4);
  if (!authzid.empty() && authzid != client_principal_) {
    return Status::NotAuthorized("GSSAPI: " + client_principal_ + " asked to act as '" + authzid +
                                 "', and this server lets no one act as another user");
  }
  return Status::OK();
}

Status GssapiSaslServer::Wrap(Slice plaintext, std::string* out) {
  if (state_ != State::kDone) return Status::IllegalState("GSSAPI: wrap before the exchange ended");
  return WrapWith(rep_->ctx, confidential_, plaintext, /*length_prefix=*/true, out);
}

Status GssapiSaslServer::Unwrap(Slice wrapped, std::string* out) {
  if (state_ != State::kDone) {
    return Status::IllegalState("GSSAPI: unwrap before the exchange ended");
  }
  return UnwrapWith(rep_->ctx, wrapped, /*length_prefix=*/true, out);
}

Status AcceptHttpNegotiateToken(const KerberosCredentials& server, Slice token,
                                std::string* client_principal, std::string* reply) {
  gss_ctx_id_t ctx = GSS_C_NO_CONTEXT;
  gss_buffer_desc in = BufferOf(token);
  Buffer out;
  GssName source;
  OM_uint32 minor;
  OM_uint32 major =
      gss_accept_sec_context(&minor, &ctx, server.rep_->cred, &in, GSS_C_NO_CHANNEL_BINDINGS,
                             &source.n, nullptr, &out.b, nullptr, nullptr, nullptr);
  if (ctx != GSS_C_NO_CONTEXT) {
    OM_uint32 m;
    gss_delete_sec_context(&m, &ctx, GSS_C_NO_BUFFER);
  }
  if (GSS_ERROR(major)) return GssError("Kerberos login (Negotiate)", major, minor);
  if (major != GSS_S_COMPLETE) {
    return Status::NotAuthorized(
        "Kerberos login (Negotiate): the mechanism wants more than one round (NTLM?); only "
        "Kerberos is served");
  }
  OSPREY_RETURN_NOT_OK(DisplayName(source.n, client_principal));
  *reply = out.b.length > 0 ? out.str() : std::string();
  return Status::OK();
}

}  // namespace osprey::transport
