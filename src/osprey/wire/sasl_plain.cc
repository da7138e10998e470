#include "osprey/wire/sasl_plain.h"

#include <vector>

namespace osprey::wire {

std::string EncodeSaslPlain(const SaslPlainCredentials& c) {
  std::string t;
  t.reserve(c.authzid.size() + c.authcid.size() + c.password.size() + 2);
  t += c.authzid;
  t.push_back('\0');
  t += c.authcid;
  t.push_back('\0');
  t += c.password;
  return t;
}

Status DecodeSaslPlain(Slice token, SaslPlainCredentials* out) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == 0) {
      parts.emplace_back();
    } else {
      parts.back().push_back(static_cast<char>(token[i]));
    }
  }
  if (parts.size() != 3) {
    return Status::Corruption("SASL PLAIN token must be authzid NUL authcid NUL password, found " +
                              std::to_string(parts.size() - 1) + " NUL separators");
  }
  if (parts[1].empty()) return Status::Corruption("SASL PLAIN token has an empty user name");
  for (const auto& p : parts) {
    if (p.size() > 255) return Status::Corruption("SASL PLAIN token part longer than 255 bytes");
  }
  out->authzid = std::move(parts[0]);
  out->authcid = std::move(parts[1]);
  out->password = std::move(parts[2]);
  return Status::OK();
}

}  // namespace osprey::wire
