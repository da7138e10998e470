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
  return method == AuthenticationMethod::kKerberos ? "GSSAPI" : "PLAIN";
}
const char* ConnectionSecuritySlug(ConnectionSecurity security) { return NamesOf(security).slug; }

}  // namespace osprey
