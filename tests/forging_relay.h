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
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"
#include "osprey/wire/frame_decoder.h"
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

// What both relays below share: a listener beside `target` (the loopback
// address of its family, any port), one thread that accepts one client and
// connects it to the target, every wait bounded (20 ms polls, 30 s in
// all). A relay calls StopAndJoin() in its own destructor, before its own
// members go.
class OneConnectionRelay {
 public:
  OneConnectionRelay(const Sockaddr& target, std::string forged)
      : target_(target), forged_(std::move(forged)) {}
  virtual ~OneConnectionRelay() = default;

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

 protected:
  void StopAndJoin() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // The relay thread: one client, connected to the target; false if none
  // came by `give_up` or the target refused.
  bool AcceptAndConnect(MonoTime give_up, Socket* client, Socket* server) {
    while (!stop_ && MonoTime::Now() < give_up) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 20) != 1) continue;
      Sockaddr remote;
      if (!listener_.Accept(client, &remote, false).ok()) return false;
      break;
    }
    return client->fd() >= 0 && server->Init(target_).ok() && server->Connect(target_).ok();
  }
  virtual void Run() = 0;

  const Sockaddr target_;
  const std::string forged_;
  std::atomic<bool> stop_{false};

 private:
  Socket listener_;
  std::thread thread_;
};

// Relays one connection to `target` as above; one thread, every wait
// bounded (20 ms polls, at most 30 s in all); stops when destroyed.
class ForgingRelay : public OneConnectionRelay {
 public:
  using OneConnectionRelay::OneConnectionRelay;
  ~ForgingRelay() override { StopAndJoin(); }

  // Whether the relay began to send the forged bytes to the client: the
  // server had switched to records by then.
  bool injected() const { return injected_.load(); }
  // How many of the server's clear frames were relayed.
  int frames_relayed() const { return frames_relayed_.load(); }

 private:
  void Run() override {
    const MonoTime give_up = MonoTime::Now() + MonoDelta::FromSeconds(30);
    Socket client, server;
    if (!AcceptAndConnect(give_up, &client, &server)) return;
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

  std::atomic<bool> injected_{false};
  std::atomic<int> frames_relayed_{0};
};

// A downgrade on loopback (issue 47, finding 2): Kudu's client offers
// TLS_AUTHENTICATION_ONLY on loopback and trusts the server's clear
// NEGOTIATE answer to say whether the server does too. This relay adds that
// feature to the server's answer and relays the TLS handshake untouched, so
// the client verifies the real server. A client that believed it then
// sends its SASL_INITIATE (or TOKEN_EXCHANGE, with its token) in the clear:
// the relay keeps it from the server and answers the client with `forged`
// instead (a clear SASL_SUCCESS and call results). A client that encrypts
// sends records, which the relay passes on both ways untouched.
class DowngradingRelay : public OneConnectionRelay {
 public:
  using OneConnectionRelay::OneConnectionRelay;
  ~DowngradingRelay() override { StopAndJoin(); }

  // The server's NEGOTIATE reached the client with TLS_AUTHENTICATION_ONLY
  // added (the attack was tried).
  bool rewrote() const { return rewrote_.load(); }
  // The client sent a SASL or token step in the clear after the handshake,
  // and got the forged bytes: it was talked out of encryption.
  bool downgraded() const { return downgraded_.load(); }
  // The client sent records after the handshake: it encrypts.
  bool client_encrypted() const { return client_records_.load(); }
  // Everything the client sent in the clear after the handshake (its token,
  // a downgraded client's SASL and calls). Read after the relay stopped or
  // once the call finished.
  std::string clear_after_handshake() const {
    std::lock_guard<std::mutex> l(mu_);
    return clear_after_handshake_;
  }

 private:
  // The first whole clear frame at the front of `buf` (4 + its length
  // bytes), or 0 if there is none yet.
  static size_t WholeFrame(const std::string& buf) {
    if (buf.size() < 4) return 0;
    const auto* b = reinterpret_cast<const uint8_t*>(buf.data());
    size_t len = (size_t{b[1]} << 16) | (size_t{b[2]} << 8) | b[3];
    return buf.size() < 4 + len ? 0 : 4 + len;
  }
  template <class Header>
  static bool ParseNegotiation(const std::string& frame, wire::NegotiatePB* pb) {
    wire::FrameDecoder<Header> decoder;
    std::vector<wire::InboundFrame<Header>> frames;
    if (!decoder.Feed(Slice(frame), &frames).ok() || frames.size() != 1) return false;
    if (frames[0].header.call_id() != -33) return false;
    const Slice& body = frames[0].main_message;
    return pb->ParseFromArray(body.data(), static_cast<int>(body.size()));
  }

