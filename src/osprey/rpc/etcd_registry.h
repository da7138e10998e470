// Servers found through etcd (issue 50): a server registers the address it
// listens on under a key prefix, with a lease it keeps alive
// (EtcdRegistration); clients read the prefix and watch it (EtcdWatcher,
// behind ServerSet's "etcd://" targets).
//
// Both speak etcd v3's gRPC-JSON gateway over HTTP/1.1 with libcurl
// (EtcdHttp): POSTs of JSON to /v3/kv/range, /v3/kv/put, /v3/lease/grant,
// /v3/lease/keepalive, /v3/lease/revoke, and the streaming /v3/watch; keys
// and values are base64 in the JSON. A key is PREFIX/ADDRESS, its value
// {"address": "HOST:PORT", "pid": N}. Each endpoint of the target is tried
// in turn.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "osprey/base/log_rate_limiter.h"
#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/status.h"
#include "osprey/rpc/etcd_answers.h"
#include "osprey/rpc/etcd_watch_liveness.h"

struct curl_slist;

namespace osprey {

// How a client reaches an etcd over TLS (an "etcds://" target): the CA
// file that signed etcd's certificate (empty: the system's CAs), and this
// process's certificate and key, for an etcd that requires them
// (--client-cert-auth; empty: none). A value; any thread.
struct EtcdTlsFiles {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// A user of an etcd with authentication on (etcd's RBAC: its roles grant
// keys to users), whose password this process holds. etcd's gateway knows
// a user only by name and password (not by a client certificate's name):
// the client sends them to /v3/auth/authenticate and every request after
// with the token etcd answers. So they go only over TLS (etcds://). Empty
// user: none. A value; any thread.
struct EtcdCredentials {
  std::string user;
  std::string password;
};

// A parsed "etcd://HOST:PORT[,HOST:PORT...]/PREFIX", or "etcds://..." for
// HTTPS, etcd's certificate verified and its name checked against HOST. A
// value; any thread.
struct EtcdTarget {
  std::vector<std::string> endpoints;  // "HOST:PORT", each an etcd member
  std::string prefix;                  // "/PREFIX", without a trailing '/'
  bool tls = false;                    // etcds://
  EtcdTlsFiles tls_files;              // not in the URL: MessengerBuilder::set_etcd_tls
  EtcdCredentials credentials;         // not in the URL: MessengerBuilder::set_etcd_credentials

  static bool IsEtcd(const std::string& target) {
    return target.rfind("etcd://", 0) == 0 || target.rfind("etcds://", 0) == 0;
  }
  // InvalidArgument unless `target` is etcd:// or etcds://, names at least
  // one HOST:PORT and a non-empty prefix.
  static Status Parse(const std::string& target, EtcdTarget* out);
  // InvalidArgument if it has credentials but is not etcds://: a password
  // is never sent in the clear.
  Status CheckCredentials() const;
  // The key a server at `address` registers under.
  std::string KeyOf(const std::string& address) const { return prefix + "/" + address; }
  std::string ToString() const;
};

// The wait before the next try of a request or watch that `failed`, after
// a last wait of `last` (zero: the first failure): 100 ms doubling to 1 s.
// A refusal of the user (NotAuthorized: a wrong password, a prefix not
// granted) waits 5 s doubling to 60 s instead: the operator must act, and
// each try makes etcd hash the password (bcrypt), which many clients
// retrying each second would turn into a load on etcd.
MonoDelta NextEtcdBackoff(MonoDelta last, const Status& failed);

// POSTs of JSON to etcd's gateway, with libcurl. With credentials (only
// over TLS: checked), each request carries a token, asked for before the
// first and again when etcd no longer knows it. One thread at a time makes
// requests (its owner's background thread); Interrupt() may come from any
// thread, and makes the request under way and every later one return
// Aborted at once (curl_multi_wakeup), so that the owner's thread can be
// joined without waiting for a watch that may last forever.
class EtcdHttp {
 public:
  // `tls`: HTTPS with `files` (EtcdTlsFiles); `credentials`: etcd's user.
  explicit EtcdHttp(std::vector<std::string> endpoints, bool tls = false, EtcdTlsFiles files = {},
                    EtcdCredentials credentials = {});
  // Every endpoint of `target`, with its TLS files and credentials.
  explicit EtcdHttp(const EtcdTarget& target)
      : EtcdHttp(target.endpoints, target.tls, target.tls_files, target.credentials) {}
  ~EtcdHttp();
  EtcdHttp(const EtcdHttp&) = delete;
  EtcdHttp& operator=(const EtcdHttp&) = delete;

