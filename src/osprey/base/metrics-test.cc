// Counters and histograms summed over threads, the registry's rules for
// names and types, and the Prometheus text it renders.
#include "osprey/base/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <thread>
#include <vector>

#include "osprey/base/prometheus_text.h"

namespace osprey {

namespace {

TEST(MetricsTest, CounterSumsEveryThreadsIncrements) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.Increment();
    });
  }
  for (auto& t : threads) t.join();
  c.Increment(5);
  EXPECT_EQ(120005, c.value());
}

// The shared shards are handed out round robin by a count bumped at every
// thread exit: past 2^31 exits it must still name a shared shard (a signed
// count went negative and landed in owned shards, losing updates).
TEST(MetricsTest, TheSharedShardCountWrapsIntoTheSharedShards) {
  for (uint64_t ticket :
       {uint64_t{0}, uint64_t{1}, uint64_t{INT32_MAX}, uint64_t{INT32_MAX} + 1,
        uint64_t{INT32_MAX} + 7, uint64_t{UINT32_MAX} - 1, uint64_t{UINT32_MAX}}) {
    int s = MetricShards::SharedShard(static_cast<uint32_t>(ticket));
    EXPECT_GE(s, MetricShards::kOwnedShards) << ticket;
    EXPECT_LT(s, MetricShards::kShards) << ticket;
  }
}

// More threads than there are owned shards, in rounds, so that later
// threads take shards earlier ones gave back and the rest share: no update
// may be lost on either path.
TEST(MetricsTest, CountsStayExactAsThreadsComeAndGoAndOutnumberTheOwnedShards) {
  Counter c;
  LatencyHistogram h;
  c.Increment();  // this thread's shard is taken before the baseline
  const int owned_before = MetricShards::OwnedShardsInUse();
  constexpr int kRounds = 3;
  constexpr int kThreads = MetricShards::kShards + 4;
  constexpr int kEach = 5000;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kEach; ++i) {
          c.Increment();
          h.RecordMicros(7);
        }
      });
    }
    for (auto& t : threads) t.join();
    // Every thread gave its owned shard back as it exited.
    EXPECT_EQ(owned_before, MetricShards::OwnedShardsInUse());
  }
  EXPECT_EQ(1 + int64_t{kRounds} * kThreads * kEach, c.value());
  LatencyHistogram::Reading r = h.Read();
  EXPECT_EQ(int64_t{kRounds} * kThreads * kEach, r.count);
  EXPECT_EQ(r.count, r.cumulative[0]);
  EXPECT_EQ(7 * r.count, r.sum_micros);
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndTheOverflowOnlyInTheCount) {
  LatencyHistogram h;
  h.RecordMicros(10);                        // on the first bound: counted in le=10us
  h.RecordMicros(11);                        // the next bucket, 25us
  h.Record(MonoDelta::FromMilliseconds(3));  // 5000us
  h.RecordMicros(-4);                        // a clock step back counts as 0
  h.RecordMicros(60 * 1000 * 1000);          // a minute: above every bound
  LatencyHistogram::Reading r = h.Read();
  EXPECT_EQ(2, r.cumulative[0]);  // 0 and 10
  EXPECT_EQ(3, r.cumulative[1]);
  EXPECT_EQ(3, r.cumulative[7]);  // 2500us
  EXPECT_EQ(4, r.cumulative[8]);  // 5000us
  EXPECT_EQ(4, r.cumulative[LatencyHistogram::kBuckets - 1]);
  EXPECT_EQ(5, r.count);
  EXPECT_EQ(10 + 11 + 3000 + 0 + 60000000, r.sum_micros);
}

TEST(MetricsTest, EveryValueLandsInTheFirstBucketThatHoldsIt) {
  // Against a plain search, around every bound and at the extremes.
  const auto& bounds = LatencyHistogram::BoundsMicros();
  std::vector<int64_t> values = {0, 1, 2, 3, INT64_MAX / 2, INT64_MAX};
  for (int64_t b : bounds) {
    for (int64_t d : {-1, 0, 1}) values.push_back(b + d);
  }
  for (int64_t v : values) {
    LatencyHistogram h;
    h.RecordMicros(v);
    LatencyHistogram::Reading r = h.Read();
    int want = static_cast<int>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
    for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
      EXPECT_EQ(b >= want ? 1 : 0, r.cumulative[b]) << "value " << v << ", bucket " << b;
    }
  }
}

