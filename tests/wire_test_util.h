// Helpers for tests that speak KRPC by hand: the recorded Kudu captures in
// tests/testdata/kudu-wire, frames read off a socket, a bare loopback
// listener to play a server.
#pragma once

#include <gtest/gtest.h>

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

// A listening socket on a free loopback port, to play a Kudu server.
inline Status ListenOnLoopback(Socket* listener, Sockaddr* addr) {
  OSPREY_RETURN_NOT_OK(listener->Init(Sockaddr::Loopback(0)));
  OSPREY_RETURN_NOT_OK(listener->Bind(Sockaddr::Loopback(0)));
  OSPREY_RETURN_NOT_OK(listener->Listen(1));
  return listener->GetLocalAddress(addr);
}

}  // namespace osprey
