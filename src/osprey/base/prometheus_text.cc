#include "osprey/base/prometheus_text.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <limits>
#include <sstream>

namespace osprey {

namespace {

prometheus::MetricType TypeOf(MetricValue::Type t) {
  switch (t) {
    case MetricValue::Type::kCounter:
      return prometheus::MetricType::Counter;
    case MetricValue::Type::kGauge:
      return prometheus::MetricType::Gauge;
    case MetricValue::Type::kHistogram:
      return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

}  // namespace

std::string RenderPrometheusText(const std::vector<MetricValue>& metrics) {
  // prometheus-cpp's serializer writes the format (HELP, TYPE, escaping,
  // numbers); this only hands it the snapshot in its own types.
  std::vector<prometheus::MetricFamily> families;
  for (const MetricValue& m : metrics) {
    if (families.empty() || families.back().name != m.name) {
      prometheus::MetricFamily& f = families.emplace_back();
      f.name = m.name;
      // prometheus-cpp 1.0 escapes label values but writes HELP as given;
      // the format wants its backslashes and newlines escaped.
      for (char ch : m.help) {
        if (ch == '\\') {
          f.help += "\\\\";
        } else if (ch == '\n') {
          f.help += "\\n";
        } else {
          f.help += ch;
        }
      }
      f.type = TypeOf(m.type);
    }
    prometheus::ClientMetric& c = families.back().metric.emplace_back();
    for (const auto& [name, value] : m.labels) c.label.push_back({name, value});
    switch (m.type) {
      case MetricValue::Type::kCounter:
        c.counter.value = m.value;
        break;
      case MetricValue::Type::kGauge:
        c.gauge.value = m.value;
        break;
      case MetricValue::Type::kHistogram: {
        const auto& bounds = LatencyHistogram::BoundsMicros();
        for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
          c.histogram.bucket.push_back({static_cast<std::uint64_t>(m.histogram.cumulative[b]),
                                        static_cast<double>(bounds[b]) / 1e6});
        }
        c.histogram.bucket.push_back({static_cast<std::uint64_t>(m.histogram.count),
                                      std::numeric_limits<double>::infinity()});
        c.histogram.sample_count = static_cast<std::uint64_t>(m.histogram.count);
        c.histogram.sample_sum = static_cast<double>(m.histogram.sum_micros) / 1e6;
        break;
      }
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace osprey