TEST(MetricsTest, RegistryKeepsOneMetricPerLabelsAndRefusesBadNamesAndTypeClashes) {
  MetricRegistry reg;
  Counter *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_TRUE(reg.GetCounter("calls_total", "Calls.", {{"method", "x"}}, &a).ok());
  ASSERT_TRUE(reg.GetCounter("calls_total", "Calls.", {{"method", "x"}}, &b).ok());
  ASSERT_TRUE(reg.GetCounter("calls_total", "Calls.", {{"method", "y"}}, &c).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  LatencyHistogram* h = nullptr;
  EXPECT_TRUE(reg.GetHistogram("calls_total", "", {}, &h).IsInvalidArgument());
  EXPECT_EQ(nullptr, h);
  Counter* bad = nullptr;
  EXPECT_TRUE(reg.GetCounter("9lives", "", {}, &bad).IsInvalidArgument());
  EXPECT_TRUE(reg.GetCounter("with space", "", {}, &bad).IsInvalidArgument());
  EXPECT_TRUE(reg.GetCounter("ok_total", "", {{"__reserved", "v"}}, &bad).IsInvalidArgument());
  EXPECT_TRUE(reg.GetHistogram("lat_seconds", "", {{"le", "1"}}, &h).IsInvalidArgument());
  EXPECT_EQ(nullptr, bad);
}

TEST(MetricsTest, PrometheusTextHasHelpTypeEscapedLabelsAndCumulativeBuckets) {
  MetricRegistry reg;
  Counter* c;
  ASSERT_TRUE(
      reg.GetCounter("osprey_test_total", "Help with \\ and\nnewline.", {{"v", "a\"b\\c\nd"}}, &c)
          .ok());
  c->Increment(3);
  LatencyHistogram* h;
  ASSERT_TRUE(reg.GetHistogram("osprey_test_seconds", "Latency.", {{"method", "S.M"}}, &h).ok());
  h->RecordMicros(100);
  h->RecordMicros(2000000);
  ASSERT_TRUE(reg.AddGauge("osprey_test_open", "Open.", {}, [] { return 7.0; }).ok());
  std::string text = RenderPrometheusText(reg.Snapshot());
  EXPECT_NE(std::string::npos, text.find("# HELP osprey_test_total Help with \\\\ and\\nnewline.\n"
                                         "# TYPE osprey_test_total counter\n"
                                         "osprey_test_total{v=\"a\\\"b\\\\c\\nd\"} 3\n"))
      << text;
  EXPECT_NE(std::string::npos, text.find("# TYPE osprey_test_seconds histogram\n")) << text;
  EXPECT_NE(std::string::npos,
            text.find("osprey_test_seconds_bucket{method=\"S.M\",le=\"1e-05\"} 0\n"))
      << text;
  EXPECT_NE(std::string::npos,
            text.find("osprey_test_seconds_bucket{method=\"S.M\",le=\"0.0001\"} 1\n"))
      << text;
  EXPECT_NE(std::string::npos,
            text.find("osprey_test_seconds_bucket{method=\"S.M\",le=\"2.5\"} 2\n"))
      << text;
  EXPECT_NE(std::string::npos,
            text.find("osprey_test_seconds_bucket{method=\"S.M\",le=\"+Inf\"} 2\n"))
      << text;
  EXPECT_NE(std::string::npos, text.find("osprey_test_seconds_sum{method=\"S.M\"} 2.0001\n"))
      << text;
  EXPECT_NE(std::string::npos, text.find("osprey_test_seconds_count{method=\"S.M\"} 2\n")) << text;
  EXPECT_NE(std::string::npos, text.find("# TYPE osprey_test_open gauge\nosprey_test_open 7\n"))
      << text;
}

}  // namespace
}  // namespace osprey
