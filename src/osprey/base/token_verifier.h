// TokenVerifier: what a server uses to check an authentication token a
// client presents instead of a password or a Kerberos ticket (KRPC's
// TOKEN_EXCHANGE step, as a Kudu client sends the token its master issued).
// Users implement it for the tokens their system issues; Osprey ships
// KuduTokenVerifier (osprey/rpc/kudu_token_verifier.h) for Kudu's.
//
// Verify runs on a reactor thread, for every connection that presents a
// token, from any number of reactors at once: it must be thread-safe and
// must not block (no network, no disk).
#pragma once

#include <string>

#include "osprey/base/status.h"

namespace osprey {

class TokenVerifier {
 public:
  virtual ~TokenVerifier() = default;
  // `token`: the bytes the client sent (NegotiatePB.authn_token). OK with
  // the local user name the token vouches for, or NotAuthorized saying
  // why it is refused (expired, unknown signing key, bad signature), which
  // the client receives.
  virtual Status Verify(const std::string& token, std::string* user) const = 0;
};

}  // namespace osprey
