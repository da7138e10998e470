#include "osprey/base/connection_types.h"

namespace osprey {

namespace {
struct SecurityNames {
  const char* name;
  const char* slug;
};
SecurityNames NamesOf(ConnectionSecurity security) {
  switch (security) {
    case ConnectionSecurity::kNegotiating:
      return {"negotiating", "negotiating"};
    case ConnectionSecurity::kClear:
      return {"clear", "clear"};
    case ConnectionSecurity::kTlsAuthenticationOnly:
      return {"TLS (authentication only)", "tls_authentication_only"};
    case ConnectionSecurity::kTlsEncrypted:
      return {"TLS (encrypted)", "tls_encrypted"};
  }
  return {"unknown", "unknown"};
}
}  // namespace

const char* ConnectionSecurityName(ConnectionSecurity security) { return NamesOf(security).name; }

const char* AuthenticationMethodName(AuthenticationMethod method) {
  switch (method) {
    case AuthenticationMethod::kKerberos:
      return "GSSAPI";
    case AuthenticationMethod::kCertificate:
      return "CERTIFICATE";
    case AuthenticationMethod::kToken:
      return "TOKEN";
    case AuthenticationMethod::kPlain:
      break;
  }
  return "PLAIN";
}
const char* ConnectionSecuritySlug(ConnectionSecurity security) { return NamesOf(security).slug; }

}  // namespace osprey
