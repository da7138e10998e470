#include "osprey/transport/http_host_check.h"

#include <arpa/inet.h>
#include <string.h>

#include <algorithm>
#include <cctype>

namespace osprey::transport {
namespace {

std::string Normalize(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!name.empty() && name.back() == '.') name.pop_back();
  return name;
}

// The host as an IP literal in its canonical text, or empty if it is none.
// An IPv4-mapped IPv6 address (::ffff:a.b.c.d, as a dual-stack listener
// sees IPv4 peers) is its IPv4 address.
std::string CanonicalIp(const std::string& host) {
  unsigned char buf[16];
  char text[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, host.c_str(), buf) == 1) {
    return inet_ntop(AF_INET, buf, text, sizeof(text)) != nullptr ? text : "";
  }
  if (inet_pton(AF_INET6, host.c_str(), buf) == 1) {
    static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(buf, kMapped, sizeof(kMapped)) == 0) {
      return inet_ntop(AF_INET, buf + 12, text, sizeof(text)) != nullptr ? text : "";
    }
    return inet_ntop(AF_INET6, buf, text, sizeof(text)) != nullptr ? text : "";
  }
  return "";
}

}  // namespace

HttpHostCheck::HttpHostCheck(std::vector<std::string> allowed, std::string own_host_name)
    : own_host_name_(Normalize(std::move(own_host_name))) {
  for (std::string& a : allowed) {
    if (a == "*") allow_all_ = true;
    allowed_.push_back(Normalize(std::move(a)));
  }
}

bool HttpHostCheck::HostPart(const std::string& header, std::string* host) {
  std::string h;
  if (!header.empty() && header[0] == '[') {
    size_t close = header.find(']');
    if (close == std::string::npos) return false;
    std::string rest = header.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return false;
    h = header.substr(1, close - 1);
  } else {
    size_t colon = header.find(':');
    if (colon != std::string::npos && header.find(':', colon + 1) != std::string::npos) {
      return false;  // an IPv6 literal must be in brackets
    }
    h = header.substr(0, colon);
  }
  for (char c : h) {
    if (c <= ' ' || c == '/' || c == '@' || c == '\x7f') return false;
  }
  if (h.empty()) return false;
  *host = Normalize(std::move(h));
  return true;
}

Status HttpHostCheck::Check(bool has_host, const std::string& header, const Sockaddr& local) const {
  if (!has_host || allow_all_) return Status::OK();
  std::string host;
  if (!HostPart(header, &host)) {
    return Status::NotAuthorized("malformed Host header '" + header + "'");
  }
  if (local.is_unix()) return Status::OK();  // no browser reaches a Unix socket
  std::string ip = CanonicalIp(host);
  const std::string local_ip = CanonicalIp(local.host());
  if (!ip.empty() && ip == local_ip) return Status::OK();
  const bool loopback = local.IsLoopback() || local_ip.rfind("127.", 0) == 0;
  if (host == "localhost" && loopback) return Status::OK();
  if (!own_host_name_.empty() && host == own_host_name_) return Status::OK();
  if (std::find(allowed_.begin(), allowed_.end(), host) != allowed_.end()) return Status::OK();
  return Status::NotAuthorized(
      "the Host header '" + header + "' names neither this server's address (" + local.host() +
      ") nor an allowed host; a name of this server's must be allowed with "
      "MessengerBuilder::set_http_allowed_hosts (this check stops DNS rebinding)");
}

}  // namespace osprey::transport
