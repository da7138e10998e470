// osprey: calls any KRPC server (Osprey's or Apache Kudu's) from the
// command line, JSON in and JSON out, with the method's types from .proto
// files or from the server's reflection.
#include <glog/logging.h>

#include <CLI/CLI.hpp>
#include <string>

#include "commands.h"

namespace {

using osprey::cli::CallFlags;
using osprey::cli::ConnectionFlags;
using osprey::cli::SourceFlags;

const char kExitCodes[] =
    "Exit codes: 0 the call succeeded; 1 it failed, or the server could not be asked "
    "(a server error, a refused negotiation, a timeout, an unreachable address, a service or "
    "method the server's reflection does not know); 2 the command line or what it names is "
    "wrong (a flag, a file, a .proto that does not parse or lacks the method, a request that "
    "does not match its message).";

void AddConnectionFlags(CLI::App* app, ConnectionFlags* f) {
  const CLI::Validator positive(
      [](std::string& value) -> std::string {
        try {
          size_t used = 0;
          double v = std::stod(value, &used);
          if (used == value.size() && v > 0) return "";
        } catch (const std::exception&) {
        }
        return "must be a number of seconds above 0, not " + value;
      },
      "SECONDS");
  app->add_option("--timeout", f->timeout_seconds, "seconds each call may take")
      ->check(positive)
      ->capture_default_str();
  app->add_option("--rpc_encryption", f->rpc_encryption,
                  "TLS, as Kudu's flag: disabled, optional (TLS when the server offers it) or "
                  "required")
      ->check(CLI::IsMember({"disabled", "optional", "required"}))
      ->capture_default_str();
  app->add_flag("--rpc_encrypt_loopback_connections", f->rpc_encrypt_loopback_connections,
                "encrypt on loopback too (otherwise TLS there only authenticates; always on "
                "with --tls_ca_file)");
  app->add_option("--tls_ca_file", f->tls_ca_file,
                  "PEM CA bundle: the server's certificate must be signed by it and name the "
                  "host dialled (without it the certificate is not checked); loopback is then "
                  "encrypted too")
      ->check(CLI::ExistingFile);
  app->add_option("--user", f->user, "the user name to authenticate as (default: yours)");
}

void AddSourceFlags(CLI::App* app, SourceFlags* f) {
  app->add_option("--proto", f->protos,
                  "a .proto file defining the service (repeatable); without it, the server's "
                  "reflection")
      ->check(CLI::ExistingFile);
  app->add_option("-I,--import_path", f->import_dirs,
                  "a directory the .proto files' imports are relative to (repeatable; default: "
                  "the current directory)")
      ->check(CLI::ExistingDirectory);
}

int Main(int argc, char** argv) {
  CLI::App app("osprey: call any KRPC server, Osprey's or Apache Kudu's, JSON in and JSON out",
               "osprey");
  app.footer(kExitCodes);
  app.set_version_flag("--version", "osprey " OSPREY_VERSION);
  app.require_subcommand(1);

  ConnectionFlags connection;
  SourceFlags source;
  CallFlags call;
  std::string address, symbol;

  CLI::App* call_cmd = app.add_subcommand(
      "call", "call SERVICE.METHOD once (or --repeat times) and print the response");
  call_cmd->add_option("address", call.address, "HOST:PORT, or unix:/path")->required();
  call_cmd->add_option("method", call.method, "SERVICE.METHOD, fully qualified")->required();
  call_cmd->add_option("request", call.request,
                       "the request in JSON (protobuf's mapping); default: empty, {}");
  call_cmd->add_option("-d,--data", call.data,
                       "the request, or @FILE to read it from a file, @- from standard input");
  call_cmd
      ->add_option("--sidecar", call.sidecars,
                   "send FILE as a sidecar (repeatable; the first is index 0, which the "
                   "request names)")
      ->check(CLI::ExistingFile);
  call_cmd->add_option("--save_sidecars", call.save_sidecars,
                       "write the response's sidecars (at most 100) to DIR/sidecar-0, "
                       "DIR/sidecar-1, ...; DIR must be yours, not a symbolic link, and not "
                       "writable by others");
  call_cmd
      ->add_option("--repeat", call.repeat,
                   "make the call N times, one after another, and print a latency summary")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  call_cmd
      ->add_option("--format", call.format,
                   "json (protobuf's JSON mapping) or text (protobuf's text format), for "
                   "the request and the response")
      ->check(CLI::IsMember({"json", "text"}))
      ->capture_default_str();
  AddSourceFlags(call_cmd, &source);
  AddConnectionFlags(call_cmd, &connection);
  call_cmd->footer(kExitCodes);

  CLI::App* list_cmd =
      app.add_subcommand("list", "print the services and their methods, as .proto text");
  list_cmd->add_option("address", address, "HOST:PORT, or unix:/path")->required();
  AddSourceFlags(list_cmd, &source);
  AddConnectionFlags(list_cmd, &connection);
  list_cmd->footer(kExitCodes);

  CLI::App* describe_cmd = app.add_subcommand(
      "describe", "print the definition of a service, method, message or enum, as .proto text");
  describe_cmd->add_option("address", address, "HOST:PORT, or unix:/path")->required();
  describe_cmd->add_option("symbol", symbol, "a fully qualified name")->required();
  AddSourceFlags(describe_cmd, &source);
  AddConnectionFlags(describe_cmd, &connection);
  describe_cmd->footer(kExitCodes);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // prints the help, the version, or the error
    return rc == 0 ? osprey::cli::kExitOk : osprey::cli::kExitUsage;
  }
  if (call_cmd->parsed()) return osprey::cli::RunCall(connection, source, call);
  if (list_cmd->parsed()) return osprey::cli::RunList(connection, source, address);
  return osprey::cli::RunDescribe(connection, source, address, symbol);
}

}  // namespace

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 2;  // the library's warnings are not the user's concern here
  google::InitGoogleLogging(argv[0]);
  return Main(argc, argv);
}