  // POSTs `body` to `path` on the endpoint that answered last, then on the
  // others; *out gets the answer's body. NetworkError when none answers
  // within `timeout` each, RemoteError when etcd answers other than 200,
  // Corruption when its answer runs past kMaxEtcdAnswerBytes (read no
  // further), NotAuthorized when etcd refuses the user's password or the
  // user the keys (not tried on other members: they would say the same).
  Status Post(const std::string& path, const std::string& body, MonoDelta timeout,
              std::string* out);
  // A streaming POST (/v3/watch) to one endpoint (the next after a
  // failure): `on_data` gets each piece of the answer as it comes, until
  // the stream ends, breaks, on_data returns false, or Interrupt(). The
  // member must stay alive by `timeouts` (EtcdWatchLiveness; TimedOut
  // with the reason): it must answer within their first_answer, and, once
  // the stream is silent for their probe_after, answer a POST of
  // `probe_body` to /v3/kv/range within their probe_timeout. So a hung
  // member, before or after its first answer, is left for the next. It
  // must have a leader (etcd's require-leader metadata): a member cut off
  // from its cluster ends the stream ("no leader") rather than keep it
  // open with nothing to say.
  Status Stream(const std::string& path, const std::string& body, MonoDelta connect_timeout,
                const EtcdWatchTimeouts& timeouts, const std::string& probe_body,
                const std::function<bool(const char*, size_t)>& on_data);
  void Interrupt();
  bool interrupted() const { return interrupted_.load(std::memory_order_acquire); }
  // The endpoint requests go to first ("HOST:PORT"), and a move to the
  // next (a member that ended a watch cleanly: without a leader, or
  // stopping).
  std::string endpoint() const { return endpoints_[current_.load() % endpoints_.size()]; }
  void NextEndpoint() { current_.fetch_add(1); }
  // The next request authenticates again (etcd canceled a watch for its
  // token). The owner's thread.
  void ForgetToken() { token_.clear(); }

 private:
  // Runs the transfer set up on `easy` (a CURL*) to its end, or until
  // `give_up` (asked about every 500 ms; may be null) says so (TimedOut);
  // *http_code gets the HTTP status. Other transfers `give_up` added to
  // the multi handle meanwhile end in `on_other_done` (handle, CURLcode).
  Status Perform(void* easy, long* http_code, const std::function<bool()>& give_up = nullptr,
                 const std::function<void(void*, int)>& on_other_done = nullptr);
  // One POST to endpoints_[at], with the token if `authorized`; *code gets
  // the HTTP status. Post's errors, for that one member.
  Status PostTo(size_t at, const std::string& path, const std::string& body, MonoDelta timeout,
                bool authorized, std::string* out, long* code);
  // A token for credentials_ from endpoints_[at], into token_.
  Status Authenticate(size_t at, MonoDelta timeout);
  // `headers` with "Authorization: <token_>" appended.
  curl_slist* WithToken(curl_slist* headers) const;
  // A CURL* for a POST of `body` to `path` on endpoints_[at].
  void* MakePost(size_t at, const std::string& path, const std::string& body,
                 curl_slist* headers) const;
  const std::vector<std::string> endpoints_;
  const bool tls_;
  const EtcdTlsFiles files_;
  const EtcdCredentials credentials_;
  std::string token_;  // the owner's thread's; empty: none yet
  std::atomic<size_t> current_{0};
  std::atomic<bool> interrupted_{false};
  void* const multi_;  // CURLM*: made and freed with this; wakeup is thread-safe
};

// A server's registration: each address under the target's prefix, held by
// one lease that a thread of its own keeps alive (every third of the TTL).
// If etcd forgot the lease (it expired while etcd was unreachable), the
// thread grants a new one and puts the keys again. A process that dies
// stops keeping it alive, and etcd deletes the keys when the TTL runs out.
// Start, WaitRegistered, Withdraw and the destructor: any thread (not a
// reactor's: they may wait for etcd).
class EtcdRegistration {
 public:
  EtcdRegistration(EtcdTarget target, std::vector<std::string> addresses, MonoDelta ttl);
  ~EtcdRegistration();  // Withdraw()
  EtcdRegistration(const EtcdRegistration&) = delete;
  EtcdRegistration& operator=(const EtcdRegistration&) = delete;

  void Start() OSPREY_EXCLUDES(mu_);
  // Whether the keys are in etcd, waiting for that at most `timeout`.
  bool WaitRegistered(MonoDelta timeout) OSPREY_EXCLUDES(mu_);
  // Stops keeping the lease alive and revokes it, which deletes the keys at
  // once (the watchers see them go). Idempotent.
  void Withdraw() OSPREY_EXCLUDES(mu_);
  int64_t lease() const OSPREY_EXCLUDES(mu_);

