#include "osprey/rpc/etcd_answers.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "osprey/base/base64.h"

namespace osprey {
namespace {

using nlohmann::json;

json Parse(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// An int64 field etcd wrote (a revision, a lease's ID or TTL; the gateway
// writes them as JSON strings), or 0 if it is missing, not a number, or out
// of 0 .. max. Revisions stop at INT64_MAX - 1, so that the next is one too.
int64_t Int64Of(const json& j, const char* field, int64_t max = INT64_MAX - 1) {
  if (!j.is_object()) return 0;
  auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    return v <= static_cast<uint64_t>(max) ? static_cast<int64_t>(v) : 0;
  }
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    return v >= 0 && v <= max ? v : 0;
  }
  if (!it->is_string()) return 0;
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty() || s.size() > 19) return 0;
  for (char c : s) {
    if (c < '0' || c > '9') return 0;  // strtoll would also take blanks and signs
  }
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  return errno == 0 && v <= max ? v : 0;
}

// A boolean field of an object, false if it is missing or not a boolean
// (json::value would throw, on the watcher's thread).
bool BoolOf(const json& j, const char* field) {
  if (!j.is_object()) return false;
  auto it = j.find(field);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

// A string field of an object, or "" if it is missing or not a string.
std::string StringOf(const json& j, const char* field) {
  if (!j.is_object()) return "";
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

EtcdLineSplitter::Result EtcdLineSplitter::Feed(
    std::string_view data, const std::function<bool(std::string_view)>& on_line) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const std::string_view piece = data.substr(0, nl);  // all of it when there is no '\n'
    if (pending_.size() + piece.size() > max_line_bytes_) {
      pending_.clear();
      return Result::kTooLong;
    }
    if (nl == std::string_view::npos) {
      pending_.append(piece);
      return Result::kMore;
    }
    data.remove_prefix(nl + 1);
    bool go_on = true;
    if (pending_.empty()) {
      if (!piece.empty()) go_on = on_line(piece);  // whole in this read: not copied
    } else {
      pending_.append(piece);
      go_on = on_line(pending_);
      pending_.clear();
    }
    if (!go_on) return Result::kStopped;
  }
  return Result::kMore;
}

bool EtcdServerTable::Put(const std::string& key, const std::string& value) {
  std::string address;
  const json v = Parse(value);
  address = StringOf(v, "address");
  if (address.empty() && key.size() > prefix_.size() + 1) address = key.substr(prefix_.size() + 1);
  if (address.empty()) return false;  // nothing to call
  auto it = servers_.find(key);
  if (it == servers_.end()) {
    if (servers_.size() >= max_servers_) {
      refused_++;
      return false;
    }
    servers_.emplace(key, std::move(address));
    return true;
  }
  if (it->second == address) return false;
  it->second = std::move(address);
  return true;
}

Status EtcdServerTable::LoadRange(std::string_view answer) {
  const json j = Parse(answer);
  if (!j.is_object()) {
    return Status::Corruption("etcd answered a range with something other than a JSON object: " +
                              std::string(answer.substr(0, 200)));
  }
  servers_.clear();
  auto kvs = j.find("kvs");
  if (kvs != j.end() && kvs->is_array()) {
    for (const json& kv : *kvs) {
      std::string key, value;
      if (Base64Decode(StringOf(kv, "key"), &key) && Base64Decode(StringOf(kv, "value"), &value)) {
        Put(key, value);
      }
    }
  }
  auto header = j.find("header");
  revision_ = header != j.end() ? Int64Of(*header, "revision") : 0;
  return Status::OK();
}

