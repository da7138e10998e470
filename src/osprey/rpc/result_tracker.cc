#include "osprey/rpc/result_tracker.h"

#include <glog/logging.h>

#include "osprey/rpc/inbound_call.h"

namespace osprey {

namespace {
size_t SizeOf(const ResultTracker::Answer& a) {
  size_t n = a.body.size() + 64;  // with what holding it costs
  for (const std::string& s : a.sidecars) n += s.size();
  return n;
}
}  // namespace

ResultTracker::Decision ResultTracker::Track(const wire::RequestIdPB& id,
                                             std::unique_ptr<InboundCall>* call) {
  std::unique_ptr<InboundCall> stale;
  Answer stored;
  {
    MutexLock l(mu_);
    const MonoTime now = MonoTime::NowCoarse();
    if (now - last_sweep_ > MonoDelta::FromSeconds(1)) Sweep(now);
    Client& client = clients_[id.client_id()];
    client.last_heard = now;
    if (id.first_incomplete_seq_no() > client.first_incomplete) {
      client.first_incomplete = id.first_incomplete_seq_no();
      ForgetAcknowledged(&client);
    }
    auto it = client.entries.find(id.seq_no());
    if (it != client.entries.end()) {
      if (!it->second.done) {
        it->second.waiting.push_back(std::move(*call));
        return Decision::kWaiting;
      }
      stored = it->second.answer;
    } else if (id.seq_no() < client.first_incomplete || id.seq_no() < client.forgotten_below) {
      stale = std::move(*call);
    } else {
      client.entries.emplace(id.seq_no(), Entry());
      return Decision::kRun;
    }
  }
  if (stale != nullptr) {
    stale->RespondFailure(
        wire::ErrorStatusPB::ERROR_REQUEST_STALE,
        Status::IllegalState("request " + std::to_string(id.seq_no()) + " of client " +
                             id.client_id() +
                             " is stale: its answer was already acknowledged or forgotten"));
    return Decision::kStale;
  }
  (*call)->RespondStored(stored);
  return Decision::kAnswered;
}

void ResultTracker::Record(const Key& key, const Answer& answer, bool store) {
  std::vector<std::unique_ptr<InboundCall>> waiting;
  {
    MutexLock l(mu_);
    auto c = clients_.find(key.client_id);
    if (c == clients_.end()) return;
    auto it = c->second.entries.find(key.seq_no);
    if (it == c->second.entries.end() || it->second.done) return;
    waiting.swap(it->second.waiting);
    if (!store || key.seq_no < c->second.first_incomplete) {
      // Nothing ran, so a retry may; or the client already moved past it.
      c->second.entries.erase(it);
    } else {
      Entry& e = it->second;
      e.done = true;
      e.answer = answer;
      e.bytes = SizeOf(answer);
      bytes_ += e.bytes;
      ++stored_;
      const MonoTime now = MonoTime::NowCoarse();
      done_order_.push_back({now, key.client_id, key.seq_no});
      if (bytes_ > options_.max_bytes) Sweep(now);
    }
  }
  for (auto& w : waiting) w->RespondStored(answer);
}

void ResultTracker::Forget(Client* client, std::map<int64_t, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  --stored_;
  client->entries.erase(it);
}

void ResultTracker::ForgetAcknowledged(Client* client) {
  for (auto it = client->entries.begin();
       it != client->entries.end() && it->first < client->first_incomplete;) {
    auto next = std::next(it);
    if (it->second.done) Forget(client, it);
    it = next;
  }
}

void ResultTracker::Sweep(MonoTime now) {
  last_sweep_ = now;
  // Oldest answers first: past their time to live, or beyond the bound.
  while (!done_order_.empty() &&
         (bytes_ > options_.max_bytes || now - done_order_.front().at > options_.response_ttl)) {
    Done d = std::move(done_order_.front());
    done_order_.pop_front();
    auto c = clients_.find(d.client_id);
    if (c == clients_.end()) continue;
    auto it = c->second.entries.find(d.seq_no);
    if (it == c->second.entries.end() || !it->second.done) continue;  // acknowledged already
    if (bytes_ > options_.max_bytes) {
      LOG_EVERY_N(WARNING, 1000) << "forgetting stored RPC answers beyond " << options_.max_bytes
                                 << " bytes; their retries will be stale";
    }
    c->second.forgotten_below = std::max(c->second.forgotten_below, d.seq_no + 1);
    Forget(&c->second, it);
  }
  for (auto it = clients_.begin(); it != clients_.end();) {
    bool idle = now - it->second.last_heard > options_.client_ttl;
    bool running = false;
    for (const auto& [seq, e] : it->second.entries) running |= !e.done;
    if (idle && !running) {
      for (auto e = it->second.entries.begin(); e != it->second.entries.end();) {
        auto next = std::next(e);
        Forget(&it->second, e);
        e = next;
      }
      it = clients_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t ResultTracker::stored_answers() const {
  MutexLock l(mu_);
  return stored_;
}

size_t ResultTracker::stored_bytes() const {
  MutexLock l(mu_);
  return bytes_;
}

size_t ResultTracker::clients() const {
  MutexLock l(mu_);
  return clients_.size();
}

}  // namespace osprey
