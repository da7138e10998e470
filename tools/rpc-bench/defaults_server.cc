// defaults-server: rpc-bench's service (Sleep burns its sleep_micros of
// CPU on a worker) on a server built as a user of the public API builds
// one: MessengerBuilder's defaults and ServicePoolOptions' defaults, with
// nothing set but the queue length (the one setting the overload benchmark
// varies). rpc-bench's own server sets its reactors, workers and overload
// flags from its command line; this one sets none, so that what the
// benchmark measures here is what a user gets without tuning (issue 48,
// item 4). scripts/benchmarks.sh --overload runs it pinned to one CPU and
// drives it with rpc-bench's open-loop client from another.
//
//   defaults-server [-queue_length N] [-listen HOST:PORT]
//
// Prints "Listening on ADDR" and the settings in force, then serves until
// SIGINT or SIGTERM. One thread: main's; the messenger's are its own.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bench_service.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/service_pool_options.h"

namespace {

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "defaults-server: %s\n"
               "usage: defaults-server [-queue_length N] [-listen HOST:PORT]\n"
               "  -queue_length N   ServicePoolOptions::queue_length (default: the default, %zu)\n"
               "  -listen HOST:PORT where to listen (default 127.0.0.1:0)\n",
               why, osprey::ServicePoolOptions().queue_length);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  osprey::ServicePoolOptions pool;  // the defaults, but for the queue length
  std::string listen = "127.0.0.1:0";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) a = a.substr(1);
    if (a == "-h" || a == "-help") Usage("the public API's defaults, and a queue length");
    if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
    const char* v = argv[++i];
    if (a == "-queue_length") {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (end == v || *end != '\0' || n == 0 || n > 10000000) Usage("bad -queue_length");
      pool.queue_length = static_cast<size_t>(n);
    } else if (a == "-listen") {
      listen = v;
    } else {
      Usage(("unknown flag " + a).c_str());
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts

  osprey::Sockaddr addr, bound;
  osprey::Status s = osprey::Sockaddr::Parse(listen, &addr);
  if (!s.ok()) Usage(("-listen: " + s.ToString()).c_str());
  std::shared_ptr<osprey::Messenger> server;
  s = osprey::MessengerBuilder("defaults-server").Build(&server);
  if (s.ok()) {
    s = server->RegisterService(std::make_unique<osprey::bench::BenchService>(
                                    osprey::bench::BenchService::SleepMode::kBurn),
                                pool);
  }
  if (s.ok()) s = server->Listen(addr, &bound);
  if (!s.ok()) {
    std::fprintf(stderr, "defaults-server: cannot start: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("Listening on %s\n", bound.ToString().c_str());
  std::printf(
      "Public API defaults: %d reactors, %d worker, queue length %zu, deadline order %s, "
      "overload control %s (delay target %lld us, interval %lld ms), admission to the deadline %s, "
      "by patience %s; Sleep burns CPU\n",
      server->num_reactors(), pool.worker_threads, pool.queue_length,
      pool.deadline_order ? "on" : "off", pool.overload_control ? "on" : "off",
      static_cast<long long>(pool.queue_delay_target.ToMicroseconds()),
      static_cast<long long>(pool.queue_delay_interval.ToMilliseconds()),
      pool.admit_to_deadline ? "on" : "off", pool.admit_by_patience ? "on" : "off");
  std::fflush(stdout);
  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  server->Shutdown();
  return 0;
}