EtcdWatchStep EtcdServerTable::ApplyWatchMessage(std::string_view message) {
  EtcdWatchStep step;
  const json j = Parse(message);
  if (!j.is_object()) {
    // A message lost: the events in it are not known.
    step.next = EtcdWatchStep::Next::kReadAgain;
    step.why = "not JSON: " + std::string(message.substr(0, 200));
    return step;
  }
  if (j.contains("error")) {
    step.next = EtcdWatchStep::Next::kWatchAgain;
    step.why = "etcd said: " + std::string(message.substr(0, 200));
    return step;
  }
  auto result = j.find("result");
  const json& r = result != j.end() ? *result : j;
  if (Int64Of(r, "compact_revision") > 0) {
    // The revision it would resume from is compacted away.
    step.next = EtcdWatchStep::Next::kReadAgain;
    step.why = "the revision to watch from is compacted";
    return step;
  }
  if (!r.is_object()) return step;
  if (auto header = r.find("header"); header != r.end()) {
    // Within one etcd the revision never goes back: a watch's header is at
    // least every revision this table saw from that etcd.
    const int64_t now = Int64Of(*header, "revision");
    if (now > 0 && now < revision_) {
      step.next = EtcdWatchStep::Next::kReadAgain;
      step.why = "etcd is at revision " + std::to_string(now) + ", before the " +
                 std::to_string(revision_) +
                 " this client saw: another etcd (its data lost, or restored from an older "
                 "snapshot)";
      return step;
    }
  }
  if (BoolOf(r, "canceled")) {
    step.next = EtcdWatchStep::Next::kWatchAgain;
    step.why = "etcd canceled the watch: " + StringOf(r, "cancel_reason");
    // gRPC's code, as etcd words the reason ("rpc error: code =
    // Unauthenticated desc = etcdserver: invalid auth token").
    step.unauthenticated = step.why.find("code = Unauthenticated") != std::string::npos;
    return step;
  }
  step.created = BoolOf(r, "created");
  auto events = r.find("events");
  if (events == r.end() || !events->is_array()) return step;
  for (const json& ev : *events) {
    if (!ev.is_object()) continue;
    auto kv = ev.find("kv");
    if (kv == ev.end() || !kv->is_object()) continue;
    std::string key, value;
    if (!Base64Decode(StringOf(*kv, "key"), &key)) continue;
    if (StringOf(ev, "type") == "DELETE") {
      step.changed |= servers_.erase(key) > 0;
    } else if (Base64Decode(StringOf(*kv, "value"), &value)) {
      step.changed |= Put(key, value);
    }
    revision_ = std::max(revision_, Int64Of(*kv, "mod_revision"));
  }
  return step;
}

Status ParseEtcdLease(std::string_view answer, EtcdLease* out) {
  const json j = Parse(answer);
  if (!j.is_object()) {
    return Status::Corruption(
        "etcd answered a lease request with something other than a JSON "
        "object: " +
        std::string(answer.substr(0, 200)));
  }
  auto result = j.find("result");
  const json& r = result != j.end() ? *result : j;
  out->id = Int64Of(r, "ID", INT64_MAX);
  out->ttl_seconds = Int64Of(r, "TTL", INT64_MAX);
  return Status::OK();
}

Status ParseEtcdToken(std::string_view answer, std::string* token) {
  const json j = Parse(answer);
  if (!j.is_object()) {
    return Status::Corruption(
        "etcd answered /v3/auth/authenticate with something other than a JSON object");
  }
  const std::string t = StringOf(j, "token");
  if (t.empty()) return Status::Corruption("etcd answered /v3/auth/authenticate with no token");
  if (t.size() > kMaxEtcdTokenBytes) {
    return Status::Corruption("etcd's token has " + std::to_string(t.size()) +
                              " bytes, more than " + std::to_string(kMaxEtcdTokenBytes) +
                              " (kMaxEtcdTokenBytes)");
  }
  for (char c : t) {
    if (c < 0x21 || c > 0x7e) {
      return Status::Corruption(
          "etcd's token holds a byte that is not visible ASCII; it would not be sent as a header");
    }
  }
  *token = t;
  return Status::OK();
}

std::vector<std::string> EtcdServerTable::Addresses() const {
  std::vector<std::string> out;
  out.reserve(servers_.size());
  for (const auto& [key, address] : servers_) out.push_back(address);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace osprey
