#include "flags.h"

#include <glog/logging.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "osprey/rpc/load_balancer.h"
#include "osprey/rpc/server_set.h"
#include "report.h"

DEFINE_int32(client_threads, 16,
             "sync: client threads; async and -rate_schedule: client reactors (Messengers), "
             "each with its own connection (with -rate_schedule, each with a thread that "
             "starts its share of the calls; default 2 there)");
DEFINE_int32(async_call_concurrency, 60, "async: calls in flight at once, over all reactors");
DEFINE_int32(worker_threads, 1, "server service-pool worker threads (0: run on reactors)");
DEFINE_int32(server_reactors, 4, "server reactor threads");
DEFINE_double(run_seconds, 1, "seconds to measure each mode");
DEFINE_string(mode, "both", "sync, async or both (sync first)");
DEFINE_int32(payload_bytes, 0, "0: the Add call; N > 0: Echo of N bytes each way");
DEFINE_string(server_address, "",
              "the running servers to call (ours or Kudu's): HOST:PORT, or a set of servers "
              "balanced by -lb, HOST:PORT,HOST:PORT,... or dns:NAME:PORT (every address of "
              "NAME); empty: run a server in this process");
DEFINE_string(lb, "p2c",
              "-server_address naming a set: how each call picks a server "
              "(Proxy::set_load_balancing): p2c (power of two choices on calls outstanding, "
              "weighted by latency), round_robin, or hash (consistent hashing on each call's "
              "sequence number)");
DEFINE_string(hedge, "off",
              "-server_address naming a set: hedged calls (Proxy::set_hedging; every call of "
              "rpc-bench is idempotent): off, p95 (a second attempt to another server once a "
              "call has waited the method's recent p95) or a fixed delay in milliseconds "
              "(0.5, 2, ...). Reports give hedges sent and won");
DEFINE_double(hedge_max_share, 0.05,
              "-hedge: hedges at most this share of the calls (0 to 1; HedgingPolicy::max_share)");
DEFINE_int32(handler_factor, 1,
             "rpc-bench's server: each Sleep takes this many times its sleep_micros, 1 to "
             "1000 (a slow server among fast ones, as scripts/benchmarks.sh --fleet makes)");
DEFINE_string(rpc_encryption, "disabled",
              "Kudu's --rpc_encryption, for the client and the in-process or -server_only "
              "server: disabled, optional (TLS when the peer can) or required (a peer "
              "without TLS is refused). A server makes a self-signed certificate. Default "
              "disabled, as Kudu's rpc-bench runs without -enable_encryption");
DEFINE_bool(rpc_encrypt_loopback_connections, false,
            "Kudu's flag: encrypt loopback connections too; otherwise TLS on loopback "
            "only authenticates and the calls stay in the clear");
DEFINE_bool(enable_encryption, false,
            "Kudu's rpc-bench flag: the same as --rpc_encryption=required "
            "--rpc_encrypt_loopback_connections");
DEFINE_string(rpc_authentication, "disabled",
              "Kudu's --rpc_authentication, for the client and the server: disabled (SASL "
              "PLAIN), optional (Kerberos when both sides have it) or required (Kerberos or "
              "nothing; a server needs --keytab_file)");
DEFINE_string(keytab_file, "",
              "Kudu's flag: the keytab of --principal; the server accepts tickets for it, "
              "and the client logs in from it. Empty: the client uses the ticket cache");
DEFINE_string(principal, "kudu/_HOST",
              "Kudu's flag: the Kerberos principal of --keytab_file (_HOST: this machine's "
              "fully qualified name)");
DEFINE_string(trusted_subnets, "",
              "Kudu's flag: for rpc-bench's server, the blocks (CIDR, comma-separated) whose "
              "clients may call without TLS or with SASL PLAIN; others need TLS and Kerberos, "
              "a certificate or a token. Empty: Kudu's default, the private, loopback and "
              "link-local blocks and this host's networks. 0.0.0.0/0,::/0 trusts everyone");
DEFINE_string(sasl_protocol_name, "kudu",
              "Kudu's flag: the service a client asks Kerberos for on the host it dials");
DEFINE_int32(rpc_service_queue_length, 0,
             "Kudu's flag: calls the server's service queue holds before it refuses more "
             "(ERROR_SERVER_TOO_BUSY); 0: as many as this run offers (at least 50), or for "
             "-server_only as many as -client_threads and -async_call_concurrency say");
DEFINE_bool(fail_on_refusal, false,
            "exit 1 if the server refused any call, for any reason (the report counts them "
            "by reason); refusals are reported apart from failures, which always fail the "
            "run");
