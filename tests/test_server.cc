// A tiny server process for the peer-loss tests: a Messenger serving
// CalculatorService on 127.0.0.1:<port> (argv[1]; 0 picks a free port). It
// prints "listening on <host:port>" on stdout once ready, then sleeps until
// killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "rpc_test_util.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <port>\n", argv[0]);
    return 2;
  }
  int port = std::atoi(argv[1]);
  osprey::rpc_test::TestServer server;
  osprey::Status s =
      server.Start(1, osprey::ServicePoolOptions(), osprey::MessengerBuilder("test-server"),
                   osprey::Sockaddr::Loopback(static_cast<uint16_t>(port)));
  if (!s.ok()) {
    std::fprintf(stderr, "test_server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", server.address.ToString().c_str());
  std::fflush(stdout);
  while (true) pause();
}
