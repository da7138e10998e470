// A tiny server process for the peer-loss, cross-host and osprey CLI
// tests: a Messenger serving CalculatorService on 127.0.0.1:<port>
// (argv[1]; 0 picks a free port), or on argv[1] itself when it is an
// address (198.18.0.1:7050). After it, "--reflection" turns server
// reflection on, "--tls CERT KEY" requires TLS with that certificate
// ("--tls-loopback-authentication-only" then lets loopback clients ask for
// TLS that only authenticates), "--http" serves the HTTP pages on the
// RPC port even then,
// "--drain-on-sigterm MS" makes SIGTERM drain it (Messenger::Drain, that
// grace) and exit 0, and "--sleep-factor F" makes each Sleep call F times
// as long (a slow server), "--register etcd://HOST:PORT/PREFIX" registers
// it there (MessengerBuilder::set_registry) with "--register-ttl S"
// seconds of lease (5 by default). It prints "listening on <address>" on stdout
// once ready, then sleeps until killed.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rpc_test_util.h"

int main(int argc, char** argv) {
  auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s <port>|<host:port> [--reflection] [--tls CERT KEY] "
                 "[--tls-loopback-authentication-only] [--http] [--drain-on-sigterm MS] "
                 "[--sleep-factor F] [--register etcd://HOST:PORT/PREFIX] "
                 "[--register-ttl S]\n",
                 argv[0]);
    return 2;
  };
  if (argc < 2) return usage();
  osprey::MessengerBuilder builder("test-server");
  int drain_ms = -1;
  uint32_t sleep_factor = 1;
  std::string registry;
  int registry_ttl_s = 5;
  bool loopback_authentication_only = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reflection") == 0) {
      builder.set_reflection(true);
    } else if (std::strcmp(argv[i], "--tls") == 0 && i + 2 < argc) {
      builder.set_rpc_encryption(osprey::RpcEncryption::kRequired)
          .set_rpc_encrypt_loopback(true)
          .set_tls_certificate_files(argv[i + 1], argv[i + 2]);
      i += 2;
    } else if (std::strcmp(argv[i], "--tls-loopback-authentication-only") == 0) {
      // Lets a client on loopback ask for TLS that authenticates without
      // encrypting (a server that does not encrypt loopback itself), so a
      // test can see which of the two a client asked for.
      loopback_authentication_only = true;
    } else if (std::strcmp(argv[i], "--http") == 0) {
      builder.set_http_endpoints(true).set_http_on_rpc_port(true);
    } else if (std::strcmp(argv[i], "--drain-on-sigterm") == 0 && i + 1 < argc) {
      drain_ms = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--register") == 0 && i + 1 < argc) {
      registry = argv[++i];
    } else if (std::strcmp(argv[i], "--register-ttl") == 0 && i + 1 < argc) {
      registry_ttl_s = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--sleep-factor") == 0 && i + 1 < argc) {
      sleep_factor = static_cast<uint32_t>(std::atoi(argv[++i]));
    } else {
      return usage();
    }
  }
  if (loopback_authentication_only) builder.set_rpc_encrypt_loopback(false);
  if (!registry.empty()) {
    builder.set_registry(registry, osprey::MonoDelta::FromSeconds(registry_ttl_s));
  }
  osprey::Sockaddr bind = osprey::Sockaddr::Loopback(static_cast<uint16_t>(std::atoi(argv[1])));
  osprey::Status s;
  if (std::strchr(argv[1], ':') != nullptr) s = osprey::Sockaddr::Parse(argv[1], &bind);
  // SIGTERM is taken by sigwait below, in this thread: blocked before any
  // other thread starts, so none of them takes it instead.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  if (drain_ms >= 0) pthread_sigmask(SIG_BLOCK, &term, nullptr);
  osprey::rpc_test::TestServer server;
  if (s.ok()) s = server.Start(1, osprey::ServicePoolOptions(), builder, bind);
  if (s.ok()) server.service->sleep_factor = sleep_factor;
  if (!s.ok()) {
    std::fprintf(stderr, "test_server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", server.address.ToString().c_str());
  std::fflush(stdout);
  if (drain_ms >= 0) {
    int sig = 0;
    while (sigwait(&term, &sig) != 0 || sig != SIGTERM) {
    }
    server.messenger->Drain(osprey::MonoDelta::FromMilliseconds(drain_ms));
    std::fprintf(stderr, "test_server: drained\n");
    return 0;
  }
  while (true) pause();
}
