#include "osprey/base/sockaddr.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/un.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstring>

namespace osprey {

Sockaddr::Sockaddr() {
  std::memset(&storage_, 0, sizeof(storage_));
  auto* in = reinterpret_cast<sockaddr_in*>(&storage_);
  in->sin_family = AF_INET;
}

Sockaddr Sockaddr::Loopback(uint16_t port) {
  Sockaddr a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.storage_);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  in->sin_port = htons(port);
  return a;
}

Sockaddr Sockaddr::FromNative(const sockaddr* addr, socklen_t len) {
  Sockaddr a;
  std::memcpy(&a.storage_, addr, std::min<size_t>(len, sizeof(a.storage_)));
  return a;
}

namespace {
constexpr std::string_view kUnixPrefix = "unix:";

const sockaddr_un* AsUnix(const sockaddr_storage& s) {
  return reinterpret_cast<const sockaddr_un*>(&s);
}

// "unix:/path" or "unix:@abstract" into `out`.
Status ParseUnix(std::string_view input, sockaddr_storage* out) {
  std::string_view path = input.substr(kUnixPrefix.size());
  auto* un = reinterpret_cast<sockaddr_un*>(out);
  std::memset(out, 0, sizeof(*out));
  un->sun_family = AF_UNIX;
  const bool abstract = !path.empty() && path.front() == '@';
  std::string_view name = abstract ? path.substr(1) : path;
  if (name.empty()) {
    return Status::InvalidArgument("invalid address '" + std::string(input) +
                                   "': expected unix:/PATH or unix:@NAME");
  }
  if (name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("invalid address: a Unix socket path may not hold a NUL byte");
  }
  // A path needs its terminating NUL; an abstract name its leading one.
  if (name.size() + 1 > sizeof(un->sun_path)) {
    return Status::InvalidArgument("invalid address '" + std::string(input) + "': longer than " +
                                   std::to_string(sizeof(un->sun_path) - 1) +
                                   " bytes, the most a Unix socket address holds");
  }
  std::memcpy(un->sun_path + (abstract ? 1 : 0), name.data(), name.size());
  return Status::OK();
}

struct HostAndPort {
  std::string host;
  uint16_t port = 0;
};

Status SplitHostPort(std::string_view host_port, HostAndPort* out) {
  std::string input(host_port);
  if (host_port.empty()) {
    return Status::InvalidArgument("empty address: expected HOST:PORT");
  }
  std::string_view host, port_str;
  if (host_port.front() == '[') {
    size_t close = host_port.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("invalid address '" + input +
                                     "': missing ']' after IPv6 host");
    }
    host = host_port.substr(1, close - 1);
    if (close + 1 >= host_port.size() || host_port[close + 1] != ':') {
      return Status::InvalidArgument("invalid address '" + input + "': expected ':PORT' after ']'");
    }
    port_str = host_port.substr(close + 2);
  } else {
    size_t colon = host_port.rfind(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument("invalid address '" + input + "': expected HOST:PORT");
    }
    host = host_port.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      return Status::InvalidArgument("invalid address '" + input +
                                     "': IPv6 hosts must be bracketed, as [::1]:PORT");
    }
    port_str = host_port.substr(colon + 1);
  }
  if (host.empty()) {
    return Status::InvalidArgument("invalid address '" + input + "': empty host");
  }
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_str.data(), port_str.data() + port_str.size(), port);
  if (port_str.empty() || ec != std::errc() || ptr != port_str.data() + port_str.size() ||
      port > 65535) {
    return Status::InvalidArgument("invalid address '" + input + "': port '" +
                                   std::string(port_str) + "' is not a number from 0 to 65535");
  }
  out->host = std::string(host);
  out->port = static_cast<uint16_t>(port);
  return Status::OK();
}

}  // namespace

std::string Sockaddr::HostOf(std::string_view host_port) {
  if (host_port.rfind("unix:", 0) == 0) return "";
  if (!host_port.empty() && host_port[0] == '[') {
    size_t close = host_port.find(']');
    return std::string(host_port.substr(1, close == std::string_view::npos ? close : close - 1));
  }
  return std::string(host_port.substr(0, host_port.rfind(':')));
}

