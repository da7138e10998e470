// Histogram: counts of non-negative values (latencies in nanoseconds) in
// log-linear buckets, so any percentile it reports is within 1% of the true
// value (128 sub-buckets per power of two: at most 1/128 relative error).
// Not thread-safe: give each thread its own and Merge() at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace osprey {

class Histogram {
 public:
  Histogram();

  void Record(uint64_t value);
  void Merge(const Histogram& other);
  void Clear();

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  uint64_t sum() const { return sum_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0; }
  // The value at percentile p (0..100): a value whose bucket holds the
  // p-th ranked sample, never above max().
  uint64_t Percentile(double p) const;

  // One bucket: the values from `low` to `high`, both included.
  struct Bucket {
    uint64_t low;
    uint64_t high;
    uint64_t count;
  };
  // The non-empty buckets, lowest first. Every histogram has the same bucket
  // bounds, so adding up the counts of equal bounds (and the counts, sums,
  // mins and maxes) gives exactly what Merge() gives. Percentile() reports
  // low + (high - low + 1) / 2 of the bucket it picks, clamped to
  // [min(), max()].
  std::vector<Bucket> NonEmptyBuckets() const;

 private:
  static constexpr int kSubBucketBits = 7;  // 128 per power of two
  static size_t BucketFor(uint64_t v);
  static uint64_t BucketMidpoint(size_t bucket);

  std::vector<uint64_t> buckets_;
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

}  // namespace osprey
