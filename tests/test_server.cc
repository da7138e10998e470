// A tiny server process for the peer-loss, cross-host and osprey CLI
// tests: a Messenger serving CalculatorService on 127.0.0.1:<port>
// (argv[1]; 0 picks a free port), or on argv[1] itself when it is an
// address (198.18.0.1:7050). After it, "--reflection" turns server
// reflection on, and "--tls CERT KEY" requires TLS with that certificate.
// It prints "listening on <address>" on stdout once ready, then sleeps
// until killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rpc_test_util.h"

int main(int argc, char** argv) {
  auto usage = [&] {
    std::fprintf(stderr, "usage: %s <port>|<host:port> [--reflection] [--tls CERT KEY]\n", argv[0]);
    return 2;
  };
  if (argc < 2) return usage();
  osprey::MessengerBuilder builder("test-server");
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reflection") == 0) {
      builder.set_reflection(true);
    } else if (std::strcmp(argv[i], "--tls") == 0 && i + 2 < argc) {
      builder.set_rpc_encryption(osprey::RpcEncryption::kRequired)
          .set_rpc_encrypt_loopback(true)
          .set_tls_certificate_files(argv[i + 1], argv[i + 2]);
      i += 2;
    } else {
      return usage();
    }
  }
  osprey::Sockaddr bind = osprey::Sockaddr::Loopback(static_cast<uint16_t>(std::atoi(argv[1])));
  osprey::Status s;
  if (std::strchr(argv[1], ':') != nullptr) s = osprey::Sockaddr::Parse(argv[1], &bind);
  osprey::rpc_test::TestServer server;
  if (s.ok()) s = server.Start(1, osprey::ServicePoolOptions(), builder, bind);
  if (!s.ok()) {
    std::fprintf(stderr, "test_server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", server.address.ToString().c_str());
  std::fflush(stdout);
  while (true) pause();
}
