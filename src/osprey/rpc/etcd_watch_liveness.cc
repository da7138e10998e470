#include "osprey/rpc/etcd_watch_liveness.h"

#include <glog/logging.h>

#include <algorithm>

namespace osprey {

EtcdWatchLiveness::EtcdWatchLiveness(EtcdWatchTimeouts timeouts, MonoTime started)
    : timeouts_(timeouts), started_(started), last_sign_(started) {
  CHECK(started != MonoTime()) << "the epoch stands for 'no probe in flight'";
}

void EtcdWatchLiveness::OnData(MonoTime now) {
  answered_ = true;
  last_sign_ = std::max(last_sign_, now);
}

void EtcdWatchLiveness::OnProbeAnswered(MonoTime now) {
  DCHECK(probe_in_flight());
  probe_sent_ = MonoTime();
  last_sign_ = std::max(last_sign_, now);
}

void EtcdWatchLiveness::OnProbeFailed(const std::string& why) {
  DCHECK(probe_in_flight());
  probe_failed_ = why.empty() ? "it failed" : why;
}

EtcdWatchLiveness::Action EtcdWatchLiveness::Tick(MonoTime now) {
  if (!answered_) {
    // A probe proves nothing here: the stream itself has not started.
    if (now - started_ < timeouts_.first_answer) return Action::kWait;
    why_ = "answered nothing within " + timeouts_.first_answer.ToString();
    return Action::kGiveUp;
  }
  if (!probe_failed_.empty()) {
    why_ = "the watch was silent for " + timeouts_.probe_after.ToString() +
           " and the member's probe failed: " + probe_failed_;
    return Action::kGiveUp;
  }
  if (probe_in_flight()) {
    if (now - probe_sent_ < timeouts_.probe_timeout) return Action::kWait;
    why_ = "the watch was silent for " + timeouts_.probe_after.ToString() +
           " and the member answered no probe within " + timeouts_.probe_timeout.ToString();
    return Action::kGiveUp;
  }
  if (timeouts_.probe_after == MonoDelta() || now - last_sign_ < timeouts_.probe_after) {
    return Action::kWait;
  }
  probe_sent_ = now;
  ++probes_sent_;
  return Action::kProbe;
}

}  // namespace osprey
