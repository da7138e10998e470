// The osprey command's subcommands, apart from their command line
// (osprey_main.cc parses it). Each prints what it found on stdout and any
// failure on stderr, and returns the process's exit code.
#pragma once

#include <string>
#include <vector>

namespace osprey::cli {

// Exit codes, as `osprey --help` documents them.
enum ExitCode : int {
  kExitOk = 0,
  // The call failed, or the server could not be asked: an error the
  // server or the network gave (unknown service from reflection, a server
  // error, a refused negotiation, a timeout, an unreachable address).
  kExitFailed = 1,
  // Wrong before anything was sent: the command line, a file it names, a
  // .proto that does not parse or lacks the method, a request that does
  // not match its message.
  kExitUsage = 2,
};

struct ConnectionFlags {
  std::string rpc_encryption = "disabled";
  bool rpc_encrypt_loopback_connections = false;
  std::string tls_ca_file;
  std::string user;
  double timeout_seconds = 10;
};

// Where the services' definitions come from: `protos` if any, else the
// server's reflection.
struct SourceFlags {
  std::vector<std::string> protos;
  std::vector<std::string> import_dirs;
};

struct CallFlags {
  std::string address;
  std::string method;   // SERVICE.METHOD
  std::string request;  // the positional argument
  std::string data;     // -d: the request, "@FILE", or "@-" for stdin
  std::vector<std::string> sidecars;
  std::string save_sidecars;  // a directory
  int repeat = 1;
  std::string format = "json";
};

int RunCall(const ConnectionFlags& connection, const SourceFlags& source, const CallFlags& call);
int RunList(const ConnectionFlags& connection, const SourceFlags& source,
            const std::string& address);
int RunDescribe(const ConnectionFlags& connection, const SourceFlags& source,
                const std::string& address, const std::string& symbol);

}  // namespace osprey::cli
