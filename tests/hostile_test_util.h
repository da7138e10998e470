// Helpers for the hostile-input, overload and peer-loss tests: a raw TCP
// client that speaks KRPC by hand (so tests can send anything at all, or
// stop anywhere), and process-level probes (open file descriptors, RSS).
#pragma once

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"
#include "osprey/wire/connection_header.h"
#include "osprey/wire/frame_decoder.h"
#include "osprey/wire/frame_encoder.h"
#include "osprey/wire/rpc_header.pb.h"

namespace osprey::rpc_test {

inline constexpr int32_t kNegotiationCallId = -33;
inline constexpr int32_t kConnectionContextCallId = -3;
inline constexpr int32_t kConnectionErrorCallId = -1;
inline constexpr const char* kCalculatorService = "osprey.rpc_test.CalculatorService";

// Entries in /proc/self/fd (the directory's own descriptor included, which
// is the same on every call).
inline int CountOpenFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Polls until at most `want` descriptors are open (closes happen on reactor
// threads) or `timeout` passes; returns the last count.
inline int WaitForFdCountAtMost(int want, MonoDelta timeout = MonoDelta::FromSeconds(5)) {
  MonoTime deadline = MonoTime::Now() + timeout;
  int n = CountOpenFds();
  while (n > want && MonoTime::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = CountOpenFds();
  }
  return n;
}

// A "Name:  N kB" line of /proc/self/status, in KiB, or -1.
inline int64_t ReadStatusKiB(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) return std::stoll(line.substr(name.size() + 1));
  }
  return -1;
}

// VmRSS of this process in KiB, or -1.
inline int64_t ReadRssKiB() { return ReadStatusKiB("VmRSS"); }

// Peak resident memory (VmHWM) since ResetPeakRss(), in KiB, or -1.
inline int64_t PeakRssKiB() { return ReadStatusKiB("VmHWM"); }
inline bool ResetPeakRss() {
  return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
}

inline std::string BigEndian32(uint32_t v) {
  std::string s(4, '\0');
  s[0] = static_cast<char>(v >> 24);
  s[1] = static_cast<char>(v >> 16);
  s[2] = static_cast<char>(v >> 8);
  s[3] = static_cast<char>(v);
  return s;
}

inline std::string Varint32(uint32_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}

// A frame laid out from raw header and body bytes, consistent lengths.
inline std::string RawFrame(const std::string& header, const std::string& body) {
  std::string rest = Varint32(static_cast<uint32_t>(header.size())) + header +
                     Varint32(static_cast<uint32_t>(body.size())) + body;
  return BigEndian32(static_cast<uint32_t>(rest.size())) + rest;
}

// A well-formed request frame, via the library's encoder.
inline std::string RequestFrame(wire::RequestHeader header,
                                const google::protobuf::MessageLite& body) {
  std::unique_ptr<wire::OutboundFrame> f;
  Status s = wire::OutboundFrame::Encode(&header, body, {}, &f);
  if (!s.ok()) return std::string();
  return f->ToString();
}

inline std::string CallFrame(int32_t call_id, const std::string& method,
                             const google::protobuf::MessageLite& request) {
  wire::RequestHeader h;
  h.set_call_id(call_id);
  h.mutable_remote_method()->set_service_name(kCalculatorService);
  h.mutable_remote_method()->set_method_name(method);
  return RequestFrame(h, request);
}

// The client's NEGOTIATE step, as Kudu's client sends it.
inline wire::NegotiatePB NegotiateMessage() {
  wire::NegotiatePB pb;
  pb.set_step(wire::NegotiatePB::NEGOTIATE);
  pb.add_supported_features(wire::APPLICATION_FEATURE_FLAGS);
  pb.add_authn_types()->mutable_sasl();
  return pb;
}

// SASL_INITIATE with PLAIN: token is authzid NUL authcid NUL password.
inline wire::NegotiatePB SaslInitiateMessage(const std::string& user) {
  wire::NegotiatePB pb;
  pb.set_step(wire::NegotiatePB::SASL_INITIATE);
  pb.add_sasl_mechanisms()->set_mechanism("PLAIN");
  pb.set_token(std::string(1, '\0') + user + std::string(1, '\0'));
  return pb;
}

inline std::string NegotiationFrame(const wire::NegotiatePB& pb) {
  wire::RequestHeader h;
  h.set_call_id(kNegotiationCallId);
  return RequestFrame(h, pb);
}

inline std::string ContextFrame(const std::string& user,
                                int32_t call_id = kConnectionContextCallId) {
  wire::RequestHeader h;
  h.set_call_id(call_id);
  wire::ConnectionContextPB ctx;
  ctx.mutable_deprecated_user_info()->set_real_user(user);
  return RequestFrame(h, ctx);
}

