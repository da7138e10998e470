// Sockaddr: an IPv4 or IPv6 address and port. A plain value; any thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "osprey/base/status.h"

namespace osprey {

class Sockaddr {
 public:
  Sockaddr();  // 0.0.0.0:0

  // Parses "host:port": a dotted IPv4 address, a bracketed IPv6 address
  // ("[::1]:8000") or a name, resolved with getaddrinfo (first result).
  static Status Parse(std::string_view host_port, Sockaddr* out);
  // Loopback (127.0.0.1) with the given port.
  static Sockaddr Loopback(uint16_t port);
  static Sockaddr FromNative(const sockaddr* addr, socklen_t len);

  uint16_t port() const;
  void set_port(uint16_t port);
  int family() const { return storage_.ss_family; }
  bool IsLoopback() const;
  // "127.0.0.1:8000" or "[::1]:8000".
  std::string ToString() const;
  std::string host() const;

  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  sockaddr* mutable_addr() { return reinterpret_cast<sockaddr*>(&storage_); }
  socklen_t addrlen() const;

  bool operator==(const Sockaddr& o) const;
  size_t Hash() const;

 private:
  sockaddr_storage storage_;
};

}  // namespace osprey

template <>
struct std::hash<osprey::Sockaddr> {
  size_t operator()(const osprey::Sockaddr& a) const { return a.Hash(); }
};