DEFINE_bool(server_only, false,
            "only serve, on -listen, until SIGINT (shut down at once) or SIGTERM (drain: "
            "-drain_grace_ms)");
DEFINE_int32(drain_grace_ms, 10000,
             "-server_only: on SIGTERM the server drains (Messenger::Drain): new calls are "
             "refused ERROR_UNAVAILABLE as not run, those held finish and are answered, then it "
             "exits 0; at the latest this many milliseconds after the signal, 0 to 3600000");
DEFINE_string(register_at, "",
              "-server_only: register the address it listens on in etcd, "
              "etcd://HOST:PORT[,HOST:PORT]/PREFIX or etcds:// for TLS "
              "(MessengerBuilder::set_registry, a 5 s "
              "lease kept alive; SIGTERM's drain withdraws it first), so that clients on that "
              "target find it; empty: nowhere");
DEFINE_string(etcd_ca_file, "",
              "etcds:// targets (-register_at, -server_address): the CA file that signed etcd's "
              "certificate (MessengerBuilder::set_etcd_tls); empty: the system's CAs");
DEFINE_string(etcd_cert_file, "",
              "etcds:// targets: the certificate presented to an etcd that requires one "
              "(--client-cert-auth), with -etcd_key_file; empty: none");
DEFINE_string(etcd_key_file, "", "etcds:// targets: the key of -etcd_cert_file");
DEFINE_string(etcd_user, "",
              "etcds:// targets: the user of an etcd with authentication on, with "
              "-etcd_password_file (MessengerBuilder::set_etcd_credentials); empty: none");
DEFINE_string(etcd_password_file, "", "-etcd_user: the file whose first line is its password");
DEFINE_int32(etcd_watch_probe_ms, 5000,
             "etcd targets (-server_address): a watch silent this long asks its member for a "
             "read, and leaves a member that does not answer within 2 s for the next "
             "(MessengerBuilder::set_etcd_watch_probe); 0: off, up to 3600000");
DEFINE_bool(metrics, true,
            "count calls in the messengers' metrics; the server (in-process or -server_only) "
            "also serves /metrics, /rpcz, /connections and /healthz over HTTP on its port");
DEFINE_string(listen, "127.0.0.1:0", "address the in-process or -server_only server binds");
DEFINE_string(http_listen, "",
              "-server_only: serve the HTTP endpoints on this address alone (HOST:PORT or "
              "unix:PATH), not on the RPC port; empty: on the RPC port");
DEFINE_string(output, "text", "report format: text or json");
DEFINE_int32(spin_before_sleep_us, 50,
             "microseconds a thread about to sleep for the network polls first "
             "(MessengerBuilder::set_spin_before_sleep), 0 to 1000; 0: never");
DEFINE_bool(caller_reads, true,
            "a blocking caller reads its own answer when its call is the only one its "
            "connection awaits (MessengerBuilder::set_caller_reads)");
DEFINE_bool(worker_reads, true,
            "a server worker that answered a connection's last call waits on its socket for "
            "the next request (MessengerBuilder::set_worker_reads)");
DEFINE_double(warmup_seconds, 0, "seconds of calls before measuring starts");
DEFINE_double(target_rate, 0,
              "open loop: calls per second over all threads or loops; 0: "
              "closed loop");
DEFINE_string(arrivals, "uniform",
              "open loop (-target_rate or -rate_schedule): when calls start; uniform: "
              "equal gaps; poisson: exponential gaps (a Poisson process), from -seed");
DEFINE_uint64(seed, 1,
              "-arrivals=poisson: the seed of the gaps (std::mt19937_64; client thread i "
              "uses seed + i), so a run can be repeated");
DEFINE_int32(call_timeout_ms, 10000,
             "each call's timeout in milliseconds, 1 to 3600000 (Kudu's rpc-bench: 10 s); "
             "with -rate_schedule, its deadline counts from its scheduled start, and an "
             "answer after it is late, not goodput");
DEFINE_int32(handler_us, -1,
             "0 to 10000000: each call is Kudu's Sleep(sleep_micros = N), which the "
             "server spends as -handler says (Kudu's kudu-calc-server sleeps); -1: Add, or "
             "Echo with -payload_bytes");
DEFINE_string(handler, "burn",
              "rpc-bench's server (in-process or -server_only): how Sleep spends its "
              "sleep_micros; burn: on the CPU (its thread's CPU time); sleep: asleep");
DEFINE_bool(queue_deadline_order, true,
            "rpc-bench's server: its service queue runs the earliest deadline first and, "
            "when full, refuses the queued call of latest deadline "
            "(ServicePoolOptions::deadline_order); false: first in, first out");