 private:
  void Run() OSPREY_EXCLUDES(mu_);
  // One step: grant a lease, put the keys, or keep the lease alive.
  Status Step(int64_t* lease, bool* put_done, int64_t* granted_ttl);

  const EtcdTarget target_;
  const std::vector<std::string> addresses_;
  const int64_t ttl_seconds_;
  EtcdHttp http_;  // the thread's
  std::thread thread_;
  mutable Mutex mu_;
  CondVar cv_;
  bool started_ OSPREY_GUARDED_BY(mu_) = false;
  bool stop_ OSPREY_GUARDED_BY(mu_) = false;
  bool withdrawn_ OSPREY_GUARDED_BY(mu_) = false;
  bool registered_ OSPREY_GUARDED_BY(mu_) = false;
  int64_t lease_ OSPREY_GUARDED_BY(mu_) = 0;
};

// A client's view of the servers under a prefix: read once (Load), then
// watched by a thread of its own from the revision it last saw, calling
// `on_change` with every server's address after each change (on that
// thread). While etcd is unreachable it keeps the last set and logs so;
// when etcd answers again it resumes the watch from its revision (no full
// read unless etcd compacted that revision away, a message was lost, or
// etcd is at a revision before the client's: another etcd's history),
// after a backoff with jitter (NextEtcdBackoff) so that many clients do
// not come back at once. A member that stops answering while its
// connection stays up (a hung process) is left for the next once a probe
// after a silence goes unanswered (EtcdWatchLiveness). Whatever etcd
// sends, it holds at most kMaxEtcdAnswerBytes of it and kMaxEtcdServers
// servers (EtcdServerTable). Load before Start, from the owner's thread; Stop and the accessors:
// any thread.
class EtcdWatcher {
 public:
  using OnChange = std::function<void(const std::vector<std::string>& addresses)>;
  // `timeouts`: how long a member may stay silent (EtcdWatchLiveness).
  EtcdWatcher(EtcdTarget target, OnChange on_change, EtcdWatchTimeouts timeouts = {});
  ~EtcdWatcher();  // Stop()
  EtcdWatcher(const EtcdWatcher&) = delete;
  EtcdWatcher& operator=(const EtcdWatcher&) = delete;

  // Reads the prefix (each request at most `timeout`) and calls on_change.
  Status Load(MonoDelta timeout) OSPREY_EXCLUDES(mu_);
  void Start() OSPREY_EXCLUDES(mu_);
  // Ends the watch and joins the thread; on_change is not called after.
  void Stop() OSPREY_EXCLUDES(mu_);
  // Whether the watch is established now (false before the first, and
  // while etcd is unreachable).
  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // Times the watch broke and was made again.
  int64_t reconnects() const { return reconnects_.load(std::memory_order_relaxed); }
  int64_t revision() const OSPREY_EXCLUDES(mu_);
  const EtcdTarget& target() const { return target_; }
  // Why the last read or watch failed, until one succeeds (OK then): what
  // a caller finding no server should be told.
  Status last_error() const OSPREY_EXCLUDES(mu_);

 private:
  void Run() OSPREY_EXCLUDES(mu_);
  // One watch stream from revision_ + 1, until it ends.
  Status Watch() OSPREY_EXCLUDES(mu_);
  // A message of the watch stream; false to end the stream.
  bool OnWatchMessage(std::string_view message) OSPREY_EXCLUDES(mu_);
  void Publish() OSPREY_EXCLUDES(mu_);
  // Logs keys the table would not keep since it last did.
  void LogRefusedServers() OSPREY_REQUIRES(mu_);

  const EtcdTarget target_;
  const OnChange on_change_;
  const EtcdWatchTimeouts timeouts_;
  EtcdHttp http_;  // Load's, then the thread's
  std::thread thread_;
  std::atomic<bool> connected_{false};
  std::atomic<int64_t> reconnects_{0};
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ OSPREY_GUARDED_BY(mu_) = false;
  bool need_load_ OSPREY_GUARDED_BY(mu_) = true;
  EtcdServerTable table_ OSPREY_GUARDED_BY(mu_);
  Status last_error_ OSPREY_GUARDED_BY(mu_);
  // table_.refused() when last logged; logged at most once in 10 s, since
  // etcd may list more with every message.
  int64_t refused_logged_ OSPREY_GUARDED_BY(mu_) = 0;
  LogRateLimiter refused_log_{1, MonoDelta::FromSeconds(10)};
};

}  // namespace osprey
