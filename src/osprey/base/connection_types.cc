#include "osprey/base/connection_types.h"

namespace osprey {

const char* ConnectionSecurityName(ConnectionSecurity security) {
  switch (security) {
    case ConnectionSecurity::kNegotiating:
      return "negotiating";
    case ConnectionSecurity::kClear:
      return "clear";
    case ConnectionSecurity::kTlsAuthenticationOnly:
      return "TLS (authentication only)";
    case ConnectionSecurity::kTlsEncrypted:
      return "TLS (encrypted)";
  }
  return "unknown";
}

const char* ConnectionSecuritySlug(ConnectionSecurity security) {
  switch (security) {
    case ConnectionSecurity::kNegotiating:
      return "negotiating";
    case ConnectionSecurity::kClear:
      return "clear";
    case ConnectionSecurity::kTlsAuthenticationOnly:
      return "tls_authentication_only";
    case ConnectionSecurity::kTlsEncrypted:
      return "tls_encrypted";
  }
  return "unknown";
}

}  // namespace osprey
