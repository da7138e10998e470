// ResultTracker: a server messenger's memory of the answers to methods that
// track results (Kudu's track_rpc_result and its ResultTracker), by request
// id, so that a call the client sends again (a retry after a timeout or a
// lost connection) is answered, not run again: exactly once.
//
// A request is (user, client id, sequence number): the user is who
// authenticated the connection, so a stored answer is only ever given to the
// user whose call produced it; another user presenting the same client id
// is another client. Calls reach the tracker after they were authorized
// (ServiceIf::Handle), as in Kudu. For each request:
//  - the first attempt runs the handler;
//  - a duplicate that arrives while it runs waits for it and gets its
//    answer (at most `max_waiting_per_request` wait; more are refused
//    ERROR_SERVER_TOO_BUSY, which a client retries);
//  - a duplicate after it completed gets the stored answer, the handler
//    does not run;
//  - an attempt below the lowest sequence number the client still has in
//    flight (its first_incomplete_seq_no) is stale: refused with
//    ERROR_REQUEST_STALE, as Kudu does.
//
// Memory. Everything the tracker keeps is counted against `max_bytes`: each
// client (its id and record), each request (its record; its answer's body
// and sidecars while stored) and each waiting duplicate (its request).
//  - An answer is dropped when the client says it has it
//    (first_incomplete_seq_no passes it): at once, in time proportional to
//    what is dropped.
//  - Each user (who authenticated the calls) may hold at most its share,
//    `max_bytes_per_user`: beyond it, that user's own oldest answers are
//    evicted, then its clients that hold nothing. The answer of a client's
//    first incomplete request is passed over: by the client's word it is
//    still awaited (its answer was lost on the way and a retry is coming),
//    where any other may have been delivered. It goes only when the next
//    oldest is awaited too, so that an eviction stays one step. An evicted answer leaves
//    a small record behind, so that a retry of exactly that request is
//    refused as stale and never runs twice; no other sequence number is
//    affected (one that never ran still runs).
//  - Beyond `max_bytes` in all, the user holding the most that has
//    anything to evict gives first, in the same order, but never to a user
//    that would then hold as much: that one gives its own, or is refused.
//    So one user, however busy, can neither evict the answers of a user
//    holding less, nor take the room the others' shares leave.
//  - A share belongs to whoever the caller names in Track: the
//    authenticated user, or, where the user is only a name the peer chose
//    (SASL PLAIN), the peer's address (ServiceIf::TrackAuthorized), so
//    that a peer cannot multiply its shares by naming users. Answers stay
//    keyed by the user either way.
//  - A client id is at most kMaxClientIdBytes (Kudu's are 32): a longer
//    one is refused ERROR_INVALID_REQUEST and costs nothing.
//  - When a user's records alone fill its share, its new requests are
//    refused ERROR_SERVER_TOO_BUSY (retryable) until acknowledgements or
//    time free room; other users are not. The bound is never passed, and
//    nothing runs twice.
//  - After `response_ttl` an answer or record is forgotten, and the
//    client's requests up to it become stale (Kudu's remember_responses_ttl:
//    the client has long given up on them).
//  - A client silent for `client_ttl` with nothing running is forgotten
//    whole; a request it sends after that is new to the server and runs (as
//    in Kudu).
// Time comes from Options::clock; expiry happens as calls arrive and by
// Sweep(), each pass touching only what it frees.
//
// An attempt that did not run, or whose handler answered with an error,
// leaves nothing behind, as Kudu's FailAndRespond: a retry runs; duplicates
// waiting for it get the same answer.
//
// Thread-safe: workers (and reactors, for pools without workers) track
// calls and record answers.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/status.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

// A call's answer as stored: what any attempt is sent.
struct StoredAnswer {
  bool is_error = false;
  std::string body;  // the response message, or an ErrorStatusPB
  std::vector<std::string> sidecars;
};

// A call the tracker can hold while it waits for its first attempt, and
// answer.
class TrackedCall {
 public:
  virtual ~TrackedCall() = default;
  virtual void RespondStored(const StoredAnswer& answer) = 0;
  virtual void RespondFailure(wire::ErrorStatusPB::RpcErrorCodePB code, const Status& status) = 0;
  // What it holds while it waits (its request), for the memory bound.
  virtual size_t memory_bytes() const = 0;
};

class ResultTracker {
 public:
  using Answer = StoredAnswer;

