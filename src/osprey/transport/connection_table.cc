#include "osprey/transport/connection_table.h"

#include "osprey/transport/connection.h"

namespace osprey::transport {

Connection* ConnectionTable::FindClient(const ConnectionKey& key) const {
  auto it = clients_.find(key);
  if (it == clients_.end() || it->second->is_shut_down() || it->second->retired()) return nullptr;
  return it->second.get();
}

void ConnectionTable::AddClient(const ConnectionKey& key, std::shared_ptr<Connection> conn) {
  all_[conn.get()] = conn;
  clients_.insert_or_assign(key, std::move(conn));
}

void ConnectionTable::AddServer(std::shared_ptr<Connection> conn) {
  Connection* raw = conn.get();
  all_[raw] = std::move(conn);
}

void ConnectionTable::Remove(Connection* conn) {
  auto it = all_.find(conn);
  if (it == all_.end()) return;
  closed_.push_back(std::move(it->second));
  all_.erase(it);
  for (auto c = clients_.begin(); c != clients_.end(); ++c) {
    if (c->second.get() == conn) {
      clients_.erase(c);
      break;
    }
  }
}

std::vector<std::shared_ptr<Connection>> ConnectionTable::Snapshot() const {
  std::vector<std::shared_ptr<Connection>> out;
  out.reserve(all_.size());
  for (const auto& [ptr, conn] : all_) out.push_back(conn);
  return out;
}

void ConnectionTable::Clear() {
  all_.clear();
  clients_.clear();
  closed_.clear();
}

}  // namespace osprey::transport
