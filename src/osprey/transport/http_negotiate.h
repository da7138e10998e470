// The pages' Kerberos login (MessengerBuilder::set_http_spnego): HTTP's
// Negotiate authentication (RFC 4559) as a server checks one request.
// Stateless, as Kudu's webserver: each request carries its own token (curl
// --negotiate and browsers send one after the 401 that asks for it). Pure
// but for Kerberos's own work; any thread.
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "osprey/base/status.h"
#include "osprey/transport/sasl_gssapi.h"

namespace osprey::transport {

// The token of an Authorization header "Negotiate <base64>" (the scheme in
// any case, then one or more spaces). InvalidArgument naming what is wrong
// otherwise.
Status ParseNegotiateHeader(std::string_view authorization, std::string* token);

// What a request's Authorization header (empty: none) is worth. OK: the
// principal it proves, and the WWW-Authenticate value for the answer (""
// or "Negotiate <token>"). NotAuthorized with the reason otherwise; its
// answer is 401 with "WWW-Authenticate: Negotiate".
Status CheckHttpNegotiate(const KerberosCredentials& server, std::string_view authorization,
                          std::string* principal, std::string* www_authenticate);

// Whether the logged-in `principal` may read the pages: OK when `readers`
// (local user names, MessengerBuilder::set_http_readers) is null or holds
// its local name (MapPrincipalToLocalName); NotAuthorized naming the user
// and who may read them otherwise (the answer is 403).
Status CheckHttpReader(const std::set<std::string>* readers, const std::string& principal);

}  // namespace osprey::transport
