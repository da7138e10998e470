#include "osprey/rpc/etcd_registry.h"

#include <curl/curl.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "osprey/base/base64.h"
#include "osprey/base/thread_name.h"

namespace osprey {

namespace {

using nlohmann::json;

// curl_global_init is not thread-safe in every libcurl: once, before the
// first handle.
void InitCurl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Where a POST's answer goes: at most kMaxEtcdAnswerBytes of it.
struct BoundedAnswer {
  std::string* body;
  bool too_long = false;
};

size_t AppendToAnswer(char* data, size_t size, size_t n, void* out) {
  auto* a = static_cast<BoundedAnswer*>(out);
  if (a->body->size() + size * n > kMaxEtcdAnswerBytes) {
    a->too_long = true;
    return 0;  // curl ends the transfer
  }
  a->body->append(data, size * n);
  return size * n;
}

size_t CallOnData(char* data, size_t size, size_t n, void* fn) {
  const auto& on_data = *static_cast<const std::function<bool(const char*, size_t)>*>(fn);
  return on_data(data, size * n) ? size * n : 0;  // 0: curl ends the transfer
}

// The end of the range of keys starting with `prefix`: its last byte plus
// one (etcd's "range_end").
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char last = static_cast<unsigned char>(prefix.back());
    if (last < 0xff) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace

Status EtcdTarget::Parse(const std::string& target, EtcdTarget* out) {
  const std::string usage =
      "target '" + target + "': expected etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcds:// for TLS)";
  if (!IsEtcd(target)) return Status::InvalidArgument(usage);
  const bool tls = target.rfind("etcds://", 0) == 0;
  std::string rest = target.substr(tls ? 8 : 7);
  size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0) return Status::InvalidArgument(usage);
  EtcdTarget t;
  std::string hosts = rest.substr(0, slash);
  size_t start = 0;
  while (start <= hosts.size()) {
    size_t comma = hosts.find(',', start);
    std::string one =
        hosts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (one.empty() || one.find(':') == std::string::npos) return Status::InvalidArgument(usage);
    t.endpoints.push_back(one);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  t.prefix = rest.substr(slash);
  while (t.prefix.size() > 1 && t.prefix.back() == '/') t.prefix.pop_back();
  if (t.prefix.size() < 2) return Status::InvalidArgument(usage + " (the prefix is empty)");
  t.tls = tls;
  *out = std::move(t);
  return Status::OK();
}

Status EtcdTarget::CheckCredentials() const {
  if (credentials.user.empty() || tls) return Status::OK();
  return Status::InvalidArgument("target '" + ToString() + "': etcd's password goes only over " +
                                 "TLS; write etcds:// (set_etcd_credentials)");
}

std::string EtcdTarget::ToString() const {
  std::string s = tls ? "etcds://" : "etcd://";
  for (size_t i = 0; i < endpoints.size(); ++i) s += (i ? "," : "") + endpoints[i];
  return s + prefix;
}

MonoDelta NextEtcdBackoff(MonoDelta last, const Status& failed) {
  if (failed.IsNotAuthorized()) {
    return std::clamp(last * 2, MonoDelta::FromSeconds(5), MonoDelta::FromSeconds(60));
  }
  if (last <= MonoDelta()) return MonoDelta::FromMilliseconds(100);
  return std::min(last * 2, MonoDelta::FromSeconds(1));
}

// --- EtcdHttp ---

EtcdHttp::EtcdHttp(std::vector<std::string> endpoints, bool tls, EtcdTlsFiles files,
                   EtcdCredentials credentials)
    : endpoints_(std::move(endpoints)),
      tls_(tls),
      files_(std::move(files)),
      credentials_(std::move(credentials)),
      multi_((InitCurl(), curl_multi_init())) {
  CHECK(!endpoints_.empty());
  CHECK(tls_ || credentials_.user.empty()) << "a password for etcd goes only over TLS";
  CHECK(multi_ != nullptr) << "curl_multi_init failed";
}

EtcdHttp::~EtcdHttp() { curl_multi_cleanup(static_cast<CURLM*>(multi_)); }

void EtcdHttp::Interrupt() {
  interrupted_.store(true, std::memory_order_release);
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

Status EtcdHttp::Perform(void* easy_handle, long* http_code, const std::function<bool()>& give_up,
                         const std::function<void(void*, int)>& on_other_done) {
  CURLM* multi = static_cast<CURLM*>(multi_);
  CURL* easy = static_cast<CURL*>(easy_handle);
  // curl's own account of a failure ("SSL certificate problem: ..."),
  // more than curl_easy_strerror's line.
  char detail[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, detail);
  curl_multi_add_handle(multi, easy);
  Status result;
  // Ends when curl does (its timeouts bound a POST; a watch lasts until it
  // breaks) or at Interrupt, which wakes the poll.
  while (true) {
    if (interrupted()) {
      result = Status::Aborted("etcd request interrupted");
      break;
    }
    int running = 0;
    curl_multi_perform(multi, &running);
    int left = 0;
    bool done = false;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      if (msg->easy_handle != easy) {
        if (on_other_done) on_other_done(msg->easy_handle, msg->data.result);
        continue;
      }
      done = true;
      if (msg->data.result != CURLE_OK) {
        result = Status::NetworkError(std::string("etcd: ") + curl_easy_strerror(msg->data.result) +
                                      (detail[0] != '\0' ? std::string(": ") + detail : ""));
      }
    }
    if (done) break;
    if (give_up && give_up()) {
      result = Status::TimedOut("etcd did not answer in time");
      break;
    }
    curl_multi_poll(multi, nullptr, 0, 500, nullptr);
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, http_code);
  curl_multi_remove_handle(multi, easy);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, nullptr);  // `detail` goes now
  return result;
}

// An easy handle for a JSON POST of `body` to `path` on endpoint `at`; the
// caller sets where the answer goes.
void* EtcdHttp::MakePost(size_t at, const std::string& path, const std::string& body,
                         curl_slist* headers) const {
  CURL* easy = curl_easy_init();
  const std::string url = (tls_ ? "https://" : "http://") + endpoints_[at] + path;
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());  // curl copies it
  if (tls_) {
    // Verified (curl's defaults, set again so that no default can undo
    // them): the chain leads to the CA, the name or address is HOST's.
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!files_.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, files_.ca_file.c_str());
    if (!files_.cert_file.empty()) {
      curl_easy_setopt(easy, CURLOPT_SSLCERT, files_.cert_file.c_str());
      curl_easy_setopt(easy, CURLOPT_SSLKEY, files_.key_file.c_str());
    }
  }
  curl_easy_setopt(easy, CURLOPT_POST, 1L);
  curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  // A dead peer on a quiet watch is noticed by TCP keepalive.
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 5L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 2L);
  return easy;
}

