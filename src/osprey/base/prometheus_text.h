// The Prometheus text exposition format, version 0.0.4, of a metrics
// snapshot: what /metrics serves, written by prometheus-cpp's serializer
// (Debian's prometheus-cpp-dev). Per family a "# HELP" and a "# TYPE"
// line; counters as counters, gauges as gauges, latency histograms as
// <name>_bucket{le="..."} (cumulative, in seconds, ending with le="+Inf"),
// <name>_sum (seconds) and <name>_count. Pure function; any thread.
#pragma once

#include <string>
#include <vector>

#include "osprey/base/metrics.h"

namespace osprey {

// The Content-Type of this format.
inline constexpr const char* kPrometheusTextContentType =
    "text/plain; version=0.0.4; charset=utf-8";

std::string RenderPrometheusText(const std::vector<MetricValue>& metrics);

}  // namespace osprey