Status Sockaddr::ResolveAll(std::string_view host_port, std::vector<Sockaddr>* out) {
  out->clear();
  if (host_port.substr(0, kUnixPrefix.size()) == kUnixPrefix) {
    Sockaddr a;
    OSPREY_RETURN_NOT_OK(ParseUnix(host_port, &a.storage_));
    out->push_back(a);
    return Status::OK();
  }
  HostAndPort hp;
  OSPREY_RETURN_NOT_OK(SplitHostPort(host_port, &hp));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(hp.host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return Status::NetworkError("unable to resolve host '" + hp.host + "': " + gai_strerror(rc));
  }
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    Sockaddr a = FromNative(ai->ai_addr, ai->ai_addrlen);
    a.set_port(hp.port);
    if (std::find(out->begin(), out->end(), a) == out->end()) out->push_back(a);
  }
  freeaddrinfo(res);
  if (out->empty()) {
    return Status::NetworkError("host '" + hp.host + "' has no IPv4 or IPv6 address");
  }
  return Status::OK();
}

Status Sockaddr::Parse(std::string_view host_port, Sockaddr* out) {
  std::vector<Sockaddr> all;
  OSPREY_RETURN_NOT_OK(ResolveAll(host_port, &all));
  *out = all.front();
  return Status::OK();
}

uint16_t Sockaddr::port() const {
  if (is_unix()) return 0;
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
}

void Sockaddr::set_port(uint16_t port) {
  if (is_unix()) return;
  if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  }
}

bool Sockaddr::IsLoopback() const {
  if (is_unix()) return true;
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  }
  uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr);
  return (a >> 24) == 127;
}

std::string Sockaddr::unix_path() const {
  if (!is_unix()) return "";
  const char* path = AsUnix(storage_)->sun_path;
  const size_t cap = sizeof(AsUnix(storage_)->sun_path);
  if (path[0] != '\0') return std::string(path, strnlen(path, cap));
  size_t n = strnlen(path + 1, cap - 1);
  return n == 0 ? "" : "@" + std::string(path + 1, n);
}

std::string Sockaddr::host() const {
  if (is_unix()) return ToString();
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, buf,
              sizeof(buf));
  } else {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, buf,
              sizeof(buf));
  }
  return buf;
}

std::string Sockaddr::ToString() const {
  if (is_unix()) {
    std::string path = unix_path();
    return std::string(kUnixPrefix) + (path.empty() ? "(unnamed)" : path);
  }
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

socklen_t Sockaddr::addrlen() const {
  if (is_unix()) {
    std::string path = unix_path();
    // An abstract name counts its leading NUL, a path its terminating one.
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) +
                                  (path.empty() ? 0 : path.size() + 1));
  }
  return family() == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

bool Sockaddr::operator==(const Sockaddr& o) const {
  if (family() != o.family()) return false;
  // Both zero-padded (see FromNative and ParseUnix): compare the whole
  // path field, as Hash reads it, without making strings on a lookup.
  if (is_unix()) {
    return std::memcmp(AsUnix(storage_)->sun_path, AsUnix(o.storage_)->sun_path,
                       sizeof(AsUnix(storage_)->sun_path)) == 0;
  }
  if (family() == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage_);
    auto* b = reinterpret_cast<const sockaddr_in6*>(&o.storage_);
    return a->sin6_port == b->sin6_port &&
           std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0;
  }
  auto* a = reinterpret_cast<const sockaddr_in*>(&storage_);
  auto* b = reinterpret_cast<const sockaddr_in*>(&o.storage_);
  return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
}

size_t Sockaddr::Hash() const {
  // On the hot path of every client call: hash the raw address, no strings.
  if (is_unix()) {
    return std::hash<std::string_view>()(
        std::string_view(AsUnix(storage_)->sun_path, sizeof(AsUnix(storage_)->sun_path)));
  }
  if (family() == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage_);
    return std::hash<std::string_view>()(std::string_view(
               reinterpret_cast<const char*>(&a->sin6_addr), sizeof(a->sin6_addr))) *
               31 +
           a->sin6_port;
  }
  auto* a = reinterpret_cast<const sockaddr_in*>(&storage_);
  return (static_cast<size_t>(a->sin_addr.s_addr) << 16) ^ a->sin_port;
}

}  // namespace osprey
