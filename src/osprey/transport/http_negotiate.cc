#include "osprey/transport/http_negotiate.h"

#include "osprey/base/base64.h"

namespace osprey::transport {

Status ParseNegotiateHeader(std::string_view authorization, std::string* token) {
  constexpr std::string_view kScheme = "negotiate";
  const bool scheme =
      authorization.size() > kScheme.size() && authorization[kScheme.size()] == ' ' && [&] {
        for (size_t i = 0; i < kScheme.size(); ++i) {
          char c = authorization[i];
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
          if (c != kScheme[i]) return false;
        }
        return true;
      }();
  if (!scheme) {
    return Status::InvalidArgument(
        "the Authorization header is not 'Negotiate <token>' (only Kerberos logins are served)");
  }
  std::string_view rest = authorization.substr(kScheme.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest.empty() || !Base64Decode(rest, token)) {
    return Status::InvalidArgument("the Negotiate token is not base64");
  }
  return Status::OK();
}

Status CheckHttpNegotiate(const KerberosCredentials& server, std::string_view authorization,
                          std::string* principal, std::string* www_authenticate) {
  if (authorization.empty()) {
    return Status::NotAuthorized(
        "this server's pages need a Kerberos login: kinit, then a browser of the realm or "
        "curl --negotiate -u : URL");
  }
  std::string token, reply;
  Status s = ParseNegotiateHeader(authorization, &token);
  if (!s.ok()) return Status::NotAuthorized(s.message());
  OSPREY_RETURN_NOT_OK(AcceptHttpNegotiateToken(server, Slice(token), principal, &reply));
  *www_authenticate = reply.empty() ? std::string() : "Negotiate " + Base64Encode(reply);
  return Status::OK();
}

Status CheckHttpReader(const std::set<std::string>* readers, const std::string& principal) {
  if (readers == nullptr) return Status::OK();
  std::string user;
  Status s = MapPrincipalToLocalName(principal, &user);
  if (s.ok() && readers->count(user) != 0) return Status::OK();
  std::string who;
  for (const std::string& r : *readers) who += (who.empty() ? "" : ", ") + r;
  return Status::NotAuthorized(
      (s.ok() ? "user '" + user + "' (Kerberos principal " + principal + ")"
              : "Kerberos principal " + principal + " (" + s.message() + ")") +
      " may not read these pages: they are for " + who + " (MessengerBuilder::set_http_readers)");
}

}  // namespace osprey::transport
