#include "osprey/base/sockaddr.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <charconv>
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

Status Sockaddr::Parse(std::string_view host_port, Sockaddr* out) {
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

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string host_s(host);
  int rc = getaddrinfo(host_s.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return Status::NetworkError("unable to resolve host '" + host_s + "': " + gai_strerror(rc));
  }
  *out = FromNative(res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  out->set_port(static_cast<uint16_t>(port));
  return Status::OK();
}

uint16_t Sockaddr::port() const {
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
}

void Sockaddr::set_port(uint16_t port) {
  if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  }
}

bool Sockaddr::IsLoopback() const {
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  }
  uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr);
  return (a >> 24) == 127;
}

std::string Sockaddr::host() const {
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
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

socklen_t Sockaddr::addrlen() const {
  return family() == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

bool Sockaddr::operator==(const Sockaddr& o) const {
  if (family() != o.family()) return false;
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
