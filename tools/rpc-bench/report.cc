#include "report.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "flags.h"

namespace osprey::bench {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

namespace {
// The client's whole latency histogram, so that runs of several processes
// can be merged exactly: the non-empty buckets as [upper_bound, count], the
// upper bound included, in nanoseconds. A bucket's lower bound is the upper
// bound itself below 128, else upper_bound + 1 - 2^(floor(log2(upper_bound))
// - 7) (128 buckets per power of two); its percentile value is the middle,
// lower + (upper - lower + 1) / 2, clamped to [min, max].
std::string LatencyHistogramJson(const Histogram& h) {
  std::ostringstream o;
  o << "{\"unit\":\"ns\",\"count\":" << h.count() << ",\"sum\":" << h.sum()
    << ",\"min\":" << h.min() << ",\"max\":" << h.max() << ",\"buckets\":[";
  bool first = true;
  for (const Histogram::Bucket& b : h.NonEmptyBuckets()) {
    o << (first ? "" : ",") << "[" << b.high << "," << b.count << "]";
    first = false;
  }
  o << "]}";
  return o.str();
}

}  // namespace

// Never in exponent form, so that scripts reading the report see plain
// numbers however large.
std::string Num(double v) {
  std::ostringstream o;
  if (std::fabs(v) >= 1e6) {
    o << std::fixed << std::setprecision(0) << v;
  } else {
    o << v;
  }
  return o.str();
}

std::string CausesText(const std::map<std::string, uint64_t>& causes) {
  std::string s;
  for (const auto& [cause, n] : causes) {
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + cause;
  }
  return s;
}

std::string CausesJson(const std::map<std::string, uint64_t>& causes) {
  std::string s = "{";
  for (const auto& [cause, n] : causes) {
    s += (s.size() > 1 ? "," : "") + JsonString(cause) + ":" + std::to_string(n);
  }
  return s + "}";
}

std::string ServersText(const Settings& cfg, const std::vector<ServerLine>& servers,
                        const char* what) {
  if (servers.empty()) return "";
  std::ostringstream o;
  o << "Servers:          " << servers.size() << " (" << LoadBalancingName(cfg.lb) << "; " << what
    << ")\n";
  for (const ServerLine& s : servers) {
    o << "  " << s.address << ": " << s.calls << (s.ejected ? " (ejected)" : "")
      << (s.draining ? " (draining)" : "") << "\n";
  }
  return o.str();
}

std::string ServersJson(const std::vector<ServerLine>& servers) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < servers.size(); ++i) {
    const ServerLine& s = servers[i];
    o << (i ? "," : "") << "{\"address\":" << JsonString(s.address) << ",\"calls\":" << s.calls
      << ",\"ejected\":" << (s.ejected ? "true" : "false")
      << ",\"draining\":" << (s.draining ? "true" : "false") << "}";
  }
  return o.str() + "]";
}

namespace {
std::string HedgePolicyText(const HedgingPolicy& p) {
  if (p.when == HedgingPolicy::When::kP95) return "p95";
  return Num(p.delay.ToNanoseconds() / 1e6) + "ms";
}
}  // namespace

std::string HedgesText(const Settings& cfg, const HedgeStats& h) {
  if (!cfg.hedging.enabled) return "";
  std::ostringstream o;
  o << "Hedges:           " << h.sent << " sent ("
    << Num(100.0 * static_cast<double>(h.sent) /
           static_cast<double>(std::max<int64_t>(h.eligible, 1)))
    << "% of the " << h.eligible << " calls started), " << h.won << " won, " << h.refused_by_cap
    << " refused by the cap (" << HedgePolicyText(cfg.hedging) << ", at most "
    << Num(100 * cfg.hedging.max_share) << "%)\n";
  return o.str();
}

