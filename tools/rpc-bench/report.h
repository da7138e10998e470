// rpc-bench's reports: Kudu's text format, and one JSON object per mode.
// Main thread, after a run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "load.h"
#include "osprey/base/metrics.h"

namespace osprey::bench {

// Six significant digits as Kudu prints, never in exponent form.
std::string Num(double v);
// `s` as a JSON string, quoted and escaped.
std::string JsonString(const std::string& s);
void PrintText(const Settings& cfg, const Results& r);
// Failures by cause as text, "2 Timed out, 1 ERROR_UNAVAILABLE", and as a
// JSON object, {"Timed out":2,...}.
std::string CausesText(const std::map<std::string, uint64_t>& causes);
std::string CausesJson(const std::map<std::string, uint64_t>& causes);
// A set's servers: one text line each under a header, and a JSON array.
std::string ServersText(const Settings& cfg, const std::vector<ServerLine>& servers,
                        const char* what);
std::string ServersJson(const std::vector<ServerLine>& servers);
// -hedge: what hedging did, as a text line ("" with hedging off) and as a
// JSON value (null with hedging off); the share is of the calls started.
std::string HedgesText(const Settings& cfg, const HedgeStats& h);
std::string HedgesJson(const Settings& cfg, const HedgeStats& h);
// `server_metrics`: the in-process server's registry, whose per-method
// histograms the report includes (null: a remote server, none).
void PrintJson(const Settings& cfg, const Results& r, MetricRegistry* server_metrics);

}  // namespace osprey::bench