Status EtcdHttp::PostTo(size_t at, const std::string& path, const std::string& body,
                        MonoDelta timeout, bool authorized, std::string* out, long* code) {
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (authorized) headers = WithToken(headers);
  out->clear();
  CURL* easy = static_cast<CURL*>(MakePost(at, path, body, headers));
  BoundedAnswer answer{out};
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, AppendToAnswer);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &answer);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.ToMilliseconds()));
  *code = 0;
  Status s = Perform(easy, code);
  curl_easy_cleanup(easy);
  curl_slist_free_all(headers);
  if (answer.too_long) {
    out->clear();
    return Status::Corruption("etcd at " + endpoints_[at] + " answered " + path +
                              " with more than " + std::to_string(kMaxEtcdAnswerBytes) +
                              " bytes (kMaxEtcdAnswerBytes); not read further");
  }
  if (s.IsNetworkError()) return s.CloneAndPrepend(endpoints_[at] + path);
  if (!s.ok() || *code == 200) return s;
  const std::string said =
      "etcd at " + endpoints_[at] + " answered " + std::to_string(*code) + " to " + path;
  // A password etcd refused, or a user without the right to the keys: the
  // same on every member, and the operator's to fix.
  if (*code == 403 || (*code == 400 && path == "/v3/auth/authenticate")) {
    return Status::NotAuthorized(said + " for user '" + credentials_.user +
                                 "': " + out->substr(0, 200));
  }
  return Status::RemoteError(said + ": " + out->substr(0, 200));
}

