// rpc-bench's reports: Kudu's text format, and one JSON object per mode.
// Main thread, after a run.
#pragma once

#include <string>

#include "load.h"
#include "osprey/base/metrics.h"

namespace osprey::bench {

// Six significant digits as Kudu prints, never in exponent form.
std::string Num(double v);
// `s` as a JSON string, quoted and escaped.
std::string JsonString(const std::string& s);
void PrintText(const Settings& cfg, const Results& r);
// `server_metrics`: the in-process server's registry, whose per-method
// histograms the report includes (null: a remote server, none).
void PrintJson(const Settings& cfg, const Results& r, MetricRegistry* server_metrics);

}  // namespace osprey::bench
