#include "osprey/transport/call_tables.h"

#include <climits>

namespace osprey::transport {

std::deque<std::shared_ptr<ClientCall>> ClientCallTable::TakeHeld() {
  std::deque<std::shared_ptr<ClientCall>> held;
  held.swap(held_);
  return held;
}

int32_t ClientCallTable::NextFreeId() {
  int32_t id;
  do {
    id = next_id_;
    next_id_ = next_id_ == INT32_MAX ? 0 : next_id_ + 1;
  } while (sent_.count(id) != 0);
  return id;
}

void ClientCallTable::AddSent(int32_t id, std::shared_ptr<ClientCall> call) {
  sent_.emplace(id, std::move(call));
}

std::shared_ptr<ClientCall> ClientCallTable::TakeSent(int32_t id) {
  auto it = sent_.find(id);
  if (it == sent_.end()) return nullptr;
  std::shared_ptr<ClientCall> call = std::move(it->second);
  sent_.erase(it);
  return call;
}

void ClientCallTable::ForgetSent(int32_t id, const ClientCall* call) {
  auto it = sent_.find(id);
  if (it != sent_.end() && it->second.get() == call) sent_.erase(it);
}

std::vector<std::shared_ptr<ClientCall>> ClientCallTable::TakeAll() {
  std::vector<std::shared_ptr<ClientCall>> all;
  all.reserve(held_.size() + sent_.size());
  for (auto& c : held_) all.push_back(std::move(c));
  for (auto& [id, c] : sent_) all.push_back(std::move(c));
  held_.clear();
  sent_.clear();
  return all;
}

bool ServerCallTable::Add(int32_t id, bool traced, MonoTime received, InboundCallTrace** trace) {
  *trace = nullptr;
  auto [it, inserted] = ids_.emplace(id, nullptr);
  if (!inserted) return false;
  if (traced) {
    InboundCallTrace* t;
    if (free_traces_.empty()) {
      t = &traces_.emplace_back();
    } else {
      t = free_traces_.back();
      free_traces_.pop_back();
      t->method.store(nullptr, std::memory_order_relaxed);
      t->running.store(false, std::memory_order_relaxed);
    }
    t->received = received;
    it->second = t;
    *trace = t;
  }
  published_->store(ids_.size(), std::memory_order_relaxed);
  return true;
}

void ServerCallTable::Remove(int32_t id) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return;
  if (it->second != nullptr) free_traces_.push_back(it->second);
  ids_.erase(it);
  published_->store(ids_.size(), std::memory_order_relaxed);
}

void ServerCallTable::Clear() {
  ids_.clear();
  published_->store(0, std::memory_order_relaxed);
}

}  // namespace osprey::transport