curl_slist* EtcdHttp::WithToken(curl_slist* headers) const {
  return curl_slist_append(headers, ("Authorization: " + token_).c_str());
}

Status EtcdHttp::Authenticate(size_t at, MonoDelta timeout) {
  std::string answer;
  long code = 0;
  OSPREY_RETURN_NOT_OK(
      PostTo(at, "/v3/auth/authenticate",
             json{{"name", credentials_.user}, {"password", credentials_.password}}.dump(), timeout,
             /*authorized=*/false, &answer, &code));
  return ParseEtcdToken(answer, &token_).CloneAndPrepend("etcd at " + endpoints_[at]);
}

Status EtcdHttp::Post(const std::string& path, const std::string& body, MonoDelta timeout,
                      std::string* out) {
  Status last;
  for (size_t tries = 0; tries < endpoints_.size(); ++tries) {
    const size_t at = current_.load() % endpoints_.size();
    // With a user: a token first, and a new one once if etcd no longer
    // knows it (401: it expired, or the member restarted).
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!credentials_.user.empty() && token_.empty()) {
        last = Authenticate(at, timeout);
        if (!last.ok()) break;
      }
      long code = 0;
      last = PostTo(at, path, body, timeout, !credentials_.user.empty(), out, &code);
      if (code != 401 || credentials_.user.empty()) break;
      token_.clear();
    }
    if (last.ok() || interrupted() || last.IsNotAuthorized()) break;
    current_.store(at + 1);  // the next member, this time and next
  }
  return last;
}