DEFINE_bool(overload_control, true,
            "rpc-bench's server: its service queue sheds calls while they wait longer "
            "than -queue_delay_target_us (ServicePoolOptions::overload_control)");
DEFINE_bool(admit_by_patience, true,
            "rpc-bench's server, with -overload_control: a call is refused when the calls "
            "ahead of it hold more work than an eighth of its timeout (or the delay target) "
            "even before calls wait past the target (ServicePoolOptions::admit_by_patience)");
DEFINE_bool(admit_to_deadline, true,
            "rpc-bench's server, with -overload_control: until the queue is overloaded, a call "
            "is admitted whenever it can still be answered by its deadline; patience only "
            "once overloaded (ServicePoolOptions::admit_to_deadline; false: -admit_by_patience "
            "applies)");
DEFINE_int32(queue_delay_target_us, 5000,
             "rpc-bench's server: the queue delay overload control aims for, 1 to "
             "10000000 microseconds (ServicePoolOptions::queue_delay_target)");
DEFINE_string(rate_schedule, "",
              "overload mode: SECONDS:RATE,SECONDS:RATE,... phases of an open loop, each "
              "SECONDS long at RATE calls per second (e.g. 5:36000,10:180000,10:36000); "
              "timeouts and refusals are outcomes, not failures; reports goodput, "
              "refusals, timeouts and late answers, overall and per -window_ms");
DEFINE_int32(max_start_lag_us, 1000,
             "-rate_schedule: a call started more than this many microseconds after its "
             "scheduled time marks its window behind (the run invalid), 1 to 1000000");
DEFINE_int32(window_ms, 100,
             "-rate_schedule: the length of the report's time-series windows, 1 to 60000 "
             "ms");

DEFINE_int32(retry_attempts, 1,
             "client: attempts per call in all, the first included, 1 to 100; 1: never "
             "retried; N > 1: each call has a RetryPolicy of N attempts, so a call the "
             "server refuses (ERROR_SERVER_TOO_BUSY) is sent again after the policy's "
             "backoff (20 ms doubling to 2 s, full jitter), never past its deadline, within "
             "the retry budget (-retry_budget); the overload mode reports the attempts sent");
DEFINE_bool(retry_budget, true,
            "client: each client messenger caps its retries of calls the server refused "
            "as overloaded at 10% of the calls it started there over 10 s plus 10 a second "
            "(MessengerBuilder::set_retry_budget, on by default); false: every refused "
            "call is retried up to -retry_attempts");
DEFINE_bool(client_throttling, false,
            "client: Google SRE's adaptive throttling (MessengerBuilder::set_client_throttling, "
            "off by default): a call is refused on the client, never sent, with probability "
            "max(0, (requests - 2 x accepts) / (requests + 1)) over two minutes; the overload "
            "mode reports these calls as throttled, the other modes as refused");

namespace osprey::bench {

namespace {
// --rpc_encryption and --rpc_authentication, parsed by ValidateFlags.
RpcEncryption g_encryption = RpcEncryption::kDisabled;
RpcAuthentication g_authentication = RpcAuthentication::kDisabled;
std::vector<Phase> g_schedule;  // -rate_schedule

bool IsDefault(const char* flag) { return gflags::GetCommandLineFlagInfoOrDie(flag).is_default; }

// "5:36000,10:180000" into phases; exits 2 naming what is wrong.
std::vector<Phase> ParseSchedule(const std::string& text) {
  std::vector<Phase> phases;
  const std::string hint = " (-rate_schedule is SECONDS:RATE,SECONDS:RATE,...)";
  size_t pos = 0;
  double total = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    if (item.empty()) BadFlag("-rate_schedule: an empty phase (a comma too many?)" + hint);
    size_t colon = item.find(':');
    if (colon == std::string::npos) BadFlag("-rate_schedule: '" + item + "' has no ':'" + hint);
    auto number = [&](const std::string& s, const char* what) {
      char* end = nullptr;
      double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
        BadFlag("-rate_schedule: " + std::string(what) + " '" + s + "' in '" + item +
                "' is not a number" + hint);
      }
      return v;
    };
    Phase p{number(item.substr(0, colon), "SECONDS"), number(item.substr(colon + 1), "RATE")};
    if (!(p.seconds > 0) || p.seconds > 86400) {
      BadFlag("-rate_schedule: SECONDS must be above 0 and at most 86400, got '" + item + "'");
    }
    if (!(p.rate > 0) || p.rate > 10000000) {
      BadFlag("-rate_schedule: RATE must be above 0 and at most 10000000 calls/s, got '" + item +
              "'");
    }
    total += p.seconds;
    phases.push_back(p);
    if (phases.size() > 1000) BadFlag("-rate_schedule: more than 1000 phases");
    pos = comma + 1;
  }
  if (total > 86400) BadFlag("-rate_schedule: the phases add up to more than 86400 s");
  return phases;
}

}  // namespace

