#include "osprey/rpc/request_tracker.h"

#include <cstdio>
#include <random>

namespace osprey {

namespace {
// 128 random bits as 32 hex digits, like Kudu's client ids (a UUID without
// dashes): unique among the clients a server remembers.
std::string RandomClientId() {
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(rd()));
    id += buf;
  }
  return id;
}
}  // namespace

RequestTracker::RequestTracker() : client_id_(RandomClientId()) {}

int64_t RequestTracker::Begin() {
  MutexLock l(mu_);
  int64_t seq = next_++;
  in_flight_.insert(seq);
  return seq;
}

int64_t RequestTracker::FirstIncomplete() const {
  MutexLock l(mu_);
  return in_flight_.empty() ? next_ : *in_flight_.begin();
}

void RequestTracker::End(int64_t seq) {
  MutexLock l(mu_);
  in_flight_.erase(seq);
}

}  // namespace osprey
