// HttpHostCheck: whether an HTTP request's Host header names this server,
// against DNS rebinding. A web page of the attacker's, on a name whose DNS
// answer the attacker switches to this server's address, can make a
// browser behind the same firewall send requests here and read the
// answers, as its own origin. Such a request always carries the attacker's
// name in Host. So a request is served only if its Host names:
//   - the address the connection reached, as an IP literal (no DNS was
//     asked, so no answer could have been switched);
//   - "localhost", on a loopback connection;
//   - this machine's own host name (gethostname), which the attacker does
//     not control;
//   - a name the operator allowed (MessengerBuilder::set_http_allowed_hosts),
//     or anything at all if the list holds "*".
// A request without Host (HTTP/1.0) is served: browsers always send one.
// Names compare without case and without a trailing dot; the port is not
// compared (a rebinding page uses the server's port). A plain value; any
// thread.
#pragma once

#include <string>
#include <vector>

#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"

namespace osprey::transport {

class HttpHostCheck {
 public:
  // `allowed`: names the operator allows besides the above; "*": all.
  // `own_host_name`: this machine's name (empty: none).
  HttpHostCheck(std::vector<std::string> allowed, std::string own_host_name);

  // OK to serve; else NotAuthorized saying why, for a 403.
  Status Check(bool has_host, const std::string& host_header, const Sockaddr& local) const;

  // The host part of a Host header ("[::1]:80" -> "::1", "a.b:80" ->
  // "a.b"), lower case, without a trailing dot; false if it is malformed.
  static bool HostPart(const std::string& host_header, std::string* host);

 private:
  std::vector<std::string> allowed_;  // normalized as HostPart does
  bool allow_all_ = false;
  std::string own_host_name_;
};

}  // namespace osprey::transport
