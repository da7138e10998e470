#include "osprey/base/histogram.h"

#include <algorithm>
#include <cmath>

namespace osprey {
namespace {
constexpr uint64_t kSubBuckets = uint64_t{1} << 7;
}  // namespace

Histogram::Histogram() : buckets_((64 - 7 + 1) * kSubBuckets, 0) {}

size_t Histogram::BucketFor(uint64_t v) {
  // Values below 128 get exact buckets; above, the top 7 bits after the
  // leading one pick the sub-bucket of their power of two.
  if (v < kSubBuckets) return static_cast<size_t>(v);
  int msb = 63 - __builtin_clzll(v);
  int shift = msb - kSubBucketBits;
  uint64_t sub = (v >> shift) - kSubBuckets;  // 0..127
  return static_cast<size_t>((shift + 1) * kSubBuckets + sub);
}

uint64_t Histogram::BucketMidpoint(size_t bucket) {
  if (bucket < kSubBuckets) return bucket;
  uint64_t shift = bucket / kSubBuckets - 1;
  uint64_t sub = bucket % kSubBuckets;
  uint64_t low = (kSubBuckets + sub) << shift;
  uint64_t width = uint64_t{1} << shift;
  return low + width / 2;
}

void Histogram::Record(uint64_t v) {
  buckets_[BucketFor(v)]++;
  count_++;
  sum_ += v;
  min_ = std::min(min_, v);
  max_ = std::max(max_, v);
}

void Histogram::Merge(const Histogram& o) {
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += o.buckets_[i];
  count_ += o.count_;
  sum_ += o.sum_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

void Histogram::Clear() {
  std::fill(buckets_.begin(), buckets_.end(), 0);
  count_ = sum_ = max_ = 0;
  min_ = UINT64_MAX;
}

std::vector<Histogram::Bucket> Histogram::NonEmptyBuckets() const {
  std::vector<Bucket> out;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i] == 0) continue;
    if (i < kSubBuckets) {
      out.push_back({i, i, buckets_[i]});
      continue;
    }
    uint64_t shift = i / kSubBuckets - 1;
    uint64_t low = (kSubBuckets + i % kSubBuckets) << shift;
    out.push_back({low, low + ((uint64_t{1} << shift) - 1), buckets_[i]});
  }
  return out;
}

uint64_t Histogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  p = std::clamp(p, 0.0, 100.0);
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  rank = std::max<uint64_t>(rank, 1);
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen >= rank) return std::clamp(BucketMidpoint(i), min(), max_);
  }
  return max_;
}

}  // namespace osprey
