// payload-probe: the raw-TCP ceiling for rpc-bench's -payload_bytes runs.
// No RPC framework: each call is a frame of a 4-byte big-endian length and
// -payload_bytes bytes, which the server sends back whole, the way
// rpc-bench's Echo moves that many bytes each way. What a framework adds on
// top (headers, protobuf, a service queue, threads) is what its figures
// lose against this one's.
//
// Server: one thread per connection, blocking: reads a frame, writes it
// back. Sync: -client_threads threads, each with its own connection, one
// frame at a time. Async: -client_threads threads, each with one
// non-blocking connection in poll, keeping its share of
// -async_call_concurrency frames in flight; what it reads it parses, and
// each frame that comes back complete sends the next.
//
// Prints Kudu rpc-bench's report lines (Reqs/sec, CPU and context switches
// per call, for the whole process, from getrusage) and MB/sec each way, so
// the same parser reads it as rpc-bench's.
#include <arpa/inet.h>
#include <gflags/gflags.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

DEFINE_int32(client_threads, 1, "sync: threads, each with a connection; async: client threads");
DEFINE_int32(async_call_concurrency, 8, "async: frames in flight over all client threads");
DEFINE_int32(payload_bytes, 65536, "bytes each way per call");
DEFINE_double(run_seconds, 2, "seconds to measure each mode");
DEFINE_string(mode, "both", "sync, async or both");
// Taken so that a command line of rpc-bench runs unchanged; the server has
// a thread per connection, whatever they say.
DEFINE_int32(server_reactors, 1, "ignored (a thread per connection)");
DEFINE_int32(worker_threads, 1, "ignored (no worker pool)");

namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "payload-probe: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

bool ReadFull(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteFull(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Echoes frames until the peer closes; bounded by -payload_bytes per frame.
void ServeConnection(int fd, size_t max_frame) {
  std::vector<char> buf(4 + max_frame);
  while (true) {
    if (!ReadFull(fd, buf.data(), 4)) break;
    uint32_t len;
    std::memcpy(&len, buf.data(), 4);
    len = ntohl(len);
    if (len > max_frame) break;  // not ours
    if (!ReadFull(fd, buf.data() + 4, len) || !WriteFull(fd, buf.data(), 4 + len)) break;
  }
  ::close(fd);
}

struct Server {
  int listen_fd = -1;
  uint16_t port = 0;
  std::thread acceptor;

  void Start(size_t max_frame) {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd < 0) Die("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("bind");
    if (::listen(listen_fd, 128) != 0) Die("listen");
    socklen_t len = sizeof(a);
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    acceptor = std::thread([this, max_frame] {
      while (true) {
        int fd = ::accept(listen_fd, nullptr, nullptr);
        if (fd < 0) return;  // closed at the end
        NoDelay(fd);
        std::thread(ServeConnection, fd, max_frame).detach();
      }
    });
  }
  void Stop() {
    ::shutdown(listen_fd, SHUT_RDWR);
    ::close(listen_fd);
    acceptor.join();
  }
};

int Connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect");
  NoDelay(fd);
  return fd;
}

std::string Frame(size_t payload) {
  std::string f(4 + payload, '\0');
  uint32_t len = htonl(static_cast<uint32_t>(payload));
  std::memcpy(f.data(), &len, 4);
  for (size_t i = 0; i < payload; ++i) f[4 + i] = static_cast<char>('a' + i % 26);
  return f;
}

// One sync client: a frame out, the same frame back, checked by length.
void SyncClient(uint16_t port, const std::atomic<bool>& stop, std::atomic<uint64_t>* calls) {
  const std::string frame = Frame(static_cast<size_t>(FLAGS_payload_bytes));
  std::vector<char> in(frame.size());
  int fd = Connect(port);
  uint64_t n = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    if (!WriteFull(fd, frame.data(), frame.size()) || !ReadFull(fd, in.data(), in.size())) {
      Die("sync call");
    }
    ++n;
  }
  calls->fetch_add(n);
  ::close(fd);
}

