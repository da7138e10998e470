// RequestTracker: a client messenger's request ids for the methods that
// track results (Kudu's track_rpc_result and its RequestTracker): one
// random client id for the messenger, a sequence number per call (kept
// across the call's retries), and the lowest number still in flight, which
// tells servers which remembered answers the client no longer needs.
// Thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "osprey/base/mutex.h"

namespace osprey {

class RequestTracker {
 public:
  RequestTracker();  // a new random client id

  const std::string& client_id() const { return client_id_; }
  // A new sequence number, in flight until End.
  int64_t Begin() OSPREY_EXCLUDES(mu_);
  // The lowest sequence number in flight; with none, the next one.
  int64_t FirstIncomplete() const OSPREY_EXCLUDES(mu_);
  // The call with `seq` is over, whatever its outcome: no retry of it follows.
  void End(int64_t seq) OSPREY_EXCLUDES(mu_);

 private:
  const std::string client_id_;
  mutable Mutex mu_;
  int64_t next_ OSPREY_GUARDED_BY(mu_) = 1;
  std::set<int64_t> in_flight_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
