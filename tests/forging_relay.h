// ForgingRelay: an active man in the middle for tests (issue 40, finding 1).
// It relays a connection's clear part untouched: the client's connection
// header and every clear frame of the server (NEGOTIATE, the TLS handshake
// tokens), so that the client verifies the real server's certificate. When
// the server's bytes turn into TLS records (a first byte that cannot start
// a frame under 16 MiB), it stops relaying the server and writes bytes of its
// own choosing to the client instead: clear frames that forge the server's
// answers.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"
#include "osprey/wire/frame_encoder.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::rpc_test {

// One frame as a server would send it: `body` under a response header with
// `call_id`.
inline std::string ForgedFrame(int32_t call_id, const google::protobuf::MessageLite& body,
                               bool is_error = false) {
  wire::ResponseHeader h;
  h.set_call_id(call_id);
  if (is_error) h.set_is_error(true);
  std::unique_ptr<wire::OutboundFrame> f;
  Status s = wire::OutboundFrame::Encode(&h, body, {}, &f);
  return s.ok() ? f->ToString() : std::string();
}

// Relays one connection to `target` as above; one thread, every wait
// bounded (20 ms polls, at most 30 s in all); stops when destroyed.
class ForgingRelay {
 public:
  ForgingRelay(const Sockaddr& target, std::string forged)
      : target_(target), forged_(std::move(forged)) {}
  ~ForgingRelay() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  Status Start(Sockaddr* addr) {
    Sockaddr local = target_;
    local.set_port(0);
    OSPREY_RETURN_NOT_OK(listener_.Init(local));
    OSPREY_RETURN_NOT_OK(listener_.Bind(local));
    OSPREY_RETURN_NOT_OK(listener_.Listen(1));
    OSPREY_RETURN_NOT_OK(listener_.GetLocalAddress(addr));
    thread_ = std::thread([this] { Run(); });
    return Status::OK();
  }

  // Whether the relay began to send the forged bytes to the client: the
  // server had switched to records by then.
  bool injected() const { return injected_.load(); }
  // How many of the server's clear frames were relayed.
  int frames_relayed() const { return frames_relayed_.load(); }

 private:
  void Run() {
    const MonoTime give_up = MonoTime::Now() + MonoDelta::FromSeconds(30);
    Socket client, server;
    while (!stop_ && MonoTime::Now() < give_up) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 20) != 1) continue;
      Sockaddr remote;
      if (!listener_.Accept(&client, &remote, false).ok()) return;
      break;
    }
    if (client.fd() < 0 || !server.Init(target_).ok() || !server.Connect(target_).ok()) return;
    std::string from_server;  // not yet relayed
    bool records = false;
    while (!stop_ && MonoTime::Now() < give_up) {
      pollfd fds[2] = {{client.fd(), POLLIN, 0}, {server.fd(), POLLIN, 0}};
      if (::poll(fds, 2, 20) <= 0) continue;
      char buf[16384];
      if (fds[0].revents != 0) {
        ssize_t n = ::recv(client.fd(), buf, sizeof(buf), 0);
        if (n <= 0) return;
        if (!server.WriteAll(reinterpret_cast<uint8_t*>(buf), static_cast<size_t>(n)).ok()) return;
      }
      if (fds[1].revents != 0) {
        ssize_t n = ::recv(server.fd(), buf, sizeof(buf), 0);
        if (n <= 0) return;
        if (records) continue;  // the real server's records never reach the client
        from_server.append(buf, static_cast<size_t>(n));
        // Whole clear frames go on; a first byte that is not 0 is a record.
        while (!from_server.empty() && !records) {
          if (from_server[0] != '\0') {
            records = true;
            break;
          }
          if (from_server.size() < 4) break;
          const auto* b = reinterpret_cast<const uint8_t*>(from_server.data());
          size_t len = (size_t{b[1]} << 16) | (size_t{b[2]} << 8) | b[3];
          if (from_server.size() < 4 + len) break;
          if (!client.WriteAll(b, 4 + len).ok()) return;
          frames_relayed_.fetch_add(1);
          from_server.erase(0, 4 + len);
        }
        if (records) {
          // Set first: the client may act on the bytes before WriteAll
          // returns here.
          injected_ = true;
          const auto* f = reinterpret_cast<const uint8_t*>(forged_.data());
          if (!client.WriteAll(f, forged_.size()).ok()) return;
        }
      }
    }
  }

  const Sockaddr target_;
  const std::string forged_;
  Socket listener_;
  std::thread thread_;
  std::atomic<bool> stop_{false}, injected_{false};
  std::atomic<int> frames_relayed_{0};
};

}  // namespace osprey::rpc_test
