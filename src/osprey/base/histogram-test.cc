#include "osprey/base/histogram.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace osprey {
namespace {

TEST(HistogramTest, EmptyReportsZero) {
  Histogram h;
  EXPECT_EQ(0u, h.count());
  EXPECT_EQ(0u, h.Percentile(50));
  EXPECT_EQ(0u, h.max());
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 1; v <= 100; ++v) h.Record(v);
  EXPECT_EQ(50u, h.Percentile(50));
  EXPECT_EQ(99u, h.Percentile(99));
  EXPECT_EQ(100u, h.Percentile(100));
  EXPECT_EQ(1u, h.min());
  EXPECT_DOUBLE_EQ(50.5, h.mean());
}

TEST(HistogramTest, PercentilesWithinOnePercent) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(10.0, 2.0);
  std::vector<uint64_t> values;
  Histogram h;
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = static_cast<uint64_t>(dist(rng)) + 1;
    values.push_back(v);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  for (double p : {1.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
    uint64_t truth = values[std::max<size_t>(rank, 1) - 1];
    uint64_t got = h.Percentile(p);
    EXPECT_NEAR(static_cast<double>(truth), static_cast<double>(got), truth * 0.01 + 1) << "p" << p;
  }
  EXPECT_EQ(values.back(), h.max());
}

TEST(HistogramTest, MergeAddsCounts) {
  Histogram a, b;
  a.Record(10);
  b.Record(1000000);
  b.Record(UINT64_MAX / 2);
  a.Merge(b);
  EXPECT_EQ(3u, a.count());
  EXPECT_EQ(10u, a.min());
  EXPECT_EQ(UINT64_MAX / 2, a.max());
  EXPECT_NEAR(1000000.0, static_cast<double>(a.Percentile(60)), 10000.0);
}

}  // namespace
}  // namespace osprey
