// ResultTracker: a server messenger's memory of the answers to methods that
// track results (Kudu's track_rpc_result and its ResultTracker), by request
// id, so that a call the client sends again (a retry after a timeout or a
// lost connection) is answered, not run again: exactly once.
//
// For each request id (client id, sequence number):
//  - the first attempt runs the handler;
//  - a duplicate that arrives while it runs waits for it and gets its
//    answer;
//  - a duplicate after it completed gets the stored answer, the handler
//    does not run;
//  - an attempt whose sequence number is below the lowest the client still
//    has in flight (its first_incomplete_seq_no) is stale: refused with
//    ERROR_REQUEST_STALE, as Kudu does.
// Answers are forgotten when the client says it has them
// (first_incomplete_seq_no passes them), after `response_ttl`, or, oldest
// first, when they would take more than `max_bytes`; a client not heard
// from for `client_ttl` is forgotten whole. A forgotten answer's retry is
// refused as stale rather than run twice.
//
// An attempt that did not run (the queue was full, its deadline passed, the
// server shut down, its client went away), or whose handler answered with
// an error, leaves nothing behind, as Kudu's FailAndRespond: a retry runs.
// Duplicates waiting for it get the same answer.
//
// Thread-safe: reactors look calls up, workers record answers.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey {

class InboundCall;

class ResultTracker {
 public:
  struct Options {
    // Kudu's --remember_responses_ttl_ms and --remember_clients_ttl_ms.
    MonoDelta response_ttl = MonoDelta::FromSeconds(600);
    MonoDelta client_ttl = MonoDelta::FromSeconds(3600);
    // Stored answers' bytes (bodies and sidecars) at most.
    size_t max_bytes = 64 * 1024 * 1024;
  };

  // A call's answer as stored: what any attempt is sent.
  struct Answer {
    bool is_error = false;
    std::string body;  // the response message, or an ErrorStatusPB
    std::vector<std::string> sidecars;
  };

  struct Key {
    std::string client_id;
    int64_t seq_no = 0;
  };

  explicit ResultTracker(Options options) : options_(options) {}
  ResultTracker(const ResultTracker&) = delete;
  ResultTracker& operator=(const ResultTracker&) = delete;

  enum class Decision {
    kRun,       // the first attempt: run it, then Record its answer
    kWaiting,   // a duplicate of one that runs: the tracker holds the call
    kAnswered,  // a duplicate of one that completed: answered from memory
    kStale,     // refused with ERROR_REQUEST_STALE
  };
  // What to do with `*call`, which carries `id`. Takes the call for
  // kWaiting; answers it for kAnswered and kStale.
  Decision Track(const wire::RequestIdPB& id, std::unique_ptr<InboundCall>* call) EXCLUDES(mu_);

  // The first attempt of `key` answered. `store`: its handler ran and
  // succeeded, so the answer is kept; otherwise the request is forgotten
  // and a retry runs. Answers the waiting duplicates either way.
  void Record(const Key& key, const Answer& answer, bool store) EXCLUDES(mu_);

  // For tests and /metrics.
  size_t stored_answers() const EXCLUDES(mu_);
  size_t stored_bytes() const EXCLUDES(mu_);
  size_t clients() const EXCLUDES(mu_);

 private:
  struct Entry {
    bool done = false;
    Answer answer;
    size_t bytes = 0;
    std::vector<std::unique_ptr<InboundCall>> waiting;
  };
  struct Client {
    std::map<int64_t, Entry> entries;
    int64_t first_incomplete = 0;  // the highest the client has told
    int64_t forgotten_below = 0;   // answers below this, not stored, are stale
    MonoTime last_heard;
  };
  struct Done {  // in the order answers were stored
    MonoTime at;
    std::string client_id;
    int64_t seq_no;
  };

  // Drops client's done entries below its first_incomplete.
  void ForgetAcknowledged(Client* client) REQUIRES(mu_);
  void Forget(Client* client, std::map<int64_t, Entry>::iterator it) REQUIRES(mu_);
  // Expired answers and clients, and answers beyond max_bytes.
  void Sweep(MonoTime now) REQUIRES(mu_);

  const Options options_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Client> clients_ GUARDED_BY(mu_);
  std::deque<Done> done_order_ GUARDED_BY(mu_);
  size_t bytes_ GUARDED_BY(mu_) = 0;
  size_t stored_ GUARDED_BY(mu_) = 0;
  MonoTime last_sweep_ GUARDED_BY(mu_);
};

}  // namespace osprey
