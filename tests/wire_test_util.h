// Helpers for tests that speak KRPC by hand: the recorded Kudu captures in
// tests/testdata/kudu-wire, frames read off a socket, a bare loopback
// listener to play a server.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"

namespace osprey {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One direction of a recorded Kudu connection, e.g. Golden("s2c.bin", "tls").
inline std::string Golden(const std::string& name, const std::string& capture = "plain") {
  return ReadFile(std::string(OSPREY_TESTDATA_DIR) + "/kudu-wire/" + capture + "/" + name);
}

// The frames of a capture's byte stream, each with its 4-byte length, after
// the first `skip` bytes (7 for the client's connection header).
inline std::vector<std::string> SplitFrames(const std::string& stream, size_t skip) {
  std::vector<std::string> frames;
  size_t at = skip;
  while (at + 4 <= stream.size()) {
    const auto* p = reinterpret_cast<const uint8_t*>(stream.data()) + at;
    size_t n = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
    if (at + 4 + n > stream.size()) break;  // TLS records, not frames, from here
    frames.push_back(stream.substr(at, 4 + n));
    at += 4 + n;
  }
  return frames;
}

// Reads one frame, with its 4-byte length.
inline Status ReadFrameBytes(Socket* s, std::string* frame) {
  uint8_t len[4];
  OSPREY_RETURN_NOT_OK(s->ReadAll(len, 4));
  uint32_t n =
      (uint32_t{len[0]} << 24) | (uint32_t{len[1]} << 16) | (uint32_t{len[2]} << 8) | len[3];
  frame->assign(reinterpret_cast<char*>(len), 4);
  frame->resize(4 + n);
  return s->ReadAll(reinterpret_cast<uint8_t*>(frame->data()) + 4, n);
}

// Plays a Kudu server's side of a plain connection's negotiation with the
// recorded answers (Golden("s2c.bin"): NEGOTIATE's, then SASL PLAIN's):
// accepts on `listener` into `conn` and reads up to the connection
// context. The next bytes are the client's first call.
inline Status PlayRecordedNegotiation(Socket* listener, const std::string& s2c, Socket* conn) {
  if (s2c.size() < 53) return Status::InvalidArgument("the recorded answers are cut short");
  Sockaddr remote;
  OSPREY_RETURN_NOT_OK(listener->Accept(conn, &remote, false));
  std::string header(7, '\0'), frame;
  OSPREY_RETURN_NOT_OK(conn->ReadAll(reinterpret_cast<uint8_t*>(header.data()), 7));
  OSPREY_RETURN_NOT_OK(ReadFrameBytes(conn, &frame));  // NEGOTIATE
  OSPREY_RETURN_NOT_OK(conn->WriteAll(reinterpret_cast<const uint8_t*>(s2c.data()), 34));
  OSPREY_RETURN_NOT_OK(ReadFrameBytes(conn, &frame));  // SASL_INITIATE
  OSPREY_RETURN_NOT_OK(conn->WriteAll(reinterpret_cast<const uint8_t*>(s2c.data()) + 34, 19));
  return ReadFrameBytes(conn, &frame);  // connection context
}

// A listening socket on a free loopback port, to play a Kudu server. With
// `receive_buffer`, the sockets it accepts take that SO_RCVBUF (set before
// listen()): a small one backs a client's bytes up into its own queue soon.
inline Status ListenOnLoopback(Socket* listener, Sockaddr* addr, int backlog = 1,
                               int receive_buffer = 0) {
  OSPREY_RETURN_NOT_OK(listener->Init(Sockaddr::Loopback(0)));
  if (receive_buffer > 0 && setsockopt(listener->fd(), SOL_SOCKET, SO_RCVBUF, &receive_buffer,
                                       sizeof(receive_buffer)) != 0) {
    return Status::NetworkError("setsockopt(SO_RCVBUF)", errno);
  }
  OSPREY_RETURN_NOT_OK(listener->Bind(Sockaddr::Loopback(0)));
  OSPREY_RETURN_NOT_OK(listener->Listen(backlog));
  return listener->GetLocalAddress(addr);
}

}  // namespace osprey