std::string HedgesJson(const Settings& cfg, const HedgeStats& h) {
  if (!cfg.hedging.enabled) return "null";
  std::ostringstream o;
  o << "{\"policy\":" << JsonString(HedgePolicyText(cfg.hedging))
    << ",\"max_share\":" << Num(cfg.hedging.max_share) << ",\"eligible\":" << h.eligible
    << ",\"sent\":" << h.sent << ",\"won\":" << h.won << ",\"refused_by_cap\":" << h.refused_by_cap
    << ",\"no_other_server\":" << h.no_other_server << "}";
  return o.str();
}

void PrintText(const Settings& cfg, const Results& r) {
  double wall = r.cpu.wall.ToSeconds();
  double calls = static_cast<double>(std::max<uint64_t>(r.calls, 1));
  std::ostringstream o;
  o << "Mode:            " << (cfg.async ? "Async" : "Sync") << "\n";
  if (cfg.async) {
    o << "Client reactors:  " << cfg.client_threads << "\n";
    o << "Call concurrency: " << cfg.concurrency << "\n";
  } else {
    o << "Client threads:   " << cfg.client_threads << "\n";
  }
  o << "Worker threads:   " << FLAGS_worker_threads << "\n";
  o << "Server reactors:  " << FLAGS_server_reactors << "\n";
  // Kudu's 1 or 0 first (1: the calls travelled encrypted), then what the
  // connections negotiated and what was asked.
  o << "Encryption:       " << (r.encrypted ? 1 : 0) << " (negotiated " << r.negotiated << "; "
    << AskedEncryption() << ")\n";
  o << "----------------------------------\n";
  o << "Reqs/sec:         " << Num(std::round(static_cast<double>(r.calls) / wall)) << "\n";
  o << "User CPU per req: " << Num(r.cpu.user.ToNanoseconds() / 1000.0 / calls) << "us\n";
  o << "Sys CPU per req:  " << Num(r.cpu.system.ToNanoseconds() / 1000.0 / calls) << "us\n";
  o << "Ctx Sw. per req:  " << Num(r.cpu.context_switches / calls) << "\n";
  auto us = [&](double p) { return Num(r.latency.Percentile(p) / 1000.0); };
  o << "Latency p50:      " << us(50) << "us\n";
  o << "Latency p99:      " << us(99) << "us\n";
  o << "Latency p99.9:    " << us(99.9) << "us\n";
  o << "Latency max:      " << Num(r.latency.max() / 1000.0) << "us\n";
  if (cfg.target_rate > 0) o << "Target rate:      " << Num(cfg.target_rate) << "/s (open loop)\n";
  if (cfg.payload > 0) o << "Payload bytes:    " << cfg.payload << "\n";
  o << "Errors:           " << r.errors;
  if (r.errors > 0) o << " (" << CausesText(r.errors_by_cause) << ")";
  o << "\n";
  // The total, then one line per reason with its advice: the reasons call
  // for different remedies (a longer queue helps only a full one).
  o << "Refused:          " << r.refused << "\n";
  o << r.refusals.TextLines("  Refused, ");
  if (!r.first_error.empty()) o << "First error:      " << r.first_error << "\n";
  o << ServersText(cfg, r.servers, "attempts sent to each in the measured interval");
  o << HedgesText(cfg, r.hedges);
  std::cout << o.str() << std::flush;
}

namespace {
// {"<method>":{"handler_latency_seconds":{...},"queue_time_seconds":{...}}}
std::string ServerHistogramsJson(MetricRegistry* registry) {
  std::map<std::string, std::string> by_method;
  const auto& bounds = LatencyHistogram::BoundsMicros();
  for (const MetricValue& v : registry->Snapshot()) {
    if (v.type != MetricValue::Type::kHistogram) continue;
    const char* kind = v.name == "osprey_server_handler_latency_seconds" ? "handler_latency_seconds"
                       : v.name == "osprey_server_queue_time_seconds"    ? "queue_time_seconds"
                                                                         : nullptr;
    if (kind == nullptr || v.labels.empty()) continue;
    std::ostringstream h;
    h << JsonString(kind) << ":{\"count\":" << v.histogram.count
      << ",\"sum\":" << Num(static_cast<double>(v.histogram.sum_micros) / 1e6) << ",\"buckets\":[";
    for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
      h << (b ? "," : "") << "{\"le\":" << Num(static_cast<double>(bounds[b]) / 1e6)
        << ",\"count\":" << v.histogram.cumulative[b] << "}";
    }
    h << "]}";
    std::string& m = by_method[v.labels[0].second];
    m += (m.empty() ? "" : ",") + h.str();
  }
  std::string out = "{";
  bool first = true;
  for (const auto& [method, body] : by_method) {
    out += (first ? "" : ",") + JsonString(method) + ":{" + body + "}";
    first = false;
  }
  return out + "}";
}
}  // namespace

