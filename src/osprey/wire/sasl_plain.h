// SASL PLAIN tokens (RFC 4616): authzid NUL authcid NUL password.
#pragma once

#include <string>

#include "osprey/base/slice.h"
#include "osprey/base/status.h"

namespace osprey::wire {

struct SaslPlainCredentials {
  std::string authzid;  // usually empty: act as authcid
  std::string authcid;  // the user name
  std::string password;
};

std::string EncodeSaslPlain(const SaslPlainCredentials& creds);
// Corruption unless the token has exactly two NULs, a non-empty authcid and
// no part longer than 255 bytes.
Status DecodeSaslPlain(Slice token, SaslPlainCredentials* out);

}  // namespace osprey::wire
