// ConnectionKey: where a client call goes. A reactor keeps one client
// connection per (address, user); the key is what it looks them up by.
#pragma once

#include <functional>
#include <string>

#include "osprey/base/sockaddr.h"

namespace osprey::transport {

struct ConnectionKey {
  Sockaddr remote;
  std::string user;
  bool operator==(const ConnectionKey& o) const { return remote == o.remote && user == o.user; }
};
struct ConnectionKeyHash {
  size_t operator()(const ConnectionKey& k) const {
    return k.remote.Hash() * 31 + std::hash<std::string>()(k.user);
  }
};

}  // namespace osprey::transport
