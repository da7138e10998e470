// A tiny server process for the peer-loss and cross-host tests: a Messenger
// serving CalculatorService on 127.0.0.1:<port> (argv[1]; 0 picks a free
// port), or on argv[1] itself when it is an address (198.18.0.1:7050);
// with "--reflection" after it, with server reflection on (the osprey CLI's
// tests). It prints "listening on <address>" on stdout once ready, then
// sleeps until killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rpc_test_util.h"

int main(int argc, char** argv) {
  const bool reflection = argc == 3 && std::strcmp(argv[2], "--reflection") == 0;
  if (argc != 2 && !reflection) {
    std::fprintf(stderr, "usage: %s <port>|<host:port> [--reflection]\n", argv[0]);
    return 2;
  }
  osprey::Sockaddr bind = osprey::Sockaddr::Loopback(static_cast<uint16_t>(std::atoi(argv[1])));
  osprey::Status s;
  if (std::strchr(argv[1], ':') != nullptr) s = osprey::Sockaddr::Parse(argv[1], &bind);
  osprey::rpc_test::TestServer server;
  if (s.ok()) {
    s = server.Start(1, osprey::ServicePoolOptions(), osprey::MessengerBuilder("test-server").set_reflection(reflection),
                     bind);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "test_server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", server.address.ToString().c_str());
  std::fflush(stdout);
  while (true) pause();
}