// A blocking client socket with poll()-bounded reads and a send timeout, so
// no test can hang on it.
class RawConn {
 public:
  // `rcvbuf` > 0 fixes SO_RCVBUF before connecting (no autotuning).
  Status Connect(const Sockaddr& addr, int rcvbuf = 0) {
    OSPREY_RETURN_NOT_OK(sock_.Init(addr));
    if (rcvbuf > 0) {
      if (setsockopt(sock_.fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) != 0) {
        return Status::IOError("setsockopt SO_RCVBUF", errno);
      }
    }
    timeval tv{10, 0};
    setsockopt(sock_.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return sock_.Connect(addr);
  }

  // Connects from the address `local` (port 0): every 127/8 address is
  // loopback, so one test can be peers at several addresses.
  Status ConnectFrom(const Sockaddr& local, const Sockaddr& addr) {
    OSPREY_RETURN_NOT_OK(sock_.Init(addr));
    OSPREY_RETURN_NOT_OK(sock_.Bind(local));
    OSPREY_RETURN_NOT_OK(sock_.SetNoDelay(true));  // many small frames, no 40 ms waits
    timeval tv{10, 0};
    setsockopt(sock_.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return sock_.Connect(addr);
  }

  Status Send(const std::string& bytes) {
    return sock_.WriteAll(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }

  void ShutdownWrite() { ::shutdown(sock_.fd(), SHUT_WR); }
  void Close() { sock_.Close(); }
  int fd() const { return sock_.fd(); }

  // The next response frame: TimedOut if none came in time, NetworkError
  // if the server closed (EOF or reset), Corruption for a bad frame.
  Status ReadFrame(wire::InboundResponseFrame* out, MonoDelta timeout = MonoDelta::FromSeconds(5)) {
    MonoTime deadline = MonoTime::Now() + timeout;
    while (frames_.empty()) {
      int ms = static_cast<int>((deadline - MonoTime::Now()).ToMilliseconds());
      if (ms < 0) return Status::TimedOut("no frame from the server");
      pollfd p{sock_.fd(), POLLIN, 0};
      int r = ::poll(&p, 1, ms);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) continue;  // re-check the deadline
      size_t space, n = 0;
      uint8_t* dst = decoder_.WriteSpace(&space);
      ssize_t got = ::recv(sock_.fd(), dst, space, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return Status::NetworkError("recv", errno);
      if (got == 0) return Status::NetworkError("connection closed by server");
      n = static_cast<size_t>(got);
      std::vector<wire::InboundResponseFrame> frames;
      Status s = decoder_.Consume(n, &frames);
      for (auto& f : frames) frames_.push_back(std::move(f));
      if (!s.ok() && frames_.empty()) return s;
    }
    *out = std::move(frames_.front());
    frames_.pop_front();
    return Status::OK();
  }

  // Reads the next frame, which must be an error: its call id and payload.
  Status ReadError(int32_t* call_id, wire::ErrorStatusPB* err,
                   MonoDelta timeout = MonoDelta::FromSeconds(5)) {
    wire::InboundResponseFrame f;
    OSPREY_RETURN_NOT_OK(ReadFrame(&f, timeout));
    *call_id = f.header.call_id();
    if (!f.header.is_error()) {
      return Status::IllegalState("frame for call " + std::to_string(*call_id) +
                                  " is not an error");
    }
    if (!err->ParseFromArray(f.main_message.data(), static_cast<int>(f.main_message.size()))) {
      return Status::Corruption("ErrorStatusPB does not parse");
    }
    return Status::OK();
  }

  // Reads and discards until the server closes (EOF or reset). True if it
  // did within `timeout`; *bytes (if given) gets how much was read.
  bool WaitForClose(MonoDelta timeout = MonoDelta::FromSeconds(5), size_t* bytes = nullptr) {
    MonoTime deadline = MonoTime::Now() + timeout;
    uint8_t buf[64 * 1024];
    size_t total = 0;
    bool closed = false;
    while (true) {
      int ms = static_cast<int>((deadline - MonoTime::Now()).ToMilliseconds());
      if (ms < 0) break;
      pollfd p{sock_.fd(), POLLIN, 0};
      int r = ::poll(&p, 1, ms);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) continue;
      ssize_t got = ::recv(sock_.fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        closed = true;  // EOF, or ECONNRESET and friends
        break;
      }
      total += static_cast<size_t>(got);
    }
    if (bytes) *bytes = total;
    return closed;
  }

  // Steps of the client side of negotiation, by hand.
  Status SendConnectionHeader() { return Send(wire::ConnectionHeaderBytes()); }

  Status NegotiateStep() {
    OSPREY_RETURN_NOT_OK(Send(NegotiationFrame(NegotiateMessage())));
    return ExpectNegotiation(wire::NegotiatePB::NEGOTIATE);
  }

  Status SaslStep(const std::string& user) {
    OSPREY_RETURN_NOT_OK(Send(NegotiationFrame(SaslInitiateMessage(user))));
    return ExpectNegotiation(wire::NegotiatePB::SASL_SUCCESS);
  }

  // Connection header, NEGOTIATE, SASL_INITIATE with PLAIN, then the
  // connection context: the connection is ready for calls.
  Status Negotiate(const std::string& user = "hostile") {
    OSPREY_RETURN_NOT_OK(SendConnectionHeader());
    OSPREY_RETURN_NOT_OK(NegotiateStep());
    OSPREY_RETURN_NOT_OK(SaslStep(user));
    return Send(ContextFrame(user));
  }

 private:
  Status ExpectNegotiation(wire::NegotiatePB::NegotiateStep step) {
    wire::InboundResponseFrame f;
    OSPREY_RETURN_NOT_OK(ReadFrame(&f));
    if (f.header.call_id() != kNegotiationCallId || f.header.is_error()) {
      return Status::IllegalState("unexpected negotiation answer for call id " +
                                  std::to_string(f.header.call_id()));
    }
    wire::NegotiatePB pb;
    if (!pb.ParseFromArray(f.main_message.data(), static_cast<int>(f.main_message.size())) ||
        pb.step() != step) {
      return Status::IllegalState("unexpected negotiation step");
    }
    return Status::OK();
  }

  Socket sock_;
  wire::ResponseFrameDecoder decoder_;
  std::deque<wire::InboundResponseFrame> frames_;
};

}  // namespace osprey::rpc_test
