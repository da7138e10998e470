#include "osprey/rpc/result_tracker.h"

#include <glog/logging.h>

#include <algorithm>
#include <string>

#include "osprey/base/log_escape.h"

namespace osprey {

namespace {
size_t SizeOf(const StoredAnswer& a) {
  size_t n = a.body.size();
  for (const std::string& s : a.sidecars) n += s.size() + 32;
  return n;
}
}  // namespace

ResultTracker::ResultTracker(Options options)
    : options_(std::move(options)),
      max_bytes_per_user_(options_.max_bytes_per_user != 0
                              ? std::min(options_.max_bytes_per_user, options_.max_bytes)
                              : options_.max_bytes / 2) {}

void ResultTracker::Charge(User* user, size_t bytes) {
  user->bytes += bytes;
  bytes_ += bytes;
  DCHECK_LE(bytes_, options_.max_bytes);
  Reindex(user);
}

void ResultTracker::Uncharge(User* user, size_t bytes) {
  DCHECK_GE(user->bytes, bytes);
  user->bytes -= bytes;
  bytes_ -= bytes;
  Reindex(user);
}

void ResultTracker::Reindex(User* user) {
  if (user->indexed) evictable_.erase({user->indexed_bytes, user});
  user->indexed = CanEvict(*user, nullptr);
  if (user->indexed) {
    user->indexed_bytes = user->bytes;
    evictable_.insert({user->bytes, user});
  }
}

MonoTime ResultTracker::Now() const {
  return options_.clock ? options_.clock() : MonoTime::NowCoarse();
}

std::string ResultTracker::ClientKey(const std::string& user, const std::string& client_id) {
  // Length-prefixed: no user and id pair can spell another.
  return std::to_string(user.size()) + ":" + user + client_id;
}

ResultTracker::Decision ResultTracker::Track(const std::string& user, const std::string& share,
                                             const wire::RequestIdPB& id,
                                             std::unique_ptr<TrackedCall>* call) {
  if (id.client_id().size() > kMaxClientIdBytes) {
    (*call)->RespondFailure(
        wire::ErrorStatusPB::ERROR_INVALID_REQUEST,
        Status::InvalidArgument("the request id's client id is " +
                                std::to_string(id.client_id().size()) + " bytes long; at most " +
                                std::to_string(kMaxClientIdBytes) + " are allowed"));
    return Decision::kInvalid;
  }
  enum class Reply { kNone, kStored, kStale, kFull, kTooManyWaiting } reply = Reply::kNone;
  Answer stored;
  {
    MutexLock l(mu_);
    const MonoTime now = Now();
    SweepLocked(now);
    std::string key = ClientKey(user, id.client_id());
    User* u = &users_[share];
    u->name = share;
    pinned_ = u;
    // However Track ends, a user left without clients goes.
    struct Unpin {
      ResultTracker* t;
      User* u;
      ~Unpin() OSPREY_NO_THREAD_SAFETY_ANALYSIS {
        t->pinned_ = nullptr;
        if (u->clients == 0) {
          DCHECK_EQ(u->bytes, 0u);
          DCHECK(!u->indexed);
          std::string name = u->name;  // not a reference into what is erased
          t->users_.erase(name);
        }
      }
    } unpin{this, u};
    auto c = clients_.find(key);
    if (c == clients_.end()) {
      // A request the client itself calls finished makes no state.
      if (id.seq_no() < id.first_incomplete_seq_no()) {
        reply = Reply::kStale;
      } else if (!MakeRoom(u, kClientOverhead + 2 * key.size())) {
        reply = Reply::kFull;
      } else {
        c = clients_.emplace(key, Client()).first;
        Client& fresh = c->second;
        fresh.user = u;
        fresh.key = key;
        fresh.by_time = clients_by_time_.insert(clients_by_time_.end(), &fresh);
        ++u->clients;
        Charge(u, kClientOverhead + 2 * key.size());
        UpdateEmpty(&fresh);
      }
    }
    if (reply == Reply::kNone) {
      Client& client = c->second;
      client.last_heard = now;
      clients_by_time_.splice(clients_by_time_.end(), clients_by_time_, client.by_time);
      if (id.first_incomplete_seq_no() > client.first_incomplete) {
        client.first_incomplete = id.first_incomplete_seq_no();
        ForgetAcknowledged(&client);
      }
      auto it = client.entries.find(id.seq_no());
      if (it != client.entries.end()) {
        Entry& e = it->second;
        if (e.state == State::kDone) {
          stored = e.answer;
          reply = Reply::kStored;
          ++counts_.from_memory;
        } else if (e.state == State::kEvicted) {
          reply = Reply::kStale;
        } else if (e.waiting.size() >= options_.max_waiting_per_request) {
          reply = Reply::kTooManyWaiting;
        } else {
          const size_t cost = (*call)->memory_bytes();
          if (!MakeRoom(u, cost, &client)) {
            reply = Reply::kFull;
          } else {
            Charge(u, cost);
            e.waiting_bytes += cost;
            e.waiting.push_back(std::move(*call));
            ++waiting_;
            return Decision::kWaiting;
          }
        }
      } else if (id.seq_no() < client.first_incomplete || id.seq_no() < client.expired_below) {
        reply = Reply::kStale;
      } else if (!MakeRoom(u, kRequestOverhead, &client)) {
        reply = Reply::kFull;
      } else {
        client.entries.emplace(id.seq_no(), Entry());
        Charge(u, kRequestOverhead);
        ++client.running;
        UpdateEmpty(&client);
        return Decision::kRun;
      }
    }
    if (reply == Reply::kStale) {
      ++counts_.stale;
    } else if (reply == Reply::kFull || reply == Reply::kTooManyWaiting) {
      ++counts_.refused;
    }
  }
  switch (reply) {
    case Reply::kStored:
      (*call)->RespondStored(stored);
      return Decision::kAnswered;
    case Reply::kStale:
      (*call)->RespondFailure(
          wire::ErrorStatusPB::ERROR_REQUEST_STALE,
          Status::IllegalState("request " + std::to_string(id.seq_no()) + " of client " +
                               id.client_id() +
                               " is stale: its answer was already acknowledged or forgotten"));
      return Decision::kStale;
    case Reply::kFull:
      LOG_EVERY_N(WARNING, 1000) << "the memory of exactly-once requests is full for "
                                 << EscapeForLog(share) << " (its share " << max_bytes_per_user_
                                 << " of " << options_.max_bytes
                                 << " bytes); refusing its new ones until "
                                 << "its clients acknowledge answers or they expire";
      (*call)->RespondFailure(wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
                              Status::ServiceUnavailable(
                                  "the server's memory of exactly-once requests is full for "
                                  "this user (a share of " +
                                  std::to_string(max_bytes_per_user_) + " of " +
                                  std::to_string(options_.max_bytes) + " bytes); try again later"));
      return Decision::kRefused;
    case Reply::kTooManyWaiting:
      (*call)->RespondFailure(
          wire::ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
          Status::ServiceUnavailable(std::to_string(options_.max_waiting_per_request) +
                                     " attempts of request " + std::to_string(id.seq_no()) +
                                     " already wait for it to finish; try again later"));
      return Decision::kRefused;
    case Reply::kNone:
      break;
  }
  LOG(FATAL) << "unreachable";
  return Decision::kRefused;
}

void ResultTracker::Record(const Key& key, const Answer& answer, bool store) {
  std::vector<std::unique_ptr<TrackedCall>> waiting;
  {
    MutexLock l(mu_);
    const MonoTime now = Now();
    auto c = clients_.find(ClientKey(key.user, key.client_id));
    if (c == clients_.end()) return;
    Client& client = c->second;
    auto it = client.entries.find(key.seq_no);
    if (it == client.entries.end() || it->second.state != State::kRunning) return;
    Entry& e = it->second;
    User* u = client.user;
    waiting.swap(e.waiting);
    counts_.after_waiting += waiting.size();
    waiting_ -= waiting.size();
    Uncharge(u, e.waiting_bytes);
    e.waiting_bytes = 0;
    --client.running;
    if (!store || key.seq_no < client.first_incomplete) {
      // Nothing ran, so a retry may; or the client already moved past it.
      Erase(&client, it);
    } else {
      const size_t n = SizeOf(answer);
      // Room for it at the price of older answers; an answer that cannot
      // fit at all is not kept, but its record is: its retry is stale.
      if (n <= max_bytes_per_user_ && MakeRoom(u, n, &client)) {
        e.state = State::kDone;
        e.answer = answer;
        e.answer_bytes = n;
        Charge(u, n);
        e.order = done_.insert(done_.end(), {now, &client, key.seq_no});
        e.user_order = u->done.insert(u->done.end(), {now, &client, key.seq_no});
        Reindex(u);
      } else {
        e.state = State::kEvicted;
        e.order = evicted_.insert(evicted_.end(), {now, &client, key.seq_no});
      }
    }
    SweepLocked(now);
  }
  for (auto& w : waiting) w->RespondStored(answer);
}

void ResultTracker::Erase(Client* client, std::map<int64_t, Entry>::iterator it) {
  Entry& e = it->second;
  User* u = client->user;
  if (e.state == State::kDone) {
    Uncharge(u, e.answer_bytes);
    done_.erase(e.order);
    u->done.erase(e.user_order);
  } else if (e.state == State::kEvicted) {
    evicted_.erase(e.order);
  }
  Uncharge(u, kRequestOverhead + e.waiting_bytes);
  waiting_ -= e.waiting.size();
  client->entries.erase(it);
  UpdateEmpty(client);
}

void ResultTracker::UpdateEmpty(Client* client) {
  const bool empty = client->entries.empty();
  if (empty == client->listed_empty) return;
  ClientList& list = client->user->empty_clients;
  if (empty) {
    client->empty_it = list.insert(list.end(), client);
  } else {
    list.erase(client->empty_it);
  }
  client->listed_empty = empty;
  Reindex(client->user);
}

void ResultTracker::EraseClient(Client* client) {
  while (!client->entries.empty()) Erase(client, client->entries.begin());
  User* u = client->user;
  if (client->listed_empty) u->empty_clients.erase(client->empty_it);
  clients_by_time_.erase(client->by_time);
  Uncharge(u, kClientOverhead + 2 * client->key.size());
  clients_.erase(client->key);  // frees *client
  if (--u->clients == 0 && u != pinned_) {
    DCHECK_EQ(u->bytes, 0u);
    DCHECK(!u->indexed);
    std::string name = u->name;  // not a reference into what is erased
    users_.erase(name);          // frees *u
  }
}

void ResultTracker::ForgetAcknowledged(Client* client) {
  for (auto it = client->entries.begin();
       it != client->entries.end() && it->first < client->first_incomplete;) {
    auto next = std::next(it);
    if (it->second.state != State::kRunning) Erase(client, it);
    it = next;
  }
}

bool ResultTracker::CanEvict(const User& user, const Client* keep) {
  const ClientList& empty = user.empty_clients;
  return !user.done.empty() || empty.size() > 1 || (empty.size() == 1 && empty.front() != keep);
}

bool ResultTracker::IsAwaited(const OrderNode& answer) {
  return answer.seq_no == answer.client->first_incomplete;
}

bool ResultTracker::EvictOne(User* user, const Client* keep) {
  if (!user->done.empty()) {
    // The oldest answer goes; its record stays, so its retry is refused.
    // But not the answer of a client's first incomplete request while
    // others are left: by the client's own word it still waits for that
    // one (it ran, so its answer was lost on the way and a retry is
    // coming), where any other may have been delivered. Such an answer
    // moves to the back, once per eviction, so that an eviction stays one
    // step however many clients a user has (an answer awaited behind
    // another awaited one may go).
    if (user->done.size() > 1 && IsAwaited(user->done.front())) {
      user->done.splice(user->done.end(), user->done, user->done.begin());
    }
    OrderNode n = user->done.front();
    Entry& e = n.client->entries.at(n.seq_no);
    user->done.pop_front();
    done_.erase(e.order);
    Uncharge(user, e.answer_bytes);
    e.answer = Answer();
    e.answer_bytes = 0;
    e.state = State::kEvicted;
    e.order = evicted_.insert(evicted_.end(), {n.at, n.client, n.seq_no});
    LOG_EVERY_N(WARNING, 1000) << "evicting stored RPC answers of " << EscapeForLog(user->name)
                               << " (its share " << max_bytes_per_user_ << " of "
                               << options_.max_bytes
                               << " bytes); their retries will be refused as stale";
    return true;
  }
  // A client with nothing remembered: what it sends later is new.
  ClientList& empty = user->empty_clients;
  if (empty.empty() || (empty.size() == 1 && empty.front() == keep)) return false;
  Client* oldest = empty.front();
  if (oldest == keep) {
    empty.splice(empty.end(), empty, keep->empty_it);
    oldest = empty.front();
  }
  EraseClient(oldest);
  return true;
}

bool ResultTracker::MakeRoom(User* user, size_t need, const Client* keep) {
  DCHECK(user == pinned_ || user->clients > 0);  // not freed by an eviction below
  // More than a share can never fit: refused before anything is evicted.
  if (need > max_bytes_per_user_) return false;
  while (user->bytes + need > max_bytes_per_user_) {
    if (!EvictOne(user, keep)) return false;
  }
  while (bytes_ + need > options_.max_bytes) {
    // The user holding the most that has anything to give, from the index
    // (users may be many: under SASL PLAIN a client names itself). Only
    // `keep`'s user can be skipped, once.
    User* giver = nullptr;
    for (auto it = evictable_.rbegin(); it != evictable_.rend(); ++it) {
      if (CanEvict(*it->second, keep)) {
        giver = it->second;
        break;
      }
    }
    // Never at the price of a user who holds no more than `user` will:
    // then `user` gives its own, or is refused.
    if (giver != nullptr && giver != user && giver->bytes <= user->bytes + need) giver = nullptr;
    if (giver == nullptr && CanEvict(*user, keep)) giver = user;
    if (giver == nullptr) return false;
    EvictOne(giver, keep);
  }
  return true;
}

void ResultTracker::SweepLocked(MonoTime now) {
  // Answers and records past their time to live, oldest first: the client
  // has given up on them, and on everything before them.
  for (OrderList* list : {&done_, &evicted_}) {
    while (!list->empty() && now - list->front().at > options_.response_ttl) {
      OrderNode n = list->front();
      n.client->expired_below = std::max(n.client->expired_below, n.seq_no + 1);
      Erase(n.client, n.client->entries.find(n.seq_no));
    }
  }
  // Clients silent for their time to live, unless a request still runs.
  while (!clients_by_time_.empty() &&
         now - clients_by_time_.front()->last_heard > options_.client_ttl) {
    Client* client = clients_by_time_.front();
    if (client->running > 0) {
      clients_by_time_.splice(clients_by_time_.end(), clients_by_time_, client->by_time);
      client->last_heard = now;
      continue;
    }
    EraseClient(client);
  }
}

void ResultTracker::Sweep() {
  MutexLock l(mu_);
  SweepLocked(Now());
}

size_t ResultTracker::stored_answers() const {
  MutexLock l(mu_);
  return done_.size();
}

size_t ResultTracker::memory_bytes() const {
  MutexLock l(mu_);
  return bytes_;
}

size_t ResultTracker::clients() const {
  MutexLock l(mu_);
  return clients_.size();
}

ResultTracker::DuplicateCounts ResultTracker::duplicate_counts() const {
  MutexLock l(mu_);
  return counts_;
}

size_t ResultTracker::waiting_duplicates() const {
  MutexLock l(mu_);
  return waiting_;
}

size_t ResultTracker::user_bytes(const std::string& user) const {
  MutexLock l(mu_);
  auto it = users_.find(user);
  return it == users_.end() ? 0 : it->second.bytes;
}

size_t ResultTracker::evicted_records() const {
  MutexLock l(mu_);
  return evicted_.size();
}

}  // namespace osprey