const std::vector<Phase>& RateSchedule() { return g_schedule; }

[[noreturn]] void BadFlag(const std::string& msg) {
  std::fprintf(stderr, "rpc-bench: %s\n", msg.c_str());
  std::exit(kExitBadFlags);
}

std::optional<HedgingPolicy> ParseHedging(const std::string& hedge, double max_share) {
  HedgingPolicy p;
  if (!(max_share >= 0 && max_share <= 1)) return std::nullopt;
  p.max_share = max_share;
  if (hedge == "off") return p;
  if (hedge == "p95") {
    p = HedgingPolicy::AtP95();
    p.max_share = max_share;
    return p;
  }
  char* end = nullptr;
  const double ms = std::strtod(hedge.c_str(), &end);
  if (hedge.empty() || end != hedge.c_str() + hedge.size() || !(ms >= 0 && ms <= 60000)) {
    return std::nullopt;
  }
  p = HedgingPolicy::After(MonoDelta::FromNanoseconds(static_cast<int64_t>(ms * 1e6)));
  p.max_share = max_share;
  return p;
}

RetryPolicy BenchRetryPolicy() {
  RetryPolicy p;
  p.max_attempts = FLAGS_retry_attempts;
  return p;
}

MessengerBuilder BenchMessengerBuilder(const std::string& name) {
  MessengerBuilder b(name);
  b.set_rpc_encryption(g_encryption)
      .set_rpc_encrypt_loopback(FLAGS_rpc_encrypt_loopback_connections)
      .set_metrics(FLAGS_metrics)
      .set_rpc_authentication(g_authentication)
      .set_keytab_file(FLAGS_keytab_file)
      .set_principal(FLAGS_principal)
      .set_sasl_protocol_name(FLAGS_sasl_protocol_name)
      .set_spin_before_sleep(MonoDelta::FromMicroseconds(FLAGS_spin_before_sleep_us))
      .set_caller_reads(FLAGS_caller_reads)
      .set_worker_reads(FLAGS_worker_reads)
      .set_etcd_tls(FLAGS_etcd_ca_file, FLAGS_etcd_cert_file, FLAGS_etcd_key_file)
      .set_etcd_credentials(FLAGS_etcd_user, FLAGS_etcd_password_file)
      .set_etcd_watch_probe(MonoDelta::FromMilliseconds(FLAGS_etcd_watch_probe_ms));
  if (!FLAGS_trusted_subnets.empty()) {
    std::vector<std::string> cidrs;
    std::stringstream list(FLAGS_trusted_subnets);
    for (std::string c; std::getline(list, c, ',');) {
      if (!c.empty()) cidrs.push_back(c);
    }
    b.set_trusted_subnets(std::move(cidrs));
  }
  return b;
}

std::string AskedEncryption() {
  std::string s = "rpc_encryption=" + FLAGS_rpc_encryption;
  if (FLAGS_rpc_encrypt_loopback_connections) s += ", loopback encrypted";
  return s;
}

