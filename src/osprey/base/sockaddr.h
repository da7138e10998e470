// Sockaddr: an IPv4 or IPv6 address and port, or a Unix domain socket's
// path. A plain value; any thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "osprey/base/status.h"

namespace osprey {

class Sockaddr {
 public:
  Sockaddr();  // 0.0.0.0:0

  // Parses "host:port": a dotted IPv4 address, a bracketed IPv6 address
  // ("[::1]:8000") or a name, resolved with getaddrinfo (first result).
  // "unix:/path" is a Unix domain socket at that path; "unix:@name" one in
  // the abstract namespace (Linux; no file).
  static Status Parse(std::string_view host_port, Sockaddr* out);
  // As Parse, with every address a name resolves to, in getaddrinfo's
  // order and without repeats. Blocks while the resolver works.
  static Status ResolveAll(std::string_view host_port, std::vector<Sockaddr>* out);
  // The host part of a "host:port" Parse takes, unresolved: "db-1:7050" ->
  // "db-1", "[::1]:7050" -> "::1", "unix:/path" -> "" (no host).
  static std::string HostOf(std::string_view host_port);
  // Loopback (127.0.0.1) with the given port.
  static Sockaddr Loopback(uint16_t port);
  static Sockaddr FromNative(const sockaddr* addr, socklen_t len);

  // 0 for a Unix socket, where setting it does nothing.
  uint16_t port() const;
  void set_port(uint16_t port);
  int family() const { return storage_.ss_family; }
  bool is_unix() const { return family() == AF_UNIX; }
  // Traffic that never leaves this host: 127.0.0.0/8, ::1 or a Unix socket.
  // (Kudu's rule for authentication-only TLS counts all three.)
  bool IsLoopback() const;
  // "127.0.0.1:8000", "[::1]:8000", "unix:/run/x.sock" or "unix:@name"; a
  // client's unnamed Unix socket is "unix:(unnamed)".
  std::string ToString() const;
  // The address without its port; a Unix socket's ToString().
  std::string host() const;
  // A Unix socket's path ("@name" when abstract); empty otherwise.
  std::string unix_path() const;

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