Status EtcdHttp::Stream(const std::string& path, const std::string& body, MonoDelta connect_timeout,
                        const EtcdWatchTimeouts& timeouts, const std::string& probe_body,
                        const std::function<bool(const char*, size_t)>& on_data) {
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  // etcd's require-leader (gRPC metadata "hasleader", which the gateway
  // takes from Grpc-Metadata- headers): without it a member cut off from
  // its cluster keeps the watch open, and its clients believe a registry
  // that can no longer tell them anything.
  headers = curl_slist_append(headers, "Grpc-Metadata-hasleader: true");
  const size_t at = current_.load() % endpoints_.size();
  if (!credentials_.user.empty()) {
    Status s = token_.empty() ? Authenticate(at, timeouts.first_answer) : Status::OK();
    if (!s.ok()) {
      curl_slist_free_all(headers);
      if (!s.IsNotAuthorized() && !interrupted()) current_.store(at + 1);
      return s;
    }
    headers = WithToken(headers);
  }
  CURL* easy = static_cast<CURL*>(MakePost(at, path, body, headers));
  EtcdWatchLiveness liveness(timeouts, MonoTime::Now());
  const std::function<bool(const char*, size_t)> noted = [&](const char* data, size_t n) {
    liveness.OnData(MonoTime::Now());
    return on_data(data, n);
  };
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, CallOnData);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &noted);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(connect_timeout.ToMilliseconds()));
  // The liveness probe (EtcdWatchLiveness): a linearizable range on the
  // same member, on the same multi handle, so that the stream goes on
  // meanwhile. One at a time.
  CURL* probe = nullptr;
  std::string probe_answer;
  BoundedAnswer probe_bounded{&probe_answer};
  const auto end_probe = [&] {
    curl_multi_remove_handle(static_cast<CURLM*>(multi_), probe);
    curl_easy_cleanup(probe);
    probe = nullptr;
  };
  const auto give_up = [&] {
    switch (liveness.Tick(MonoTime::Now())) {
      case EtcdWatchLiveness::Action::kWait:
        return false;
      case EtcdWatchLiveness::Action::kGiveUp:
        return true;
      case EtcdWatchLiveness::Action::kProbe:
        probe_answer.clear();
        probe = static_cast<CURL*>(MakePost(at, "/v3/kv/range", probe_body, headers));
        curl_easy_setopt(probe, CURLOPT_WRITEFUNCTION, AppendToAnswer);
        curl_easy_setopt(probe, CURLOPT_WRITEDATA, &probe_bounded);
        // Past the liveness's own timeout: it decides, curl only cleans up.
        curl_easy_setopt(probe, CURLOPT_TIMEOUT_MS,
                         static_cast<long>(timeouts.probe_timeout.ToMilliseconds() + 1000));
        curl_multi_add_handle(static_cast<CURLM*>(multi_), probe);
        return false;
    }
    return false;
  };
  const auto on_probe_done = [&](void* handle, int result) {
    if (handle != probe) return;
    long code = 0;
    curl_easy_getinfo(probe, CURLINFO_RESPONSE_CODE, &code);
    if (result == CURLE_OK && (code == 200 || code == 401)) {
      // 401: the member answered, but no longer knows the token (which
      // the watch, authorized when made, does not need): a new one for
      // the next request.
      if (code == 401) token_.clear();
      liveness.OnProbeAnswered(MonoTime::Now());
    } else {
      liveness.OnProbeFailed(result != CURLE_OK ? curl_easy_strerror(static_cast<CURLcode>(result))
                                                : "etcd answered " + std::to_string(code) + ": " +
                                                      probe_answer.substr(0, 200));
    }
    end_probe();
  };
  long code = 0;
  Status s = Perform(easy, &code, give_up, on_probe_done);
  if (probe != nullptr) end_probe();
  curl_easy_cleanup(easy);
  curl_slist_free_all(headers);
  if (s.IsTimedOut()) s = Status::TimedOut(liveness.why());
  if (s.ok() && code != 200) {
    s = Status::RemoteError("etcd at " + endpoints_[at] + " answered " + std::to_string(code) +
                            " to " + path);
  }
  if (!s.ok() && !interrupted()) {
    s = s.CloneAndPrepend(endpoints_[at] + path);
    current_.store(at + 1);
  }
  return s;
}

// --- EtcdRegistration ---

EtcdRegistration::EtcdRegistration(EtcdTarget target, std::vector<std::string> addresses,
                                   MonoDelta ttl)
    : target_(std::move(target)),
      addresses_(std::move(addresses)),
      // etcd's leases count whole seconds.
      ttl_seconds_(std::max<int64_t>(1, (ttl.ToMilliseconds() + 999) / 1000)),
      http_(target_) {}

EtcdRegistration::~EtcdRegistration() { Withdraw(); }