  // The client's bytes: the connection header, clear frames, then records.
  // False: stop relaying.
  bool FromClient(const char* data, size_t n, Socket* client, Socket* server) {
    if (downgraded_) {
      std::lock_guard<std::mutex> l(mu_);
      clear_after_handshake_.append(data, n);
      return true;  // the real server never hears from a downgraded client
    }
    if (client_records_) {
      return server->WriteAll(reinterpret_cast<const uint8_t*>(data), n).ok();
    }
    from_client_.append(data, n);
    if (!header_done_) {
      if (from_client_.size() < 7) return true;
      if (!server->WriteAll(reinterpret_cast<const uint8_t*>(from_client_.data()), 7).ok()) {
        return false;
      }
      from_client_.erase(0, 7);
      header_done_ = true;
    }
    while (!from_client_.empty()) {
      if (from_client_[0] != '\0') {  // a record: the client encrypts
        client_records_ = true;
        const auto* b = reinterpret_cast<const uint8_t*>(from_client_.data());
        bool ok = server->WriteAll(b, from_client_.size()).ok();
        from_client_.clear();
        return ok;
      }
      size_t len = WholeFrame(from_client_);
      if (len == 0) return true;
      std::string frame = from_client_.substr(0, len);
      from_client_.erase(0, len);
      wire::NegotiatePB pb;
      if (ParseNegotiation<wire::RequestHeader>(frame, &pb) &&
          (pb.step() == wire::NegotiatePB::SASL_INITIATE ||
           pb.step() == wire::NegotiatePB::TOKEN_EXCHANGE)) {
        {
          std::lock_guard<std::mutex> l(mu_);
          clear_after_handshake_ = frame + from_client_;
        }
        from_client_.clear();
        // Set first: the client may act on the bytes before WriteAll
        // returns here.
        downgraded_ = true;
        const auto* f = reinterpret_cast<const uint8_t*>(forged_.data());
        return client->WriteAll(f, forged_.size()).ok();
      }
      const auto* b = reinterpret_cast<const uint8_t*>(frame.data());
      if (!server->WriteAll(b, frame.size()).ok()) return false;
    }
    return true;
  }

  // The server's bytes: its NEGOTIATE answer, rewritten; handshake tokens;
  // then records, all relayed.
  bool FromServer(const char* data, size_t n, Socket* client) {
    if (downgraded_) return true;  // the client hears only the forged answers
    if (rewrote_ || server_records_) {
      return client->WriteAll(reinterpret_cast<const uint8_t*>(data), n).ok();
    }
    from_server_.append(data, n);
    size_t len = WholeFrame(from_server_);
    if (from_server_[0] != '\0') {
      server_records_ = true;  // no NEGOTIATE to rewrite: relay as it is
    } else if (len == 0) {
      return true;
    } else {
      wire::NegotiatePB pb;
      std::string frame = from_server_.substr(0, len);
      if (ParseNegotiation<wire::ResponseHeader>(frame, &pb) &&
          pb.step() == wire::NegotiatePB::NEGOTIATE) {
        bool listed = false;
        for (int f : pb.supported_features()) listed |= f == wire::TLS_AUTHENTICATION_ONLY;
        if (!listed) pb.add_supported_features(wire::TLS_AUTHENTICATION_ONLY);
        frame = ForgedFrame(-33, pb);
        rewrote_ = true;
      }
      from_server_.replace(0, len, frame);
    }
    bool ok =
        client->WriteAll(reinterpret_cast<const uint8_t*>(from_server_.data()), from_server_.size())
            .ok();
    from_server_.clear();
    return ok;
  }

  void Run() override {
    const MonoTime give_up = MonoTime::Now() + MonoDelta::FromSeconds(30);
    Socket client, server;
    if (!AcceptAndConnect(give_up, &client, &server)) return;
    while (!stop_ && MonoTime::Now() < give_up) {
      pollfd fds[2] = {{client.fd(), POLLIN, 0}, {server.fd(), POLLIN, 0}};
      if (::poll(fds, 2, 20) <= 0) continue;
      char buf[16384];
      if (fds[0].revents != 0) {
        ssize_t n = ::recv(client.fd(), buf, sizeof(buf), 0);
        if (n <= 0 || !FromClient(buf, static_cast<size_t>(n), &client, &server)) return;
      }
      if (fds[1].revents != 0) {
        ssize_t n = ::recv(server.fd(), buf, sizeof(buf), 0);
        if (n <= 0 || !FromServer(buf, static_cast<size_t>(n), &client)) return;
      }
    }
  }

  // Relay thread only.
  std::string from_client_, from_server_;
  bool header_done_ = false;
  std::atomic<bool> rewrote_{false}, downgraded_{false}, client_records_{false},
      server_records_{false};
  mutable std::mutex mu_;
  std::string clear_after_handshake_;
};

}  // namespace osprey::rpc_test