  struct Options {
    // Kudu's --remember_responses_ttl_ms and --remember_clients_ttl_ms.
    MonoDelta response_ttl = MonoDelta::FromSeconds(600);
    MonoDelta client_ttl = MonoDelta::FromSeconds(3600);
    // Everything the tracker keeps, at most.
    size_t max_bytes = 64 * 1024 * 1024;
    // What one user may hold of it; 0: half of max_bytes.
    size_t max_bytes_per_user = 0;
    // Duplicates that may wait for one running request.
    size_t max_waiting_per_request = 16;
    // Where time comes from; null: MonoTime::NowCoarse.
    std::function<MonoTime()> clock;
  };

  struct Key {
    std::string user;
    std::string client_id;
    int64_t seq_no = 0;
  };

  // What one record costs besides its answer, and one client besides its
  // ids: the nodes, the bookkeeping and the allocator's share of them.
  static constexpr size_t kRequestOverhead = 160;
  static constexpr size_t kClientOverhead = 192;

  explicit ResultTracker(Options options);
  ResultTracker(const ResultTracker&) = delete;
  ResultTracker& operator=(const ResultTracker&) = delete;

  enum class Decision {
    kRun,       // the first attempt: run it, then Record its answer
    kWaiting,   // a duplicate of one that runs: the tracker holds the call
    kAnswered,  // a duplicate of one that completed: answered from memory
    kStale,     // refused with ERROR_REQUEST_STALE
    kRefused,   // refused ERROR_SERVER_TOO_BUSY: the memory bound, or too
                // many duplicates waiting
    kInvalid,   // refused ERROR_INVALID_REQUEST: a client id too long
  };
  static constexpr size_t kMaxClientIdBytes = 64;
  // What to do with `*call`, which `user` sent with `id`, counted against
  // `share`'s part of the memory (see above). Takes the call for kWaiting
  // (*call is then null); answers it for every decision but kRun. `id` may
  // be the call's own: it is not read once the call is handed over.
  Decision Track(const std::string& user, const std::string& share, const wire::RequestIdPB& id,
                 std::unique_ptr<TrackedCall>* call) OSPREY_EXCLUDES(mu_);
  // The same, with the user's own share: for authenticated users.
  Decision Track(const std::string& user, const wire::RequestIdPB& id,
                 std::unique_ptr<TrackedCall>* call) OSPREY_EXCLUDES(mu_) {
    return Track(user, user, id, call);
  }

  // The first attempt of `key` answered. `store`: its handler ran and
  // succeeded, so the answer is kept; otherwise the request is forgotten
  // and a retry runs. Answers the waiting duplicates either way.
  void Record(const Key& key, const Answer& answer, bool store) OSPREY_EXCLUDES(mu_);

  // Forgets what has expired by now. Calls do it too as they arrive.
  void Sweep() OSPREY_EXCLUDES(mu_);

  // For tests and /metrics.
  size_t stored_answers() const OSPREY_EXCLUDES(mu_);
  // Every byte counted against max_bytes.
  size_t memory_bytes() const OSPREY_EXCLUDES(mu_);
  size_t clients() const OSPREY_EXCLUDES(mu_);
  // What `share` (a user, or a PLAIN peer's address) holds.
  size_t user_bytes(const std::string& share) const OSPREY_EXCLUDES(mu_);
  // Requests whose answers were evicted, kept so that their retries are
  // refused.
  size_t evicted_records() const OSPREY_EXCLUDES(mu_);
  // What became of the attempts that were not first, since the start.
  struct DuplicateCounts {
    uint64_t after_waiting = 0;  // answered when the first attempt finished
    uint64_t from_memory = 0;    // answered from a stored answer
    uint64_t stale = 0;
    uint64_t refused = 0;  // the memory bound, or too many waiting
  };
  DuplicateCounts duplicate_counts() const OSPREY_EXCLUDES(mu_);
  // Attempts waiting now for their first attempt to finish, over every
  // request (each request's at most max_waiting_per_request).
  size_t waiting_duplicates() const OSPREY_EXCLUDES(mu_);

