// LogRateLimiter: at most `per_interval` messages of a kind logged in each
// interval; the rest are counted, and the next one logged says how many
// were not. For what a peer can cause at will (a bad connection header, a
// refused negotiation, a frame that does not parse): without it, any
// client could fill the server's disk with WARNING lines, one per
// connection. Thread-safe; time comes from the caller, so tests move it.
#pragma once

#include <cstdint>
#include <string>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"

namespace osprey {

class LogRateLimiter {
 public:
  LogRateLimiter(int64_t per_interval, MonoDelta interval)
      : per_interval_(per_interval), interval_(interval) {}

  // True: log this message, followed by *suffix (empty, or how many were
  // held back since the last one logged). False: counted, not logged.
  bool Allow(MonoTime now, std::string* suffix) OSPREY_EXCLUDES(mu_);

  // The one for bad peers, shared by every messenger of the process: 20
  // lines in each 10 s.
  static LogRateLimiter* BadPeers();

 private:
  const int64_t per_interval_;
  const MonoDelta interval_;
  Mutex mu_;
  MonoTime interval_start_ OSPREY_GUARDED_BY(mu_) = MonoTime::Min();
  int64_t logged_ OSPREY_GUARDED_BY(mu_) = 0;
  int64_t held_back_ OSPREY_GUARDED_BY(mu_) = 0;
};

}  // namespace osprey
