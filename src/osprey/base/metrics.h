// Metrics: counters, gauges and latency histograms in a registry that a
// messenger serves as Prometheus text (/metrics) and that code in the same
// process reads as a snapshot.
//
// Counter and LatencyHistogram are cheap to update from any thread: no
// lock and no string work; each thread adds to a shard of its own (a cache
// line apart), and readers sum the shards. A reading taken while updates
// run may miss the newest of them, never count one twice.
//
// MetricRegistry: families of metrics by name, each metric by its labels.
// Registering is thread-safe (a lock, not for hot paths: keep the pointer
// it returns, which lives as long as the registry). Names and label names
// must match Prometheus' [a-zA-Z_:][a-zA-Z0-9_:]*; label values are any
// text (escaped on output).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/mutex.h"
#include "osprey/base/status.h"

namespace osprey {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

namespace metrics_internal {
constexpr int kShards = 8;
// This thread's shard: threads are dealt shards round robin, on first use.
// A constant-initialized thread_local, so that reading it is one load.
extern constinit thread_local int this_thread_shard;
int AssignThisThreadShard();
inline int ThisThreadShard() {
  int s = this_thread_shard;
  return s >= 0 ? s : AssignThisThreadShard();
}
}  // namespace metrics_internal

// A count that only goes up.
class Counter {
 public:
  void Increment(int64_t n = 1) {
    shards_[metrics_internal::ThisThreadShard()].value.fetch_add(n, std::memory_order_relaxed);
  }
  int64_t value() const;

 private:
  struct alignas(64) Shard {
    std::atomic<int64_t> value{0};
  };
  std::array<Shard, metrics_internal::kShards> shards_;
};

// Durations in fixed buckets from 10 us to 10 s (1-2.5-5 steps), plus
// their count and sum: what a Prometheus histogram carries.
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 19;  // finite upper bounds; +Inf is the count
  // Upper bounds, in microseconds.
  static const std::array<int64_t, kBuckets>& BoundsMicros();

  void Record(MonoDelta d) { RecordMicros(d.ToMicroseconds()); }
  void RecordMicros(int64_t us);

  struct Reading {
    std::array<int64_t, kBuckets> cumulative{};  // observations <= each bound
    int64_t count = 0;
    int64_t sum_micros = 0;
  };
  Reading Read() const;

 private:
  struct alignas(64) Shard {
    std::array<std::atomic<int64_t>, kBuckets + 1> buckets{};  // the last: above every bound
    std::atomic<int64_t> sum_micros{0};
  };
  std::array<Shard, metrics_internal::kShards> shards_;
};

// One metric's value in a snapshot.
struct MetricValue {
  enum class Type { kCounter, kGauge, kHistogram };
  std::string name;
  std::string help;
  Type type = Type::kCounter;
  MetricLabels labels;
  double value = 0;                     // counter, gauge
  LatencyHistogram::Reading histogram;  // histogram
};

class MetricRegistry {
 public:
  MetricRegistry() = default;
  MetricRegistry(const MetricRegistry&) = delete;
  MetricRegistry& operator=(const MetricRegistry&) = delete;

  // The metric of family `name` with `labels`, created on first use. A name
  // registered before as another type, or an invalid name, is a programming
  // error: InvalidArgument, and null.
  Status GetCounter(const std::string& name, const std::string& help, MetricLabels labels,
                    Counter** out) EXCLUDES(mu_);
  Status GetHistogram(const std::string& name, const std::string& help, MetricLabels labels,
                      LatencyHistogram** out) EXCLUDES(mu_);
  // A value read when the registry is read: `read` runs on the reader's
  // thread (a reactor, serving /metrics), so it must be quick and must not
  // block. Replaces an earlier gauge with the same name and labels.
  Status AddGauge(const std::string& name, const std::string& help, MetricLabels labels,
                  std::function<double()> read) EXCLUDES(mu_);
  // As AddGauge, for a count kept elsewhere that only goes up (exposed as a
  // counter: seconds of busy time kept as nanoseconds, say).
  Status AddCounterFunction(const std::string& name, const std::string& help, MetricLabels labels,
                            std::function<double()> read) EXCLUDES(mu_);

  // Every metric, families in name order, each family's metrics in label
  // order.
  std::vector<MetricValue> Snapshot() const EXCLUDES(mu_);

 private:
  struct Family {
    MetricValue::Type type;
    std::string help;
    std::map<MetricLabels, std::unique_ptr<Counter>> counters;
    std::map<MetricLabels, std::unique_ptr<LatencyHistogram>> histograms;
    std::map<MetricLabels, std::function<double()>> functions;  // gauges, counter functions
  };
  Status FamilyFor(const std::string& name, const std::string& help, MetricValue::Type type,
                   const MetricLabels& labels, Family** out) REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family> families_ GUARDED_BY(mu_);
};

// Whether `name` is a valid Prometheus metric (or label) name.
bool IsValidMetricName(const std::string& name);

}  // namespace osprey