// One async client: `depth` frames in flight on a non-blocking connection.
void AsyncClient(uint16_t port, int depth, const std::atomic<bool>& stop,
                 std::atomic<uint64_t>* calls) {
  const std::string frame = Frame(static_cast<size_t>(FLAGS_payload_bytes));
  int fd = Connect(port);
  int flags = 1;
  ::ioctl(fd, FIONBIO, &flags);
  size_t to_send = frame.size() * static_cast<size_t>(depth);  // bytes not yet written
  size_t sent_in_frame = 0;  // offset into the frame being written
  size_t received = 0;       // bytes of the frame being read
  uint64_t n = 0;
  int in_flight = depth;
  std::vector<char> buf(256 * 1024);
  while (true) {
    bool stopping = stop.load(std::memory_order_relaxed);
    if (stopping && in_flight == 0) break;
    pollfd p{fd, static_cast<short>(POLLIN | (to_send > 0 ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 1000) < 0 && errno != EINTR) Die("poll");
    if (p.revents & POLLOUT) {
      while (to_send > 0) {
        // Whole frames one after another: the frame from where we are in it.
        size_t chunk = std::min(to_send, frame.size() - sent_in_frame);
        ssize_t w = ::write(fd, frame.data() + sent_in_frame, chunk);
        if (w <= 0) break;
        to_send -= static_cast<size_t>(w);
        sent_in_frame = (sent_in_frame + static_cast<size_t>(w)) % frame.size();
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      while (true) {
        ssize_t r = ::read(fd, buf.data(), buf.size());
        if (r == 0) Die("server closed");
        if (r < 0) break;
        received += static_cast<size_t>(r);
        while (received >= frame.size()) {
          received -= frame.size();
          ++n;
          --in_flight;
          if (!stopping) {
            ++in_flight;
            to_send += frame.size();
          }
        }
      }
    }
  }
  calls->fetch_add(n);
  ::close(fd);
}

struct Usage {
  double user_us, sys_us, csw;
};
Usage Now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {u.ru_utime.tv_sec * 1e6 + u.ru_utime.tv_usec,
          u.ru_stime.tv_sec * 1e6 + u.ru_stime.tv_usec,
          static_cast<double>(u.ru_nvcsw + u.ru_nivcsw)};
}

void Run(bool async, uint16_t port) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> calls{0};
  std::vector<std::thread> clients;
  const Usage before = Now();
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < FLAGS_client_threads; ++t) {
    if (async) {
      // The calls in flight, spread over the threads as evenly as they go.
      int depth = FLAGS_async_call_concurrency / FLAGS_client_threads +
                  (t < FLAGS_async_call_concurrency % FLAGS_client_threads ? 1 : 0);
      if (depth > 0) clients.emplace_back(AsyncClient, port, depth, std::cref(stop), &calls);
    } else {
      clients.emplace_back(SyncClient, port, std::cref(stop), &calls);
    }
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_run_seconds));
  stop.store(true);
  for (auto& c : clients) c.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Usage after = Now();
  const double n = static_cast<double>(std::max<uint64_t>(calls.load(), 1));
  std::printf("Mode:            %s\n", async ? "Async" : "Sync");
  std::printf("Client threads:   %d\n", FLAGS_client_threads);
  if (async) std::printf("Call concurrency: %d\n", FLAGS_async_call_concurrency);
  std::printf("Payload bytes:    %d\n", FLAGS_payload_bytes);
  std::printf("----------------------------------\n");
  std::printf("Reqs/sec:         %.1f\n", calls.load() / seconds);
  std::printf("User CPU per req: %.5gus\n", (after.user_us - before.user_us) / n);
  std::printf("Sys CPU per req:  %.5gus\n", (after.sys_us - before.sys_us) / n);
  std::printf("Ctx Sw. per req:  %.5g\n", (after.csw - before.csw) / n);
  std::printf("MB/sec each way:  %.1f\n", calls.load() * FLAGS_payload_bytes / seconds / 1e6);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("payload-probe [flags]: raw-TCP echo of -payload_bytes frames");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_payload_bytes < 1 || FLAGS_payload_bytes > (64 << 20) || FLAGS_client_threads < 1 ||
      FLAGS_async_call_concurrency < 1 || FLAGS_run_seconds <= 0 || FLAGS_run_seconds > 600 ||
      (FLAGS_mode != "sync" && FLAGS_mode != "async" && FLAGS_mode != "both")) {
    std::fprintf(stderr,
                 "payload-probe: -payload_bytes 1..64 MiB, -client_threads and "
                 "-async_call_concurrency at least 1, -run_seconds up to 600, -mode "
                 "sync|async|both\n");
    return 2;
  }
  Server server;
  server.Start(static_cast<size_t>(FLAGS_payload_bytes));
  if (FLAGS_mode != "async") Run(false, server.port);
  if (FLAGS_mode == "both") std::printf("\n");
  if (FLAGS_mode != "sync") Run(true, server.port);
  server.Stop();
  return 0;
}