void EtcdRegistration::Start() {
  MutexLock l(mu_);
  if (started_ || stop_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

bool EtcdRegistration::WaitRegistered(MonoDelta timeout) {
  const MonoTime deadline = MonoTime::Now() + timeout;
  MutexLock l(mu_);
  while (!registered_ && !stop_ && MonoTime::Now() < deadline) cv_.WaitUntil(&mu_, deadline);
  return registered_;
}

int64_t EtcdRegistration::lease() const {
  MutexLock l(mu_);
  return lease_;
}

Status EtcdRegistration::Step(int64_t* lease, bool* put_done, int64_t* granted_ttl) {
  const MonoDelta timeout = MonoDelta::FromSeconds(1);
  std::string answer;
  if (*lease == 0) {
    OSPREY_RETURN_NOT_OK(
        http_.Post("/v3/lease/grant", json{{"TTL", ttl_seconds_}}.dump(), timeout, &answer));
    EtcdLease granted;
    OSPREY_RETURN_NOT_OK(ParseEtcdLease(answer, &granted));
    *lease = granted.id;
    *granted_ttl = granted.ttl_seconds;
    if (*lease == 0) return Status::RemoteError("etcd granted no lease: " + answer);
    *put_done = false;
  }
  if (!*put_done) {
    for (const std::string& a : addresses_) {
      json value{{"address", a}, {"pid", static_cast<int64_t>(getpid())}};
      json put{{"key", Base64Encode(target_.KeyOf(a))},
               {"value", Base64Encode(value.dump())},
               {"lease", std::to_string(*lease)}};
      OSPREY_RETURN_NOT_OK(http_.Post("/v3/kv/put", put.dump(), timeout, &answer));
    }
    *put_done = true;
    return Status::OK();
  }
  OSPREY_RETURN_NOT_OK(http_.Post("/v3/lease/keepalive",
                                  json{{"ID", std::to_string(*lease)}}.dump(), timeout, &answer));
  EtcdLease kept;
  OSPREY_RETURN_NOT_OK(ParseEtcdLease(answer, &kept));
  if (kept.ttl_seconds <= 0) {
    // etcd no longer has it (it expired while we could not reach etcd):
    // our keys went with it, so register again at once.
    LOG(WARNING) << "etcd lease " << *lease << " of " << target_.ToString()
                 << " expired; registering again";
    *lease = 0;
    *put_done = false;
    return Status::OK();
  }
  *granted_ttl = kept.ttl_seconds;
  return Status::OK();
}

void EtcdRegistration::Run() {
  SetCurrentThreadName("osp-etcd-reg");
  int64_t lease = 0, granted_ttl = ttl_seconds_;
  bool put_done = false;
  bool failing = false;
  MonoDelta backoff;  // the last wait after a failure; zero after a success
  while (true) {
    {
      MutexLock l(mu_);
      if (stop_) return;
    }
    Status s = Step(&lease, &put_done, &granted_ttl);
    MonoDelta wait;
    {
      MutexLock l(mu_);
      lease_ = lease;
      if (s.ok() && put_done) {
        if (!registered_) {
          LOG(INFO) << "registered " << addresses_.front() << " in " << target_.ToString()
                    << " (lease " << lease << ", TTL " << granted_ttl << " s)";
        }
        registered_ = true;
        cv_.Broadcast();
      }
    }
    if (s.ok()) {
      if (failing) LOG(INFO) << "etcd " << target_.ToString() << " reachable again";
      failing = false;
      backoff = MonoDelta();
      // Keep-alives every third of the TTL: two may be lost before it runs
      // out. Right away while a step remains (the puts after a grant).
      // The TTL is etcd's word: never past the one asked for (a TTL near
      // INT64_MAX, in ms, would overflow to keep-alives without pause).
      const int64_t ttl = std::clamp<int64_t>(granted_ttl, 1, ttl_seconds_);
      wait = put_done ? MonoDelta::FromMilliseconds(ttl * 1000 / 3) : MonoDelta();
    } else {
      if (!failing && !http_.interrupted()) {
        LOG(WARNING) << "cannot keep " << addresses_.front() << " registered in "
                     << target_.ToString() << ": " << s.ToString() << "; trying again";
      }
      failing = true;
      backoff = NextEtcdBackoff(backoff, s);
      wait = backoff;
    }
    MutexLock l(mu_);
    const MonoTime until = MonoTime::Now() + wait;
    while (!stop_ && MonoTime::Now() < until) cv_.WaitUntil(&mu_, until);
  }
}

void EtcdRegistration::Withdraw() {
  int64_t lease;
  {
    MutexLock l(mu_);
    if (withdrawn_) return;
    withdrawn_ = true;
    stop_ = true;
    cv_.Broadcast();
  }
  http_.Interrupt();
  if (thread_.joinable()) thread_.join();
  {
    MutexLock l(mu_);
    lease = lease_;
    registered_ = false;
  }
  if (lease == 0) return;
  // Revoking deletes the keys now, rather than when the TTL runs out: the
  // clients stop sending here within a watch event.
  EtcdHttp http(target_);
  std::string answer;
  Status s = http.Post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump(),
                       MonoDelta::FromSeconds(1), &answer);
  if (s.ok()) {
    LOG(INFO) << "withdrew " << addresses_.front() << " from " << target_.ToString();
  } else {
    LOG(WARNING) << "could not revoke etcd lease " << lease << " (" << s.ToString()
                 << "); its keys go when its TTL runs out";
  }
}

// --- EtcdWatcher ---

EtcdWatcher::EtcdWatcher(EtcdTarget target, OnChange on_change, EtcdWatchTimeouts timeouts)
    : target_(std::move(target)),
      on_change_(std::move(on_change)),
      timeouts_(timeouts),
      http_(target_),
      table_(target_.prefix) {}

EtcdWatcher::~EtcdWatcher() { Stop(); }

Status EtcdWatcher::last_error() const {
  MutexLock l(mu_);
  return last_error_;
}

int64_t EtcdWatcher::revision() const {
  MutexLock l(mu_);
  return table_.revision();
}

void EtcdWatcher::Publish() {
  std::vector<std::string> addresses;
  {
    MutexLock l(mu_);
    addresses = table_.Addresses();
  }
  on_change_(addresses);
}

void EtcdWatcher::LogRefusedServers() {
  std::string unused;
  if (table_.refused() == refused_logged_ || !refused_log_.Allow(MonoTime::Now(), &unused)) return;
  LOG(WARNING) << "etcd " << target_.ToString() << " lists more than " << kMaxEtcdServers
               << " servers (kMaxEtcdServers): " << table_.refused() - refused_logged_
               << " more not kept";
  refused_logged_ = table_.refused();
}

Status EtcdWatcher::Load(MonoDelta timeout) {
  const std::string from = target_.prefix + "/";
  json range{{"key", Base64Encode(from)}, {"range_end", Base64Encode(PrefixEnd(from))}};
  std::string answer;
  Status s = http_.Post("/v3/kv/range", range.dump(), timeout, &answer);
  {
    MutexLock l(mu_);
    if (s.ok()) s = table_.LoadRange(answer);
    last_error_ = s;
    if (!s.ok()) return s;
    need_load_ = false;
    LogRefusedServers();
  }
  Publish();
  return Status::OK();
}

void EtcdWatcher::Start() {
  MutexLock l(mu_);
  if (stop_ || thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void EtcdWatcher::Stop() {
  {
    MutexLock l(mu_);
    stop_ = true;
    cv_.Broadcast();
  }
  http_.Interrupt();
  if (thread_.joinable()) thread_.join();
}

bool EtcdWatcher::OnWatchMessage(std::string_view message) {
  EtcdWatchStep step;
  {
    MutexLock l(mu_);
    step = table_.ApplyWatchMessage(message);
    LogRefusedServers();
    if (step.next == EtcdWatchStep::Next::kReadAgain) need_load_ = true;
    if (step.unauthenticated) http_.ForgetToken();  // this thread's, as the stream is
    if (step.created) last_error_ = Status::OK();
    if (step.created && !connected_.exchange(true)) {
      LOG(INFO) << "watching " << target_.ToString() << " from revision " << table_.revision() + 1
                << " (" << table_.size() << " servers)";
    }
  }
  if (step.next != EtcdWatchStep::Next::kContinue) {
    LOG(WARNING) << "etcd watch of " << target_.ToString() << " ended: " << step.why
                 << (step.next == EtcdWatchStep::Next::kReadAgain ? "; reading it all again" : "");
    return false;
  }
  if (step.changed) Publish();
  return true;
}

Status EtcdWatcher::Watch() {
  const std::string from = target_.prefix + "/";
  int64_t start;
  {
    MutexLock l(mu_);
    start = table_.revision() + 1;  // at most INT64_MAX (EtcdServerTable)
  }
  json create{{"create_request",
               {{"key", Base64Encode(from)},
                {"range_end", Base64Encode(PrefixEnd(from))},
                {"start_revision", std::to_string(start)}}}};
  // The gateway writes one JSON object per line.
  EtcdLineSplitter lines;
  bool too_long = false, ended = false;
  // The liveness probe reads one key, "PREFIX/" (no server's, but inside
  // the prefix, which is all an etcd user of this prefix may read), so its
  // answer is a header: linearizable, it needs the member and its leader.
  const json probe{{"key", Base64Encode(from)}, {"keys_only", true}};
  Status s =
      http_.Stream("/v3/watch", create.dump(), MonoDelta::FromSeconds(1), timeouts_, probe.dump(),
                   [&](const char* data, size_t n) {
                     auto r = lines.Feed(std::string_view(data, n),
                                         [this](std::string_view m) { return OnWatchMessage(m); });
                     if (r == EtcdLineSplitter::Result::kMore) return true;
                     (r == EtcdLineSplitter::Result::kTooLong ? too_long : ended) = true;
                     return false;
                   });
  if (s.ok() && !too_long) {
    // Ended cleanly by etcd: what is left is its last message, which etcd
    // writes without a newline ("no leader" among them). Whatever ended
    // it, the next watch goes to the next member (a failed stream moved
    // there already).
    const std::string last = lines.TakeRest();
    if (!ended && !last.empty()) OnWatchMessage(last);
    http_.NextEndpoint();
    return Status::OK();
  }
  if (ended) return Status::OK();  // a message ended it, and said why (OnWatchMessage)
  if (!too_long) return s;
  // Its events are lost with it.
  MutexLock l(mu_);
  need_load_ = true;
  return Status::Corruption("a message of the watch ran past " +
                            std::to_string(kMaxEtcdAnswerBytes) +
                            " bytes (kMaxEtcdAnswerBytes); not read further, reading it all again");
}

void EtcdWatcher::Run() {
  SetCurrentThreadName("osp-etcd-watch");
  std::mt19937_64 rng(std::random_device{}());
  MonoDelta backoff;  // the last wait; zero: none since a watch that worked
  bool logged = false;
  while (true) {
    bool load;
    {
      MutexLock l(mu_);
      if (stop_) return;
      load = need_load_;
    }
    Status s = load ? Load(MonoDelta::FromSeconds(1)) : Status::OK();
    if (s.ok()) {
      const MonoTime watch_start = MonoTime::Now();
      s = Watch();
      // A watch that lasted is a connection that worked: the next break
      // starts the backoff anew.
      if (MonoTime::Now() - watch_start > MonoDelta::FromSeconds(2)) backoff = MonoDelta();
    }
    if (http_.interrupted()) return;
    // Logged once per outage: when a working watch broke, or when the
    // first try failed.
    const bool was_connected = connected_.exchange(false);
    {
      MutexLock l(mu_);
      if (was_connected || !logged) {
        LOG(WARNING) << "etcd " << target_.ToString()
                     << (s.ok() ? std::string(": the watch ended")
                                : " unreachable (" + s.ToString() + ")")
                     << "; keeping the last " << table_.size()
                     << " servers and watching again from revision " << table_.revision() + 1;
        logged = true;
      }
      if (was_connected) reconnects_.fetch_add(1, std::memory_order_relaxed);
      if (!s.ok()) last_error_ = s;
      backoff = NextEtcdBackoff(backoff, s);
      // Jitter: clients that lost etcd together do not come back together.
      const double jitter = 1.0 + std::uniform_real_distribution<double>(0, 0.5)(rng);
      const MonoTime until =
          MonoTime::Now() + MonoDelta::FromNanoseconds(static_cast<int64_t>(
                                static_cast<double>(backoff.ToNanoseconds()) * jitter));
      while (!stop_ && MonoTime::Now() < until) cv_.WaitUntil(&mu_, until);
    }
  }
}

}  // namespace osprey