namespace {

// -help's page: every flag of this file in a group, with a line of its own
// (the whole description is -helpfull's). name null: a group's title.
struct HelpLine {
  const char* name;
  const char* text;
};
constexpr HelpLine kHelp[] = {
    {nullptr, "Kudu's rpc-bench flags"},
    {"client_threads", "sync: client threads; async: client reactors"},
    {"async_call_concurrency", "async: calls in flight, over all reactors"},
    {"worker_threads", "server worker threads (0: run on the reactors)"},
    {"server_reactors", "server reactor threads"},
    {"run_seconds", "seconds to measure each mode"},
    {"enable_encryption", "encrypt every connection, loopback too"},
    {nullptr, "Kudu's server flags (rpc-bench's server, and the client's security)"},
    {"rpc_service_queue_length", "the service queue (0: sized to the run's calls)"},
    {"rpc_encryption", "disabled, optional or required"},
    {"rpc_encrypt_loopback_connections", "encrypt loopback connections too"},
    {"rpc_authentication", "disabled, optional or required (Kerberos)"},
    {"keytab_file", "the keytab of -principal"},
    {"principal", "the Kerberos principal of -keytab_file"},
    {"sasl_protocol_name", "the service a client asks Kerberos for"},
    {"trusted_subnets", "clients that may skip TLS or use SASL PLAIN"},
    {nullptr, "The calls"},
    {"mode", "sync, async or both"},
    {"payload_bytes", "0: Add; N: Echo of N bytes each way"},
    {"handler_us", "N >= 0: Kudu's Sleep(N microseconds) instead"},
    {"call_timeout_ms", "each call's timeout"},
    {"warmup_seconds", "seconds of calls before measuring"},
    {"retry_attempts", "attempts per call, the first included"},
    {"retry_budget", "cap retries at 10% of the calls (client)"},
    {"client_throttling", "adaptive throttling on the client"},
    {"spin_before_sleep_us", "poll this long before sleeping (0 to 1000)"},
    {"caller_reads", "a blocking caller reads its own answer"},
    {nullptr, "Open loop and overload"},
    {"target_rate", "open loop: calls per second (0: closed loop)"},
    {"rate_schedule", "overload mode: SECONDS:RATE,SECONDS:RATE,..."},
    {"arrivals", "open loop: uniform or poisson"},
    {"seed", "-arrivals=poisson: the seed"},
    {"window_ms", "-rate_schedule: the report's windows"},
    {"max_start_lag_us", "-rate_schedule: a later start voids its window"},
    {nullptr, "The server"},
    {"server_address", "HOST:PORT, or a set: H:P,H:P,... or dns:NAME:PORT"},
    {"lb", "a set: p2c, round_robin or hash"},
    {"hedge", "a set: hedged calls: off, p95 or a delay in ms"},
    {"hedge_max_share", "-hedge: at most this share of the calls (0.05)"},
    {"server_only", "only serve, on -listen, until SIGINT or SIGTERM"},
    {"drain_grace_ms", "-server_only: SIGTERM drains for at most this long"},
    {"register_at", "-server_only: register in etcd://HOST:PORT/PREFIX"},
    {"etcd_ca_file", "etcds:// targets: the CA of etcd's certificate"},
    {"etcd_cert_file", "etcds:// targets: a client certificate for etcd"},
    {"etcd_key_file", "etcds:// targets: its key"},
    {"etcd_user", "etcds:// targets: a user of etcd's authentication"},
    {"etcd_password_file", "-etcd_user: its password's file"},
    {"etcd_watch_probe_ms", "etcd targets: probe a silent member (0: off)"},
    {"listen", "the address rpc-bench's server binds"},
    {"http_listen", "-server_only: the HTTP endpoints on this address"},
    {"metrics", "count calls; serve /metrics, /rpcz and more"},
    {"handler", "Sleep: burn (CPU) or sleep"},
    {"handler_factor", "Sleep takes this many times as long"},
    {"worker_reads", "a worker waits on its socket for the next call"},
    {"queue_deadline_order", "the queue runs the earliest deadline first"},
    {"overload_control", "the queue sheds calls past the delay target"},
    {"admit_by_patience", "refuse a call the work ahead would outlast"},
    {"admit_to_deadline", "until overloaded, queue what meets its deadline"},
    {"queue_delay_target_us", "the overload control's queue delay target"},
    {nullptr, "The report"},
    {"output", "text or json"},
    {"fail_on_refusal", "exit 1 if the server refused any call"},
};

bool HelpFlag(const char* name) {
  std::string v;
  return gflags::GetCommandLineOption(name, &v) && v == "true";
}

// "  -name=default", padded, then `text`.
std::string HelpEntry(const gflags::CommandLineFlagInfo& f, const std::string& text) {
  std::string entry =
      "  -" + f.name + "=" + (f.type == "string" ? "\"" + f.default_value + "\"" : f.default_value);
  entry.resize(std::max<size_t>(entry.size() + 2, 38), ' ');
  return entry + text + "\n";
}

}  // namespace

bool HandleHelpFlags(const char* argv0) {
  if (HelpFlag("helpfull")) {
    gflags::ShowUsageWithFlags(argv0);
    return true;
  }
  if (!HelpFlag("help")) return false;
  // This file's flags, by name: gflags records where each was defined.
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  std::map<std::string, const gflags::CommandLineFlagInfo*> ours;
  for (const auto& f : all) {
    if (f.filename == __FILE__) ours[f.name] = &f;
  }
  std::string out =
      "rpc-bench: calls per second and their CPU cost over Kudu's RPC protocol, with Kudu's\n"
      "rpc-bench flags and report. Flags take one dash or two; -flag=value or -flag value.\n";
  for (const HelpLine& l : kHelp) {
    if (l.name == nullptr) {
      out += std::string("\n") + l.text + ":\n";
      continue;
    }
    auto it = ours.find(l.name);
    CHECK(it != ours.end()) << "-help names flag '" << l.name << "', which flags.cc lacks";
    out += HelpEntry(*it->second, l.text);
    ours.erase(it);
  }
  // A flag added without a line above still shows, with its description.
  if (!ours.empty()) out += "\nOther:\n";
  for (const auto& [name, f] : ours) out += HelpEntry(*f, f->description);
  out += "\n-helpfull: every flag in full, the logging library's (glog, gflags) too.\n";
  std::fputs(out.c_str(), stdout);
  return true;
}

void PrecheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body.substr(0, body.find('='));
    bool has_value = body.find('=') != std::string::npos;
    gflags::CommandLineFlagInfo info;
    if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) {
      // "-nofoo" negates bool flag "foo".
      if (name.rfind("no", 0) == 0 &&
          gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) && info.type == "bool" &&
          !has_value) {
        continue;
      }
      BadFlag("unknown flag '" + arg + "'; see -help");
    }
    std::string value;
    if (has_value) {
      value = body.substr(body.find('=') + 1);
    } else if (info.type == "bool") {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      BadFlag("flag '" + arg + "' needs a value");
    }
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      BadFlag("flag '" + arg + "': '" + value + "' is not a valid " + info.type);
    }
  }
}

void ValidateFlags() {
  if (FLAGS_client_threads < 1 || FLAGS_client_threads > 4096) {
    BadFlag("-client_threads must be from 1 to 4096, got " + std::to_string(FLAGS_client_threads));
  }
  if (FLAGS_async_call_concurrency < 1 || FLAGS_async_call_concurrency > 1000000) {
    BadFlag("-async_call_concurrency must be from 1 to 1000000, got " +
            std::to_string(FLAGS_async_call_concurrency));
  }
  if (FLAGS_worker_threads < 0 || FLAGS_worker_threads > 4096) {
    BadFlag("-worker_threads must be from 0 to 4096, got " + std::to_string(FLAGS_worker_threads));
  }
  if (FLAGS_rpc_service_queue_length < 0 || FLAGS_rpc_service_queue_length > 1000000) {
    BadFlag("--rpc_service_queue_length must be from 0 (sized to the run) to 1000000, got " +
            std::to_string(FLAGS_rpc_service_queue_length));
  }
  if (FLAGS_server_reactors < 1 || FLAGS_server_reactors > 1024) {
    BadFlag("-server_reactors must be from 1 to 1024, got " +
            std::to_string(FLAGS_server_reactors));
  }
  if (!(FLAGS_run_seconds > 0) || FLAGS_run_seconds > 86400) {
    BadFlag("-run_seconds must be above 0 and at most 86400, got " + Num(FLAGS_run_seconds));
  }
  if (FLAGS_spin_before_sleep_us < 0 || FLAGS_spin_before_sleep_us > 1000) {
    BadFlag("-spin_before_sleep_us must be from 0 to 1000, got " +
            std::to_string(FLAGS_spin_before_sleep_us));
  }
  if (!(FLAGS_warmup_seconds >= 0) || FLAGS_warmup_seconds > 86400) {
    BadFlag("-warmup_seconds must be from 0 to 86400, got " + Num(FLAGS_warmup_seconds));
  }
  if (!(FLAGS_target_rate >= 0) || std::isinf(FLAGS_target_rate)) {
    BadFlag("-target_rate must be 0 (closed loop) or a positive rate, got " +
            Num(FLAGS_target_rate));
  }
  if (FLAGS_payload_bytes < 0 || FLAGS_payload_bytes > 64 * 1024 * 1024) {
    BadFlag("-payload_bytes must be from 0 to 67108864, got " +
            std::to_string(FLAGS_payload_bytes));
  }
  if (FLAGS_mode != "sync" && FLAGS_mode != "async" && FLAGS_mode != "both") {
    BadFlag("-mode must be sync, async or both, got '" + FLAGS_mode + "'");
  }
  if (FLAGS_arrivals != "uniform" && FLAGS_arrivals != "poisson") {
    BadFlag("-arrivals must be uniform or poisson, got '" + FLAGS_arrivals + "'");
  }
  if (FLAGS_call_timeout_ms < 1 || FLAGS_call_timeout_ms > 3600000) {
    BadFlag("-call_timeout_ms must be from 1 to 3600000, got " +
            std::to_string(FLAGS_call_timeout_ms));
  }
  if (FLAGS_handler_us < -1 || FLAGS_handler_us > 10000000) {
    BadFlag("-handler_us must be -1 (Add or Echo) or from 0 to 10000000 (Sleep), got " +
            std::to_string(FLAGS_handler_us));
  }
  if (FLAGS_handler_us >= 0 && FLAGS_payload_bytes > 0) {
    BadFlag(
        "-handler_us makes every call Sleep, which carries no payload; it takes no "
        "-payload_bytes");
  }
  if (FLAGS_handler_factor < 1 || FLAGS_handler_factor > 1000) {
    BadFlag("-handler_factor must be from 1 to 1000, got " + std::to_string(FLAGS_handler_factor));
  }
  if (!ParseLoadBalancing(FLAGS_lb)) {
    BadFlag("-lb must be p2c, round_robin or hash, got '" + FLAGS_lb + "'");
  }
  if (!IsDefault("lb") && !ServerSet::IsSetTarget(FLAGS_server_address)) {
    BadFlag(
        "-lb balances the calls over a set of servers: give -server_address "
        "HOST:PORT,HOST:PORT,... or dns:NAME:PORT");
  }
  if (!ParseHedging(FLAGS_hedge, FLAGS_hedge_max_share)) {
    BadFlag(
        "-hedge must be off, p95 or a delay in milliseconds (0 to 60000), and "
        "-hedge_max_share from 0 to 1; got -hedge=" +
        FLAGS_hedge + " -hedge_max_share=" + std::to_string(FLAGS_hedge_max_share));
  }
  if ((!IsDefault("hedge") || !IsDefault("hedge_max_share")) &&
      !ServerSet::IsSetTarget(FLAGS_server_address)) {
    BadFlag(
        "-hedge sends a second attempt to another server of a set: give -server_address "
        "HOST:PORT,HOST:PORT,... or dns:NAME:PORT");
  }
  if (FLAGS_handler != "burn" && FLAGS_handler != "sleep") {
    BadFlag("-handler must be burn or sleep, got '" + FLAGS_handler + "'");
  }
  if (FLAGS_queue_delay_target_us < 1 || FLAGS_queue_delay_target_us > 10000000) {
    BadFlag("-queue_delay_target_us must be from 1 to 10000000, got " +
            std::to_string(FLAGS_queue_delay_target_us));
  }
  if (FLAGS_max_start_lag_us < 1 || FLAGS_max_start_lag_us > 1000000) {
    BadFlag("-max_start_lag_us must be from 1 to 1000000, got " +
            std::to_string(FLAGS_max_start_lag_us));
  }
  if (FLAGS_window_ms < 1 || FLAGS_window_ms > 60000) {
    BadFlag("-window_ms must be from 1 to 60000, got " + std::to_string(FLAGS_window_ms));
  }
  if (FLAGS_retry_attempts < 1 || FLAGS_retry_attempts > 100) {
    BadFlag("-retry_attempts must be from 1 (no retries) to 100, got " +
            std::to_string(FLAGS_retry_attempts));
  }
  if (FLAGS_drain_grace_ms < 0 || FLAGS_drain_grace_ms > 3600000) {
    BadFlag("-drain_grace_ms must be from 0 to 3600000, got " +
            std::to_string(FLAGS_drain_grace_ms));
  }
  if (FLAGS_etcd_watch_probe_ms < 0 || FLAGS_etcd_watch_probe_ms > 3600000) {
    BadFlag("-etcd_watch_probe_ms must be from 0 (off) to 3600000, got " +
            std::to_string(FLAGS_etcd_watch_probe_ms));
  }
  if (!FLAGS_server_only && !FLAGS_register_at.empty()) {
    BadFlag("-register_at registers a -server_only server; it takes no effect otherwise");
  }
  if (!FLAGS_server_only && !IsDefault("drain_grace_ms")) {
    BadFlag("-drain_grace_ms is how long a -server_only server drains on SIGTERM");
  }
  if (FLAGS_server_only) {
    for (const char* f : {"retry_attempts", "retry_budget", "client_throttling"}) {
      if (!IsDefault(f)) {
        BadFlag("-" + std::string(f) + " sets the client's calls; -server_only makes none");
      }
    }
  }
  if (!FLAGS_server_address.empty()) {
    for (const char* f : {"handler", "handler_factor", "queue_deadline_order", "overload_control",
                          "admit_by_patience", "admit_to_deadline", "queue_delay_target_us"}) {
      if (!IsDefault(f)) {
        BadFlag("-" + std::string(f) +
                " sets rpc-bench's own server; with -server_address set it on the server you "
                "point at");
      }
    }
  }
  g_schedule.clear();
  if (!FLAGS_rate_schedule.empty()) {
    if (FLAGS_server_only) BadFlag("-rate_schedule is the client's load; -server_only takes none");
    if (FLAGS_target_rate > 0) {
      BadFlag("-rate_schedule and -target_rate both set the open loop's rate; give one");
    }
    if (!IsDefault("mode")) {
      BadFlag(
          "-rate_schedule runs the overload mode (async calls from open-loop threads); it "
          "takes no -mode");
    }
    if (FLAGS_warmup_seconds > 0) {
      BadFlag(
          "-rate_schedule measures every phase; for a warm-up, begin with a phase of its "
          "own (it takes no -warmup_seconds)");
    }
    g_schedule = ParseSchedule(FLAGS_rate_schedule);
    double windows = Arrivals::TotalNanos(g_schedule) / 1e6 / FLAGS_window_ms;
    if (windows > 1000000) {
      BadFlag("-rate_schedule over -window_ms makes more than 1000000 windows; raise -window_ms");
    }
    // Two client messengers by default: enough threads to start the calls
    // on time, few enough to leave the client's core to them.
    if (IsDefault("client_threads")) FLAGS_client_threads = 2;
  } else {
    if (FLAGS_arrivals != "uniform" && !(FLAGS_target_rate > 0)) {
      BadFlag("-arrivals applies to the open loop: give -target_rate or -rate_schedule");
    }
    if (!IsDefault("window_ms")) BadFlag("-window_ms is for -rate_schedule's time series");
    if (!IsDefault("max_start_lag_us")) BadFlag("-max_start_lag_us is for -rate_schedule");
  }
  if (FLAGS_output != "text" && FLAGS_output != "json") {
    BadFlag("-output must be text or json, got '" + FLAGS_output + "'");
  }
  if (FLAGS_server_only && !FLAGS_server_address.empty()) {
    BadFlag("-server_only serves on -listen; it takes no -server_address");
  }
  if (!FLAGS_server_address.empty() && FLAGS_rpc_service_queue_length != 0) {
    BadFlag(
        "--rpc_service_queue_length sizes the queue of rpc-bench's own server; with "
        "-server_address set it on the server you point at");
  }
  if (!FLAGS_http_listen.empty() && !(FLAGS_server_only && FLAGS_metrics)) {
    BadFlag("-http_listen serves the metrics of -server_only; it needs -server_only and -metrics");
  }
  if (FLAGS_enable_encryption) {
    // Kudu's rpc-bench spelling; a contradiction is an error, not a guess.
    if (!gflags::GetCommandLineFlagInfoOrDie("rpc_encryption").is_default &&
        FLAGS_rpc_encryption != "required") {
      BadFlag(
          "-enable_encryption means --rpc_encryption=required; it contradicts "
          "--rpc_encryption=" +
          FLAGS_rpc_encryption);
    }
    if (!gflags::GetCommandLineFlagInfoOrDie("rpc_encrypt_loopback_connections").is_default &&
        !FLAGS_rpc_encrypt_loopback_connections) {
      BadFlag(
          "-enable_encryption encrypts loopback; it contradicts "
          "--rpc_encrypt_loopback_connections=false");
    }
    FLAGS_rpc_encryption = "required";
    FLAGS_rpc_encrypt_loopback_connections = true;
  }
  if (FLAGS_rpc_encryption == "disabled") {
    g_encryption = RpcEncryption::kDisabled;
  } else if (FLAGS_rpc_encryption == "optional") {
    g_encryption = RpcEncryption::kOptional;
  } else if (FLAGS_rpc_encryption == "required") {
    g_encryption = RpcEncryption::kRequired;
  } else {
    BadFlag("--rpc_encryption must be disabled, optional or required, got '" +
            FLAGS_rpc_encryption + "'");
  }
  if (FLAGS_rpc_authentication == "disabled") {
    g_authentication = RpcAuthentication::kDisabled;
  } else if (FLAGS_rpc_authentication == "optional") {
    g_authentication = RpcAuthentication::kOptional;
  } else if (FLAGS_rpc_authentication == "required") {
    g_authentication = RpcAuthentication::kRequired;
  } else {
    BadFlag("--rpc_authentication must be disabled, optional or required, got '" +
            FLAGS_rpc_authentication + "'");
  }
  if (!FLAGS_keytab_file.empty() && g_authentication == RpcAuthentication::kDisabled) {
    BadFlag(
        "--keytab_file is set but --rpc_authentication is disabled: set it to optional or "
        "required");
  }
}

}  // namespace osprey::bench
