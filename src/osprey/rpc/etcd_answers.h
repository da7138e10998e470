// What etcd's gRPC-JSON gateway answers a client that reads and watches the
// servers under a prefix, decoded: the range answer, the watch stream split
// into its messages, each message applied to the table of servers; and a
// server's lease. Pure: no
// sockets, threads or clocks. EtcdWatcher (etcd_registry.h) feeds it what
// it reads; fuzz/etcd_answer_fuzzer.cc feeds it anything.
//
// The peer it guards against: whoever answers on an etcd endpoint. The
// gateway speaks plain HTTP, so that is a man in the middle as well as a
// compromised or broken member. Whatever it sends, a client keeps at most
// kMaxEtcdAnswerBytes of one answer or message and kMaxEtcdServers servers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "osprey/base/status.h"

namespace osprey {

// The most a client of etcd takes of one answer, or one message of a
// watch. etcd's own requests stop at 1.5 MiB (--max-request-bytes); an
// answer of kMaxEtcdServers servers is about 2.5 MB.
constexpr size_t kMaxEtcdAnswerBytes = size_t{16} << 20;
// The most servers a client keeps under one prefix: more than any fleet it
// would call, few enough to hold (each key and address, a few hundred
// bytes).
constexpr size_t kMaxEtcdServers = 10000;

// A lease as etcd's answer to /v3/lease/grant ({"ID", "TTL"}) or to
// /v3/lease/keepalive ({"result": {"ID", "TTL"}}) reports it; a field
// missing, negative or not a number reads 0 (a TTL of 0: etcd no longer
// has the lease). The TTL is etcd's word, up to INT64_MAX: its user bounds
// it (EtcdRegistration keeps the lease alive at the TTL it asked for). Corruption if the answer is
// not a JSON object.
struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;
};
Status ParseEtcdLease(std::string_view answer, EtcdLease* out);

// The token etcd's /v3/auth/authenticate answers ({"token": "..."}), which
// the client then sends as a header ("Authorization: TOKEN"). So it must
// be 1 to kMaxEtcdTokenBytes bytes of visible ASCII: a lying etcd's CR or
// LF would be a header of its choosing. Corruption otherwise; the message
// never holds the token.
constexpr size_t kMaxEtcdTokenBytes = 4096;
Status ParseEtcdToken(std::string_view answer, std::string* token);

// A watch stream's messages: one JSON object per line. One stream's; one
// thread at a time.
class EtcdLineSplitter {
 public:
  enum class Result {
    kMore,     // every whole line was handed over; waiting for more bytes
    kStopped,  // on_line returned false
    kTooLong,  // a line passed max_line_bytes: the stream cannot be trusted
  };
  explicit EtcdLineSplitter(size_t max_line_bytes = kMaxEtcdAnswerBytes)
      : max_line_bytes_(max_line_bytes) {}

  // Takes the next bytes of the stream and hands each line they complete
  // (without its '\n'; empty lines skipped) to `on_line`. Holds at most
  // max_line_bytes of a line not yet whole, and reads each byte once.
  Result Feed(std::string_view data, const std::function<bool(std::string_view)>& on_line);
  // Bytes of a line not yet whole.
  size_t buffered() const { return pending_.size(); }
  // Takes them: at the stream's clean end they are its last message (etcd
  // ends a watch's last message, its error, without a newline).
  std::string TakeRest() { return std::exchange(pending_, std::string()); }

 private:
  const size_t max_line_bytes_;
  std::string pending_;  // the start of a line; never holds a '\n'
};

// What one message of a watch asks of its watcher.
struct EtcdWatchStep {
  enum class Next {
    kContinue,   // read the next message
    kReadAgain,  // events may be lost: read the whole prefix (a range), then watch
    kWatchAgain  // the watch ended (etcd canceled it, or said why): watch again
  };
  Next next = Next::kContinue;
  bool created = false;  // etcd says the watch is now established
  // etcd canceled the watch because it did not know the client's token
  // (expired, or forgotten by a restarted member): authenticate again.
  bool unauthenticated = false;
  bool changed = false;  // the servers changed
  std::string why;       // for kReadAgain and kWatchAgain: what etcd sent, for the log
};

// The servers under a prefix, by key, as etcd reports them: at most
// max_servers; past that, keys new to it are counted, not kept, until
// deletions make room. Addresses are the value's "address", else what
// follows PREFIX/ in the key (a key written by hand). Revisions are kept
// from 0 to INT64_MAX - 1, so that the next is one too. One thread at a
// time (its owner guards it).
class EtcdServerTable {
 public:
  explicit EtcdServerTable(std::string prefix, size_t max_servers = kMaxEtcdServers)
      : prefix_(std::move(prefix)), max_servers_(max_servers) {}

  // A range answer (/v3/kv/range): its servers replace these, its revision
  // this table's. Corruption (and nothing changed) if it is not a JSON
  // object.
  Status LoadRange(std::string_view answer);
  // One message of a watch stream (/v3/watch). One whose header's
  // revision is below this table's comes from another history (an etcd
  // replaced by an empty one, or restored from an older snapshot): the
  // watch would wait for revisions that history has not reached, so it
  // says read everything again.
  EtcdWatchStep ApplyWatchMessage(std::string_view message);

  // The addresses, sorted, each once.
  std::vector<std::string> Addresses() const;
  size_t size() const { return servers_.size(); }
  int64_t revision() const { return revision_; }
  // Keys not kept because the table was full, since it was made.
  int64_t refused() const { return refused_; }

 private:
  // Puts key -> the address in `value`, unless that would pass the bound;
  // whether the table changed.
  bool Put(const std::string& key, const std::string& value);

  const std::string prefix_;  // "/PREFIX", without a trailing '/'
  const size_t max_servers_;
  std::map<std::string, std::string> servers_;  // key -> address
  int64_t revision_ = 0;                        // the last revision seen in full
  int64_t refused_ = 0;
};

}  // namespace osprey
