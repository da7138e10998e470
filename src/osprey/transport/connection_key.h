// ConnectionKey: where a client call goes. A reactor keeps one client
// connection per (address, user, host name); the key is what it looks them
// up by. The host name is the one dialled: Kerberos asks for its service
// principal, and TLS checks that the server certificate names it.
#pragma once

#include <functional>
#include <string>

#include "osprey/base/sockaddr.h"

namespace osprey::transport {

struct ConnectionKey {
  Sockaddr remote;
  std::string user;
  std::string host;
  bool operator==(const ConnectionKey& o) const {
    return remote == o.remote && user == o.user && host == o.host;
  }
};
struct ConnectionKeyHash {
  size_t operator()(const ConnectionKey& k) const {
    return (k.remote.Hash() * 31 + std::hash<std::string>()(k.user)) * 31 +
           std::hash<std::string>()(k.host);
  }
};

}  // namespace osprey::transport
