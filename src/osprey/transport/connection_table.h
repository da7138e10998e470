// ConnectionTable: a reactor's connections. Every open one, the client ones
// also by (address, user), and those closed during the current loop
// iteration, kept alive until it ends because events it is still handling
// may name them. Not thread-safe: its reactor uses it on its own thread
// only (the reactor's loop lock guards it).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "osprey/base/sockaddr.h"
#include "osprey/transport/connection_key.h"

namespace osprey::transport {

class Connection;

class ConnectionTable {
 public:
  // The client connection for `key`, unless there is none, or it has shut
  // down or retired (Connection::retired).
  Connection* FindClient(const ConnectionKey& key) const;
  // Replaces any connection for `key` (one that has shut down).
  void AddClient(const ConnectionKey& key, std::shared_ptr<Connection> conn);
  void AddServer(std::shared_ptr<Connection> conn);
  // Forgets `conn`, which stays alive until ReleaseClosed().
  void Remove(Connection* conn);
  // The end of a loop iteration: the connections removed during it go.
  void ReleaseClosed() { closed_.clear(); }

  // The open connections, as owning references: for work that may close
  // some of them while it goes.
  std::vector<std::shared_ptr<Connection>> Snapshot() const;
  template <class F>
  void ForEach(F&& f) const {
    for (const auto& [ptr, conn] : all_) f(*conn);
  }
  size_t size() const { return all_.size(); }
  void Clear();

 private:
  std::unordered_map<ConnectionKey, std::shared_ptr<Connection>, ConnectionKeyHash> clients_;
  std::unordered_map<Connection*, std::shared_ptr<Connection>> all_;
  std::vector<std::shared_ptr<Connection>> closed_;
};

}  // namespace osprey::transport
