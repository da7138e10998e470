// RecordingProxy: a man in the middle for tests, to see what crosses the
// wire between a client and a server on loopback.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"

namespace osprey::rpc_test {

// Forwards loopback connections to `target`, keeping a copy of every byte
// in each direction. It listens on the loopback address of `target`'s
// family (127.0.0.1 or ::1), so the server still sees a loopback peer.
// With CutEachConnectionAfter, it closes every connection that long after
// it opened: calls in flight may then have run with their answers lost;
// with CutAtRandomReads, at a random read instead. With CheckFraming, it
// reads each direction as KRPC frames and counts bytes that cannot be the
// connection's own (foreign_frames). One thread; stops when destroyed.
class RecordingProxy {
 public:
  explicit RecordingProxy(const Sockaddr& target) : target_(target) {}
  // Listening on `listen` instead of beside the target.
  RecordingProxy(const Sockaddr& target, const Sockaddr& listen)
      : target_(target), listen_(listen), has_listen_(true) {}
  ~RecordingProxy() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  // Before Start().
  void CutEachConnectionAfter(MonoDelta after) { cut_after_ = after; }
  // Before Start(): closes a connection instead of forwarding a read, with
  // probability `p` per read, drawn from a generator seeded with `seed`.
  void CutAtRandomReads(double p, uint32_t seed) {
    cut_probability_ = p;
    random_.seed(seed);
  }
  int cuts() const { return cuts_.load(); }

  // Before Start(): follows each direction's framing (the client's 7-byte
  // connection header, then frames of a 4-byte big-endian length and that
  // many bytes), and counts a frame longer than `max_frame` as foreign:
  // bytes some other writer put on the socket, such as the 8 bytes of an
  // eventfd write (01 00 00 00 ...: a length of 16 MiB). The connection is
  // then closed, its framing lost. Only for clear (not TLS) connections.
  void CheckFraming(uint32_t max_frame) { max_frame_ = max_frame; }
  int foreign_frames() const { return foreign_frames_.load(); }

  Status Start(Sockaddr* addr) {
    Sockaddr local = target_;
    local.set_port(0);
    if (has_listen_) {
      local = listen_;
    } else if (target_.is_unix()) {
      // Beside a Unix target: an abstract name, so no file is left behind.
      static std::atomic<int> next{0};
      OSPREY_RETURN_NOT_OK(Sockaddr::Parse(
          "unix:@osprey-recording-proxy-" + std::to_string(getpid()) + "-" + std::to_string(next++),
          &local));
    }
    OSPREY_RETURN_NOT_OK(listener_.Init(local));
    OSPREY_RETURN_NOT_OK(listener_.Bind(local));
    OSPREY_RETURN_NOT_OK(listener_.Listen(16));
    OSPREY_RETURN_NOT_OK(listener_.GetLocalAddress(addr));
    thread_ = std::thread([this] { Run(); });
    return Status::OK();
  }

  std::string client_to_server() {
    std::lock_guard<std::mutex> l(mu_);
    return c2s_;
  }
  std::string server_to_client() {
    std::lock_guard<std::mutex> l(mu_);
    return s2c_;
  }

 private:
  // Where one direction's bytes are in their framing (CheckFraming).
  struct Framing {
    size_t header_left = 0;  // connection header bytes still to come
    uint8_t length[4] = {};
    size_t length_got = 0;
    uint64_t body_left = 0;
    // Consumes `n` bytes; false at a frame longer than `max_frame`.
    bool Follow(const uint8_t* p, size_t n, uint32_t max_frame) {
      for (size_t i = 0; i < n;) {
        if (header_left > 0) {
          size_t take = std::min(header_left, n - i);
          header_left -= take;
          i += take;
        } else if (body_left > 0) {
          uint64_t take = std::min<uint64_t>(body_left, n - i);
          body_left -= take;
          i += take;
        } else {
          length[length_got++] = p[i++];
          if (length_got < 4) continue;
          length_got = 0;
          body_left = (uint64_t{length[0]} << 24) | (uint64_t{length[1]} << 16) |
                      (uint64_t{length[2]} << 8) | length[3];
          if (body_left > max_frame) return false;
        }
      }
      return true;
    }
  };
  struct Pair {
    Socket client, server;
    MonoTime cut_at = MonoTime::Max();
    Framing from_client{7}, from_server{0};
    bool open = true;
    void Close() {
      open = false;
      client.Close();
      server.Close();
    }
  };

  void Run() {
    std::vector<std::unique_ptr<Pair>> pairs;
    while (!stop_) {
      const MonoTime now = MonoTime::Now();
      for (auto& p : pairs) {
        if (p->open && now >= p->cut_at) {
          p->Close();
          cuts_.fetch_add(1);
        }
      }
      std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}};
      for (auto& p : pairs) {
        if (!p->open) continue;
        fds.push_back({p->client.fd(), POLLIN, 0});
        fds.push_back({p->server.fd(), POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        auto p = std::make_unique<Pair>();
        Sockaddr remote;
        if (listener_.Accept(&p->client, &remote, false).ok() && p->server.Init(target_).ok() &&
            p->server.Connect(target_).ok()) {
          if (cut_after_.has_value()) p->cut_at = MonoTime::Now() + *cut_after_;
          pairs.push_back(std::move(p));
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        for (auto& p : pairs) {
          if (!p->open) continue;
          bool from_client = fds[i].fd == p->client.fd();
          if (!from_client && fds[i].fd != p->server.fd()) continue;
          Socket& in = from_client ? p->client : p->server;
          Socket& out = from_client ? p->server : p->client;
          uint8_t buf[64 * 1024];
          ssize_t n = ::recv(in.fd(), buf, sizeof(buf), MSG_DONTWAIT);
          if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
          if (n > 0) {
            // Recorded before it is forwarded: whoever reacts to these
            // bytes then finds them in the record.
            std::lock_guard<std::mutex> l(mu_);
            (from_client ? c2s_ : s2c_)
                .append(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
          }
          if (n > 0 && max_frame_ > 0 &&
              !(from_client ? p->from_client : p->from_server)
                   .Follow(buf, static_cast<size_t>(n), max_frame_)) {
            foreign_frames_.fetch_add(1);
            p->Close();
            break;
          }
          if (n > 0 && cut_probability_ > 0 &&
              std::uniform_real_distribution<double>(0, 1)(random_) < cut_probability_) {
            p->Close();
            cuts_.fetch_add(1);
            break;
          }
          if (n <= 0 || !out.WriteAll(buf, static_cast<size_t>(n)).ok()) p->Close();
          break;
        }
      }
    }
  }

  const Sockaddr target_;
  const Sockaddr listen_;
  const bool has_listen_ = false;
  Socket listener_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::optional<MonoDelta> cut_after_;
  std::atomic<int> cuts_{0};
  double cut_probability_ = 0;
  std::mt19937 random_;
  uint32_t max_frame_ = 0;
  std::atomic<int> foreign_frames_{0};
  std::mutex mu_;
  std::string c2s_, s2c_;
};

}  // namespace osprey::rpc_test
