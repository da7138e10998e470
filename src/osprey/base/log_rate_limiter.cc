#include "osprey/base/log_rate_limiter.h"

namespace osprey {

bool LogRateLimiter::Allow(MonoTime now, std::string* suffix) {
  suffix->clear();
  MutexLock l(mu_);
  if (interval_start_ == MonoTime::Min() || now - interval_start_ >= interval_) {
    interval_start_ = now;
    logged_ = 0;
  }
  if (logged_ >= per_interval_) {
    ++held_back_;
    return false;
  }
  ++logged_;
  if (held_back_ > 0) {
    *suffix = " (" + std::to_string(held_back_) + " more like it were not logged: at most " +
              std::to_string(per_interval_) + " every " + interval_.ToString() + ")";
    held_back_ = 0;
  }
  return true;
}

LogRateLimiter* LogRateLimiter::BadPeers() {
  static LogRateLimiter* limiter = new LogRateLimiter(20, MonoDelta::FromSeconds(10));
  return limiter;
}

}  // namespace osprey
