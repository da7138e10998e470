// SlidingWindowCounts: N counts over the last `window` of time, kept in ten
// buckets of a tenth of it each (so a count is forgotten between 0.9 and 1
// window after it was made). Time is passed in: tests bring their own
// clock. Not thread-safe: its owner locks.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "osprey/base/monotime.h"

namespace osprey {

template <int N>
class SlidingWindowCounts {
 public:
  explicit SlidingWindowCounts(MonoDelta window)
      : bucket_ns_(std::max<int64_t>(window.ToNanoseconds() / kBuckets, 1)) {}

  // Adds `n` to count `which` at `now`.
  void Add(MonoTime now, int which, uint64_t n = 1) { BucketAt(now).counts[which] += n; }
  // Count `which` over the window ending at `now`.
  uint64_t Sum(MonoTime now, int which) {
    const int64_t current = Index(now);
    uint64_t total = 0;
    for (const Bucket& b : buckets_) {
      if (b.index > current - kBuckets && b.index <= current) total += b.counts[which];
    }
    return total;
  }

 private:
  static constexpr int kBuckets = 10;
  struct Bucket {
    int64_t index = INT64_MIN;  // which tenth of time it counts
    std::array<uint64_t, N> counts{};
  };
  int64_t Index(MonoTime now) const { return (now - MonoTime()).ToNanoseconds() / bucket_ns_; }
  Bucket& BucketAt(MonoTime now) {
    const int64_t index = Index(now);
    Bucket& b = buckets_[static_cast<size_t>(((index % kBuckets) + kBuckets) % kBuckets)];
    if (b.index != index) {
      b.index = index;
      b.counts = {};
    }
    return b;
  }

  const int64_t bucket_ns_;
  std::array<Bucket, kBuckets> buckets_;
};

}  // namespace osprey