void PrintJson(const Settings& cfg, const Results& r, MetricRegistry* server_metrics) {
  double wall = r.cpu.wall.ToSeconds();
  double calls = static_cast<double>(std::max<uint64_t>(r.calls, 1));
  std::ostringstream o;
  o << "{\"mode\":\"" << (cfg.async ? "async" : "sync") << "\""
    << ",\"client_threads\":" << cfg.client_threads
    << ",\"async_call_concurrency\":" << cfg.concurrency
    << ",\"worker_threads\":" << FLAGS_worker_threads
    << ",\"server_reactors\":" << FLAGS_server_reactors
    << ",\"encryption\":" << (r.encrypted ? "true" : "false")
    << ",\"negotiated\":" << JsonString(r.negotiated)
    << ",\"rpc_encryption\":" << JsonString(FLAGS_rpc_encryption)
    << ",\"rpc_encrypt_loopback_connections\":"
    << (FLAGS_rpc_encrypt_loopback_connections ? "true" : "false")
    << ",\"run_seconds\":" << Num(cfg.run_seconds)
    << ",\"warmup_seconds\":" << Num(cfg.warmup_seconds)
    << ",\"target_rate\":" << Num(cfg.target_rate) << ",\"payload_bytes\":" << cfg.payload
    << ",\"server_address\":" << JsonString(cfg.target.empty() ? cfg.server.ToString() : cfg.target)
    << ",\"lb\":" << (cfg.server_set ? JsonString(LoadBalancingName(cfg.lb)) : "null")
    << ",\"servers\":" << ServersJson(r.servers) << ",\"hedges\":" << HedgesJson(cfg, r.hedges)
    << ",\"calls\":" << r.calls << ",\"wall_seconds\":" << Num(wall)
    << ",\"reqs_per_sec\":" << Num(r.calls / wall)
    << ",\"user_cpu_us_per_req\":" << Num(r.cpu.user.ToNanoseconds() / 1000.0 / calls)
    << ",\"sys_cpu_us_per_req\":" << Num(r.cpu.system.ToNanoseconds() / 1000.0 / calls)
    << ",\"ctx_switches_per_req\":" << Num(r.cpu.context_switches / calls)
    << ",\"latency_us\":{\"p50\":" << Num(r.latency.Percentile(50) / 1000.0)
    << ",\"p99\":" << Num(r.latency.Percentile(99) / 1000.0)
    << ",\"p99.9\":" << Num(r.latency.Percentile(99.9) / 1000.0)
    << ",\"max\":" << Num(r.latency.max() / 1000.0) << "}"
    << ",\"errors\":" << r.errors << ",\"errors_by_cause\":" << CausesJson(r.errors_by_cause)
    << ",\"refused\":" << r.refused << ",\"refused_by_reason\":" << r.refusals.Json()
    << ",\"first_other_refusal\":" << JsonString(r.refusals.first_other)
    << ",\"first_error\":" << JsonString(r.first_error)
    << ",\"user_cpu_us\":" << r.cpu.user.ToMicroseconds()
    << ",\"sys_cpu_us\":" << r.cpu.system.ToMicroseconds()
    << ",\"context_switches\":" << r.cpu.context_switches
    << ",\"latency_histogram\":" << LatencyHistogramJson(r.latency);
  if (server_metrics != nullptr)
    o << ",\"server_metrics\":" << ServerHistogramsJson(server_metrics);
  o << "}\n";
  std::cout << o.str() << std::flush;
}

}  // namespace osprey::bench
