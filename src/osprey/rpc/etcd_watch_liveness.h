// Whether an etcd watch stream still has a live member behind it: a pure
// state machine over the times things happened, with no socket (EtcdHttp's
// Stream drives it; etcd_watch_liveness-test.cc tests it cell by cell).
//
// Why: a member can stop answering while its TCP connection stays up (a
// hung or stopped process: the kernel still ACKs). A watch on it is silent,
// which is also what a healthy watch of a prefix that does not change looks
// like. So silence alone proves nothing: after `probe_after` of it, the
// stream asks the same member for a linearizable read (which needs the
// member's process and its leader). An answer is a sign of life; no answer
// within `probe_timeout`, or a failed one, gives the watch up, and the
// watcher goes to the next member. Before the stream's first byte the
// member has `first_answer` to say anything (one that accepts connections
// and answers nothing).
#pragma once

#include <string>

#include "osprey/base/monotime.h"

namespace osprey {

struct EtcdWatchTimeouts {
  MonoDelta first_answer = MonoDelta::FromSeconds(3);
  // Silence after which the member is asked whether it is alive; zero: never
  // (a hung member is then noticed only when its connection breaks).
  MonoDelta probe_after = MonoDelta::FromSeconds(5);
  MonoDelta probe_timeout = MonoDelta::FromSeconds(2);
};

// One stream's liveness. A value, touched by the thread that runs the
// stream only.
class EtcdWatchLiveness {
 public:
  enum class Action {
    kWait,    // nothing to do now
    kProbe,   // send a probe now (the caller does; it is counted as sent)
    kGiveUp,  // the member is taken for dead: end the stream (why())
  };

  EtcdWatchLiveness(EtcdWatchTimeouts timeouts, MonoTime started);

  // Bytes of the stream arrived.
  void OnData(MonoTime now);
  // The probe sent by the last kProbe was answered (a sign of life, like
  // data), or failed (`why`: the next Tick gives up).
  void OnProbeAnswered(MonoTime now);
  void OnProbeFailed(const std::string& why);
  // What to do at `now`; called at least twice a second.
  Action Tick(MonoTime now);
  bool probe_in_flight() const { return probe_sent_ != MonoTime(); }
  int probes_sent() const { return probes_sent_; }
  // Why the last kGiveUp.
  const std::string& why() const { return why_; }

 private:
  const EtcdWatchTimeouts timeouts_;
  const MonoTime started_;
  bool answered_ = false;
  MonoTime last_sign_;   // the last data or probe answer
  MonoTime probe_sent_;  // MonoTime(): none in flight
  int probes_sent_ = 0;
  std::string probe_failed_;  // non-empty: the probe in flight failed
  std::string why_;
};

}  // namespace osprey
