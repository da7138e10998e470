// Metrics: counters, gauges and latency histograms in a registry that a
// messenger serves as Prometheus text (/metrics) and that code in the same
// process reads as a snapshot.
//
// Counter and LatencyHistogram are cheap to update from any thread: no
// lock, no string work and, for the first threads, no lock-prefixed
// instruction either. Each metric has shards a cache line apart; readers
// sum them. A reading taken while updates run may miss the newest of them,
// never count one twice.
//
// MetricRegistry: families of metrics by name, each metric by its labels.
// Registering is thread-safe (a lock, not for hot paths: keep the pointer
// it returns, which lives as long as the registry). Names and label names
// must match Prometheus' [a-zA-Z_:][a-zA-Z0-9_:]*; label values are any
// text (escaped on output).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <climits>
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

// How Counter and LatencyHistogram spread updates over per-thread shards.
// Users need none of it: the public members are read-only facts that
// metrics-test checks (an installed header names no test peer), the rest is
// private to the two classes. Shards [0, kOwnedShards) are each owned by one
// thread at a time (taken on the thread's first update, given back when it
// exits), so their owner adds with a plain load and store: an atomic
// read-modify-write costs several times more, on every call. Later threads
// share the remaining shards, round robin, with atomic adds.
class MetricShards {
 public:
  static constexpr int kShards = 16;
  static constexpr int kOwnedShards = 12;
  static_assert(kOwnedShards < kShards && kOwnedShards <= 32);
  // The shared shard of the `ticket`th thread to need one (any ticket:
  // the count wraps).
  static int SharedShard(uint32_t ticket) {
    return kOwnedShards + static_cast<int>(ticket % uint32_t{kShards - kOwnedShards});
  }
  // How many owned shards threads hold now.
  static int OwnedShardsInUse();

 private:
  friend class Counter;
  friend class LatencyHistogram;

  // This thread's shard, or -1 before its first update. A
  // constant-initialized thread_local, so that reading it is one load.
  static constinit thread_local int this_thread_shard;
  static int AssignThisThreadShard();
  static int ThisThreadShard() {
    int s = this_thread_shard;
    return s >= 0 ? s : AssignThisThreadShard();
  }
  // Adds `n` to `v`, a value in shard `shard`, which this thread owns or
  // shares as ThisThreadShard() says.
  static void AddToShard(std::atomic<int64_t>& v, int64_t n, int shard) {
    if (shard < kOwnedShards) {
      v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    } else {
      v.fetch_add(n, std::memory_order_relaxed);
    }
  }
  static int NextSharedShard();
  struct OwnedShardReturn;  // gives an owned shard back at thread exit
};

// A count that only goes up.
class Counter {
 public:
  void Increment(int64_t n = 1) {
    int s = MetricShards::ThisThreadShard();
    MetricShards::AddToShard(shards_[s].value, n, s);
  }
  int64_t value() const;

 private:
  struct alignas(64) Shard {
    std::atomic<int64_t> value{0};
  };
  std::array<Shard, MetricShards::kShards> shards_;
};

// Durations in fixed buckets from 10 us to 10 s (1-2.5-5 steps), plus
// their count and sum: what a Prometheus histogram carries.
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 19;  // finite upper bounds; +Inf is the count
  // Upper bounds, in microseconds.
  static constexpr std::array<int64_t, kBuckets> kBoundsMicros = {
      10,    25,    50,     100,    250,    500,     1000,    2500,    5000,    10000,
      25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
  static const std::array<int64_t, kBuckets>& BoundsMicros() { return kBoundsMicros; }
  // For each bit width w of a value, the first bucket whose bound could
  // hold it (a value of width w is at least 2^(w-1)).
  static constexpr std::array<uint8_t, 65> kFirstCandidate = [] {
    std::array<uint8_t, 65> first{};
    for (int w = 0; w <= 64; ++w) {
      int64_t lowest = w <= 1 ? 0 : (w >= 64 ? INT64_MAX : int64_t{1} << (w - 1));
      first[w] = static_cast<uint8_t>(
          std::lower_bound(kBoundsMicros.begin(), kBoundsMicros.end(), lowest) -
          kBoundsMicros.begin());
    }
    return first;
  }();
  static_assert(
      [] {
        for (int i = 1; i < kBuckets; ++i) {
          if (kBoundsMicros[i] < 2 * kBoundsMicros[i - 1]) return false;
        }
        return true;
      }(),
      "RecordMicros takes at most one step from its candidate: bounds must at least double");

  void Record(MonoDelta d) { RecordMicros(d.ToMicroseconds()); }
  // Inline: it runs several times per call. Bounds at least doubling means
  // a value's bit width leaves one candidate bucket, or the one after it.
  void RecordMicros(int64_t us) {
    us = std::max<int64_t>(us, 0);
    int b = kFirstCandidate[std::bit_width(static_cast<uint64_t>(us))];
    if (b < kBuckets && kBoundsMicros[b] < us) ++b;
    int shard = MetricShards::ThisThreadShard();
    Shard& s = shards_[shard];
    MetricShards::AddToShard(s.buckets[b], 1, shard);
    MetricShards::AddToShard(s.sum_micros, us, shard);
  }

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
  std::array<Shard, MetricShards::kShards> shards_;
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
                    Counter** out) OSPREY_EXCLUDES(mu_);
  Status GetHistogram(const std::string& name, const std::string& help, MetricLabels labels,
                      LatencyHistogram** out) OSPREY_EXCLUDES(mu_);
  // A value read when the registry is read: `read` runs on the reader's
  // thread (a reactor, serving /metrics), so it must be quick and must not
  // block. Replaces an earlier gauge with the same name and labels.
  Status AddGauge(const std::string& name, const std::string& help, MetricLabels labels,
                  std::function<double()> read) OSPREY_EXCLUDES(mu_);
  // As AddGauge, for a count kept elsewhere that only goes up (exposed as a
  // counter: seconds of busy time kept as nanoseconds, say).
  Status AddCounterFunction(const std::string& name, const std::string& help, MetricLabels labels,
                            std::function<double()> read) OSPREY_EXCLUDES(mu_);

  // Every metric, families in name order, each family's metrics in label
  // order.
  std::vector<MetricValue> Snapshot() const OSPREY_EXCLUDES(mu_);

 private:
  struct Family {
    MetricValue::Type type;
    std::string help;
    std::map<MetricLabels, std::unique_ptr<Counter>> counters;
    std::map<MetricLabels, std::unique_ptr<LatencyHistogram>> histograms;
    std::map<MetricLabels, std::function<double()>> functions;  // gauges, counter functions
  };
  Status FamilyFor(const std::string& name, const std::string& help, MetricValue::Type type,
                   const MetricLabels& labels, Family** out) OSPREY_REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family> families_ OSPREY_GUARDED_BY(mu_);
};

// Whether `name` is a valid Prometheus metric (or label) name.
bool IsValidMetricName(const std::string& name);

}  // namespace osprey
