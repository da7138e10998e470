#include "refusal.h"

#include <sstream>
#include <string_view>

#include "osprey/wire/rpc_header.pb.h"

namespace osprey::bench {

namespace {

// The JSON key (the server's metric label), the text label and the advice
// that fits the reason.
struct RefusalText {
  const char* key;
  const char* label;
  const char* advice;
};

// The advice says what would have let the call run: only a full queue is
// helped by a longer one; the other reasons are the server's capacity
// against the calls' timeouts, whatever the queue's length.
constexpr RefusalText kTexts[kNumRefusals] = {
    {"queue_full", "queue full",
     "the server's service queue was full: raise its --rpc_service_queue_length, or offer fewer "
     "calls at once"},
    {"evicted", "evicted",
     "pushed out of the server's full service queue for calls with earlier deadlines: raise its "
     "--rpc_service_queue_length, or offer fewer calls at once"},
    {"overloaded", "overloaded",
     "the server is at capacity: the work queued ahead exceeded the call's patience (1/8 of its "
     "timeout, at least the queue delay target); raising --rpc_service_queue_length changes "
     "nothing: offer fewer calls at once, or add workers or servers"},
    {"would_miss_deadline", "would miss its deadline",
     "the calls queued ahead would have kept it past its deadline: give calls longer timeouts "
     "(-call_timeout_ms), add workers or servers, or offer fewer calls at once; raising "
     "--rpc_service_queue_length changes nothing"},
    {"waited_too_long", "waited too long",
     "the server is at capacity: overloaded, it served newer calls first and shed this one once "
     "it had waited past its patience (1/8 of its timeout, at least the queue delay target); "
     "raising --rpc_service_queue_length changes nothing: offer fewer calls at once, or add "
     "workers or servers"},
    {"expired_in_queue", "expired in the queue",
     "its deadline passed while it waited in the server's queue: give calls longer timeouts "
     "(-call_timeout_ms), or add workers or servers"},
    {"throttled", "throttled by the client",
     "refused by this client's adaptive throttling (-client_throttling), never sent, as the "
     "server had refused many of its calls"},
    {"other", "other",
     "refused (ERROR_SERVER_TOO_BUSY or ERROR_UNAVAILABLE) for a reason rpc-bench does not "
     "recognize; see the message"},
};

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

Refusal ClassifyRefusalMessage(std::string_view message) {
  // Osprey's service pool (service_pool.cc, BuildRefusals) ends each
  // refusal with "[reason=<key>]": its prose may change, the tag does not.
  constexpr std::string_view kTag = "[reason=";
  if (size_t at = message.rfind(kTag); at != std::string_view::npos) {
    std::string_view rest = message.substr(at + kTag.size());
    std::string_view key = rest.substr(0, rest.find(']'));
    for (size_t i = 0; i <= static_cast<size_t>(Refusal::kExpiredInQueue); ++i) {
      if (key == kTexts[i].key) return static_cast<Refusal>(i);
    }
    return Refusal::kOther;
  }
  // Kudu's server (service_pool.cc): "... dropped due to backpressure. The
  // service queue is full; it has N items." for a full queue and for a call
  // its LIFO queue pushed out alike, and "Call waited in the queue past
  // client deadline".
  if (Contains(message, "service queue is full")) return Refusal::kQueueFull;
  if (Contains(message, "waited in the queue past")) return Refusal::kExpiredInQueue;
  return Refusal::kOther;
}

}  // namespace

Refusal ClassifyRefusal(const RpcController& ctl) {
  const wire::ErrorStatusPB* err = ctl.error_response();
  if (err == nullptr) {
    // Refused with no answer from the server: the client's throttling.
    return ctl.attempts_sent() == 0 ? Refusal::kThrottled : Refusal::kOther;
  }
  return ClassifyRefusalMessage(err->message());
}

std::string FailureCause(const RpcController& ctl) {
  const wire::ErrorStatusPB* err = ctl.error_response();
  if (err != nullptr) return wire::ErrorStatusPB::RpcErrorCodePB_Name(err->code());
  return Status::CodeName(ctl.status().code());
}

void RefusalCounts::Add(Refusal r, const RpcController& ctl) {
  counts_[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  if (r != Refusal::kOther) return;
  std::lock_guard<std::mutex> l(mu_);
  if (first_other_.empty()) first_other_ = ctl.status().ToString();
}

std::string RefusalCounts::first_other() const {
  std::lock_guard<std::mutex> l(mu_);
  return first_other_;
}

uint64_t RefusalTotals::total() const {
  uint64_t n = 0;
  for (uint64_t c : by) n += c;
  return n;
}

void RefusalTotals::Merge(const RefusalCounts& c) {
  for (size_t i = 0; i < kNumRefusals; ++i) by[i] += c.Get(static_cast<Refusal>(i));
  if (first_other.empty()) first_other = c.first_other();
}

void RefusalTotals::Merge(const RefusalTotals& t) {
  for (size_t i = 0; i < kNumRefusals; ++i) by[i] += t.by[i];
  if (first_other.empty()) first_other = t.first_other;
}

std::string RefusalTotals::Json() const {
  std::ostringstream o;
  o << "{";
  for (size_t i = 0; i < kNumRefusals; ++i) {
    o << (i ? "," : "") << "\"" << kTexts[i].key << "\":" << by[i];
  }
  o << "}";
  return o.str();
}

std::string RefusalTotals::TextLines(const std::string& indent) const {
  std::ostringstream o;
  for (size_t i = 0; i < kNumRefusals; ++i) {
    if (by[i] == 0) continue;
    o << indent << kTexts[i].label << ": " << by[i] << " (" << kTexts[i].advice << ")\n";
    if (static_cast<Refusal>(i) == Refusal::kOther && !first_other.empty()) {
      o << indent << "  first: " << first_other << "\n";
    }
  }
  return o.str();
}

std::string RefusalTotals::Summary() const {
  std::string s;
  for (size_t i = 0; i < kNumRefusals; ++i) {
    if (by[i] == 0) continue;
    s += (s.empty() ? "" : "; ") + std::to_string(by[i]) + " " + kTexts[i].label + " (" +
         kTexts[i].advice + ")";
  }
  return s;
}

}  // namespace osprey::bench
