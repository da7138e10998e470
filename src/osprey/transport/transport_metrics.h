// TransportMetrics: what the reactors and connections of one messenger
// count, registered in its MetricRegistry: bytes sent and received,
// connections accepted and open (each direction), negotiations that ended
// by what they agreed (clear, TLS for authentication only, TLS encrypted)
// and that failed by reason, bytes queued for peers, and per reactor its busy time and the
// length of its loop iterations (how long an event can wait behind the
// others: the loop's lag).
//
// Updated from reactor threads (each its own shard, no lock); read by
// whoever reads the registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "osprey/base/connection_types.h"
#include "osprey/base/metrics.h"
#include "osprey/base/status.h"

namespace osprey::transport {

class TransportMetrics {
 public:
  enum class NegotiationFailure {
    kTimeout,
    kRefused,
    kTls,
    kProtocol,
    kNetwork,
    kKerberos,
    kCount
  };

  // `open_inbound`: the messenger's count of open server connections.
  TransportMetrics(MetricRegistry* registry, int num_reactors,
                   std::shared_ptr<std::atomic<int64_t>> open_inbound);

  void CountNegotiationFailure(NegotiationFailure why);
  // A negotiation finished; `security` is what it agreed.
  void CountNegotiated(bool inbound, ConnectionSecurity security);
  // ... and how the client authenticated.
  void CountAuthenticated(bool inbound, AuthenticationMethod method);
  // Classifies the status a negotiation ended with.
  static NegotiationFailure Classify(const Status& why);
  void RecordReactorIteration(int reactor, MonoDelta busy);

  Counter* bytes_sent;
  Counter* bytes_received;
  Counter* connections_accepted;
  // Accepted and closed at once: the limit of connections not yet
  // negotiated, in all or from the peer's address (PreAuthLimits).
  Counter* connections_refused_unauthenticated;
  // Work another thread did in a sleeping reactor's place
  // (Reactor::TryRunHere): a sync call sent, an answer written, without
  // waking the reactor.
  Counter* reactor_borrows;
  // Sync calls whose caller waited for the answer on the socket itself
  // (Reactor::ParkForCaller), so that no reactor woke for it.
  Counter* caller_reads;
  // Times a service worker waited for a connection's next request on the
  // socket itself (Reactor::ParkForWorker) instead of in its queue.
  Counter* worker_reads;
  // Requests such a worker read from the socket itself; a wait ends
  // without one when its queue's eventfd woke it, or when the reactor read
  // first (a request that came before the worker slept).
  Counter* worker_read_requests;
  // Times such a thread's poll ended on its eventfd rather than its socket
  // (Reactor::PollParked).
  Counter* parked_wakeups;
  // Changes to what a reactor's epoll set watches for a registered socket
  // (Reactor::ModifyFd, ReplaceFd): a system call each.
  Counter* epoll_changes;
  // Waits that polled before sleeping (ConnectionOptions::spin_before_sleep),
  // by whether the event came within the window (no sleep) or not.
  Counter* spins_found;
  Counter* spins_missed;
  // Open connections by direction, kept by the connections themselves.
  const std::shared_ptr<std::atomic<int64_t>> open_inbound;
  const std::shared_ptr<std::atomic<int64_t>> open_outbound;
  // Bytes queued for peers (frames and TLS records), summed over
  // connections as each publishes its change at the end of a flush.
  std::atomic<int64_t> queued_outbound_bytes{0};

 private:
  Counter* negotiation_failures_[static_cast<int>(NegotiationFailure::kCount)];
  // [inbound][clear, authentication only, encrypted]
  Counter* negotiated_[2][3];
  // [inbound][plain, gssapi, certificate, token]
  Counter* authenticated_[2][4];
  std::vector<std::shared_ptr<Counter>> busy_nanos_;
  std::vector<LatencyHistogram*> loop_lag_;
};

}  // namespace osprey::transport