 private:
  struct Client;
  struct User;
  enum class State { kRunning, kDone, kEvicted };
  // In the order of their answers (or eviction), oldest first.
  struct OrderNode {
    MonoTime at;
    Client* client;
    int64_t seq_no;
  };
  using OrderList = std::list<OrderNode>;
  struct Entry {
    State state = State::kRunning;
    Answer answer;
    size_t answer_bytes = 0;
    std::vector<std::unique_ptr<TrackedCall>> waiting;
    size_t waiting_bytes = 0;
    OrderList::iterator order;       // in done_ (kDone) or evicted_ (kEvicted)
    OrderList::iterator user_order;  // in its user's done (kDone)
  };
  using ClientList = std::list<Client*>;
  // One user's part: what it holds, and what of it can be evicted. Exists
  // while the user has a client; its cost is within kClientOverhead.
  struct User {
    std::string name;
    size_t bytes = 0;
    size_t clients = 0;
    OrderList done;            // its stored answers, oldest first
    ClientList empty_clients;  // its clients with no entries, oldest first
    // In evictable_ (it has something to evict), under indexed_bytes.
    bool indexed = false;
    size_t indexed_bytes = 0;
  };
  struct Client {
    User* user = nullptr;
    std::string key;  // user and client id, as clients_ holds it
    std::map<int64_t, Entry> entries;
    int64_t first_incomplete = 0;  // the highest the client has told
    int64_t expired_below = 0;     // requests below this are stale (TTL)
    int running = 0;
    MonoTime last_heard;
    ClientList::iterator by_time;  // in clients_by_time_
    bool listed_empty = false;     // in empty_clients_: no entries
    ClientList::iterator empty_it;
  };

  MonoTime Now() const;
  static std::string ClientKey(const std::string& user, const std::string& client_id);
  // Entries below the client's first_incomplete, answered or evicted.
  void ForgetAcknowledged(Client* client) OSPREY_REQUIRES(mu_);
  void Erase(Client* client, std::map<int64_t, Entry>::iterator it) OSPREY_REQUIRES(mu_);
  // Expired answers, records and clients.
  void SweepLocked(MonoTime now) OSPREY_REQUIRES(mu_);
  // Makes room for `need` more bytes of `user`: within its share, by
  // evicting its own answers, oldest first, then its clients with nothing
  // remembered, least recently heard first; within max_bytes, by evicting
  // so from the user holding the most. False if they cannot: only `user`
  // is then refused. `keep` (may be null) is not evicted.
  bool MakeRoom(User* user, size_t need, const Client* keep = nullptr) OSPREY_REQUIRES(mu_);
  // One eviction from `user`, as above. False if it has nothing to give.
  bool EvictOne(User* user, const Client* keep) OSPREY_REQUIRES(mu_);
  // The stored answer of its client's first incomplete request.
  static bool IsAwaited(const OrderNode& answer);
  static bool CanEvict(const User& user, const Client* keep);
  // Every byte the tracker keeps is added and taken here, to its user's
  // count and the total.
  void Charge(User* user, size_t bytes) OSPREY_REQUIRES(mu_);
  void Uncharge(User* user, size_t bytes) OSPREY_REQUIRES(mu_);
  // Keeps evictable_ true of `user` after its bytes or what it could evict
  // changed.
  void Reindex(User* user) OSPREY_REQUIRES(mu_);
  void EraseClient(Client* client) OSPREY_REQUIRES(mu_);
  // Keeps empty_clients_ true of `client` after its entries changed.
  void UpdateEmpty(Client* client) OSPREY_REQUIRES(mu_);

  const Options options_;
  const size_t max_bytes_per_user_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Client> clients_ OSPREY_GUARDED_BY(mu_);
  // Node-based: Client::user points into it. A user goes with its last
  // client, unless it is `pinned_` (the user a Track serves).
  std::unordered_map<std::string, User> users_ OSPREY_GUARDED_BY(mu_);
  User* pinned_ OSPREY_GUARDED_BY(mu_) = nullptr;
  // The users with something to evict, by what they hold.
  std::set<std::pair<size_t, User*>> evictable_ OSPREY_GUARDED_BY(mu_);
  ClientList clients_by_time_ OSPREY_GUARDED_BY(mu_);  // least recently heard first
  OrderList done_ OSPREY_GUARDED_BY(mu_);              // stored answers
  OrderList evicted_ OSPREY_GUARDED_BY(mu_);           // records of evicted answers
  size_t bytes_ OSPREY_GUARDED_BY(mu_) = 0;
  DuplicateCounts counts_ OSPREY_GUARDED_BY(mu_);
  size_t waiting_ OSPREY_GUARDED_BY(mu_) = 0;  // the entries' waiting calls, in all
};

}  // namespace osprey
