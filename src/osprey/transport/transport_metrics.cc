#include "osprey/transport/transport_metrics.h"

#include <glog/logging.h>

#include <string>

#include "osprey/base/buffer_pool.h"
#include "osprey/base/call_block_cache.h"

namespace osprey::transport {

namespace {

Counter* MakeCounter(MetricRegistry* r, const std::string& name, const std::string& help,
                     MetricLabels labels = {}) {
  Counter* c = nullptr;
  Status s = r->GetCounter(name, help, std::move(labels), &c);
  CHECK(s.ok()) << s.ToString();  // constant names
  return c;
}

}  // namespace

TransportMetrics::TransportMetrics(MetricRegistry* r, int num_reactors,
                                   std::shared_ptr<std::atomic<int64_t>> inbound)
    : open_inbound(std::move(inbound)), open_outbound(std::make_shared<std::atomic<int64_t>>(0)) {
  bytes_sent = MakeCounter(r, "osprey_bytes_sent_total", "Bytes written to sockets.");
  bytes_received = MakeCounter(r, "osprey_bytes_received_total", "Bytes read from sockets.");
  connections_accepted = MakeCounter(r, "osprey_connections_accepted_total",
                                     "Connections this messenger accepted (RPC and HTTP).");
  connections_refused_unauthenticated =
      MakeCounter(r, "osprey_connections_refused_unauthenticated_total",
                  "Connections accepted and closed at once because as many as allowed were still "
                  "negotiating, in all or from the peer's address (set_unauthenticated_limits).");
  reactor_borrows = MakeCounter(
      r, "osprey_reactor_borrows_total",
      "Times a caller or worker thread did a sleeping reactor's work in its place (a sync call "
      "sent, an answer written) instead of waking it.");
  caller_reads = MakeCounter(
      r, "osprey_caller_reads_total",
      "Sync calls whose caller waited for the answer on the socket itself, the only call its "
      "connection awaited, so that no reactor woke for it.");
  worker_reads = MakeCounter(
      r, "osprey_worker_reads_total",
      "Times a service worker, having answered a connection's last call in flight, waited for "
      "its next request on the socket itself instead of in its queue.");
  worker_read_requests = MakeCounter(
      r, "osprey_worker_read_requests_total",
      "Requests a service worker waiting on a connection read from its socket itself, with no "
      "reactor woken for them.");
  parked_wakeups = MakeCounter(
      r, "osprey_parked_wakeups_total",
      "Times a thread waiting on a socket itself (a sync caller or a worker) was woken by its "
      "eventfd instead: its call finished on another thread, a call for the worker, a deadline, "
      "a cancel or shutdown. A caller that reads its own answer is not woken.");
  epoll_changes = MakeCounter(
      r, "osprey_epoll_changes_total",
      "Changes a reactor made to what its epoll set watches for a registered socket (one "
      "system call or two each): a connection that began or stopped waiting to write, or "
      "that a sync caller stopped or resumed leaving to the reactor.");
  spins_found = MakeCounter(
      r, "osprey_spins_found_total",
      "Waits for the network (a reactor's, a sync caller's, a waiting worker's) that polled "
      "before sleeping and found their event within the window: no sleep and no wake-up.");
  spins_missed = MakeCounter(
      r, "osprey_spins_missed_total",
      "Waits that polled before sleeping for the whole window and then slept; each makes its "
      "thread's next waits skip polling, more of them the more such spins in a row.");
  const char* reasons[] = {"timeout", "refused", "tls", "protocol", "network", "kerberos"};
  for (int i = 0; i < static_cast<int>(NegotiationFailure::kCount); ++i) {
    negotiation_failures_[i] =
        MakeCounter(r, "osprey_negotiation_failures_total",
                    "Connections that closed before negotiation finished, by reason.",
                    {{"reason", reasons[i]}});
  }
  const char* directions[] = {"outbound", "inbound"};
  const char* securities[] = {"clear", "tls_authentication_only", "tls_encrypted"};
  for (int d = 0; d < 2; ++d) {
    for (int k = 0; k < 3; ++k) {
      negotiated_[d][k] = MakeCounter(
          r, "osprey_connections_negotiated_total",
          "Connections whose negotiation finished, by direction and what it agreed: clear, TLS "
          "that only authenticated (loopback), or TLS encrypting every byte.",
          {{"direction", directions[d]}, {"security", securities[k]}});
    }
  }
  const char* methods[] = {"plain", "gssapi", "certificate", "token"};
  for (int d = 0; d < 2; ++d) {
    for (int k = 0; k < 4; ++k) {
      authenticated_[d][k] =
          MakeCounter(r, "osprey_connections_authenticated_total",
                      "Connections whose negotiation finished, by direction and how the client "
                      "authenticated: SASL PLAIN (a name it chose), Kerberos (SASL GSSAPI), a TLS "
                      "client certificate or a token.",
                      {{"direction", directions[d]}, {"method", methods[k]}});
    }
  }
  auto gauge = [r](const std::string& name, const std::string& help, MetricLabels labels,
                   std::function<double()> read) {
    Status s = r->AddGauge(name, help, std::move(labels), std::move(read));
    CHECK(s.ok()) << s.ToString();
  };
  gauge("osprey_buffer_pool_kept_bytes",
        "Bytes of large frame buffers the process keeps for its next large frames (bounded).", {},
        [] { return static_cast<double>(BufferPool::Default()->kept_bytes()); });
  gauge("osprey_call_block_cache_kept_bytes",
        "Bytes of spare call-object blocks the process's threads keep for their next calls "
        "(bounded per thread).",
        {}, [] { return static_cast<double>(CallBlockCache::kept_bytes()); });
  auto in = open_inbound, out = open_outbound;
  gauge("osprey_connections_open", "Open connections, by direction.", {{"direction", "inbound"}},
        [in] { return static_cast<double>(in->load(std::memory_order_relaxed)); });
  gauge("osprey_connections_open", "Open connections, by direction.", {{"direction", "outbound"}},
        [out] { return static_cast<double>(out->load(std::memory_order_relaxed)); });
  gauge("osprey_outbound_queued_bytes", "Bytes queued for peers, not yet taken by the kernel.", {},
        [this] {
          return static_cast<double>(queued_outbound_bytes.load(std::memory_order_relaxed));
        });
  for (int i = 0; i < num_reactors; ++i) {
    MetricLabels l = {{"reactor", std::to_string(i)}};
    // Kept in nanoseconds, exposed in seconds (Prometheus' base unit).
    auto busy = std::make_shared<Counter>();
    busy_nanos_.push_back(busy);
    Status bs = r->AddCounterFunction(
        "osprey_reactor_busy_seconds_total",
        "Time each reactor spent working, not waiting in epoll_wait; its rate is the reactor's "
        "busy fraction.",
        l, [busy] { return static_cast<double>(busy->value()) / 1e9; });
    CHECK(bs.ok()) << bs.ToString();
    LatencyHistogram* lag = nullptr;
    Status s = r->GetHistogram("osprey_reactor_loop_lag_seconds",
                               "Length of each reactor loop iteration: how long an event can wait "
                               "behind the others.",
                               l, &lag);
    CHECK(s.ok()) << s.ToString();
    loop_lag_.push_back(lag);
  }
}

TransportMetrics::NegotiationFailure TransportMetrics::Classify(const Status& why) {
  if (why.IsTimedOut()) return NegotiationFailure::kTimeout;
  const std::string& m = why.message();
  if (m.find("Kerberos") != std::string::npos || m.find("GSSAPI") != std::string::npos) {
    return NegotiationFailure::kKerberos;
  }
  if (why.IsNotAuthorized()) return NegotiationFailure::kRefused;
  if (m.find("TLS") != std::string::npos || m.find("SSL") != std::string::npos) {
    return NegotiationFailure::kTls;
  }
  if (why.IsCorruption() || why.IsInvalidArgument()) return NegotiationFailure::kProtocol;
  return NegotiationFailure::kNetwork;
}

void TransportMetrics::CountNegotiationFailure(NegotiationFailure why) {
  negotiation_failures_[static_cast<int>(why)]->Increment();
}

void TransportMetrics::CountNegotiated(bool inbound, ConnectionSecurity security) {
  int k;
  switch (security) {
    case ConnectionSecurity::kClear:
      k = 0;
      break;
    case ConnectionSecurity::kTlsAuthenticationOnly:
      k = 1;
      break;
    case ConnectionSecurity::kTlsEncrypted:
      k = 2;
      break;
    default:
      return;  // still negotiating: not a finished negotiation
  }
  negotiated_[inbound ? 1 : 0][k]->Increment();
}

void TransportMetrics::CountAuthenticated(bool inbound, AuthenticationMethod method) {
  int k = method == AuthenticationMethod::kKerberos      ? 1
          : method == AuthenticationMethod::kCertificate ? 2
          : method == AuthenticationMethod::kToken       ? 3
                                                         : 0;
  authenticated_[inbound ? 1 : 0][k]->Increment();
}

void TransportMetrics::RecordReactorIteration(int reactor, MonoDelta busy) {
  if (reactor < 0 || static_cast<size_t>(reactor) >= busy_nanos_.size()) return;
  busy_nanos_[reactor]->Increment(busy.ToNanoseconds());
  loop_lag_[reactor]->Record(busy);
}

}  // namespace osprey::transport
