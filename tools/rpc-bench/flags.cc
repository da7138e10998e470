#include "flags.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "report.h"

DEFINE_int32(client_threads, 16, "sync: client threads; async: client reactors (Messengers)");
DEFINE_int32(async_call_concurrency, 60, "async: calls in flight at once, over all reactors");
DEFINE_int32(worker_threads, 1, "server service-pool worker threads (0: run on reactors)");
DEFINE_int32(server_reactors, 4, "server reactor threads");
DEFINE_double(run_seconds, 1, "seconds to measure each mode");
DEFINE_string(mode, "both", "sync, async or both (sync first)");
DEFINE_int32(payload_bytes, 0, "0: the Add call; N > 0: Echo of N bytes each way");
DEFINE_string(server_address, "",
              "HOST:PORT of a running server (ours or Kudu's); empty: "
              "run a server in this process");
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
DEFINE_string(sasl_protocol_name, "kudu",
              "Kudu's flag: the service a client asks Kerberos for on the host it dials");
DEFINE_int32(rpc_service_queue_length, 0,
             "Kudu's flag: calls the server's service queue holds before it refuses more "
             "(ERROR_SERVER_TOO_BUSY); 0: as many as this run offers (at least 50), or for "
             "-server_only as many as -client_threads and -async_call_concurrency say");
DEFINE_bool(fail_on_refusal, false,
            "exit 1 if the server refused any call because its queue was full; refusals are "
            "reported apart from failures, which always fail the run");
DEFINE_bool(server_only, false, "only serve, on -listen, until SIGINT or SIGTERM");
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

namespace osprey::bench {

namespace {
// --rpc_encryption and --rpc_authentication, parsed by ValidateFlags.
RpcEncryption g_encryption = RpcEncryption::kDisabled;
RpcAuthentication g_authentication = RpcAuthentication::kDisabled;

}  // namespace

[[noreturn]] void BadFlag(const std::string& msg) {
  std::fprintf(stderr, "rpc-bench: %s\n", msg.c_str());
  std::exit(kExitBadFlags);
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
      .set_worker_reads(FLAGS_worker_reads);
  return b;
}

std::string AskedEncryption() {
  std::string s = "rpc_encryption=" + FLAGS_rpc_encryption;
  if (FLAGS_rpc_encrypt_loopback_connections) s += ", loopback encrypted";
  return s;
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
