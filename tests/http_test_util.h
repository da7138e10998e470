// A minimal HTTP/1.1 client over a blocking loopback socket, for tests of
// the messenger's HTTP endpoints: send a request, read one response (by
// Content-Length), on a connection that may be kept alive.
#pragma once

#include <poll.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"

namespace osprey::rpc_test {

// Runs `command` (a shell line) and gives its standard output; *exit_code
// gets its exit status.
inline std::string RunShell(const std::string& command, int* exit_code) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    *exit_code = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

struct HttpReply {
  int status = 0;
  std::string headers;  // the head, lower-cased names as sent
  std::string body;
  std::string Header(const std::string& name) const {
    size_t at = headers.find("\r\n" + name + ": ");
    if (at == std::string::npos) return "";
    at += name.size() + 4;
    return headers.substr(at, headers.find("\r\n", at) - at);
  }
};

class HttpClient {
 public:
  Status Connect(const Sockaddr& addr) {
    OSPREY_RETURN_NOT_OK(sock_.Init(addr));
    return sock_.Connect(addr);
  }
  // From `from`, an address of this host (port 0: any): every address of
  // 127.0.0.0/8 is loopback, so one test plays several peers.
  Status ConnectFrom(const Sockaddr& from, const Sockaddr& addr) {
    OSPREY_RETURN_NOT_OK(sock_.Init(addr));
    OSPREY_RETURN_NOT_OK(sock_.Bind(from));
    return sock_.Connect(addr);
  }
  Status SendRaw(const std::string& bytes) {
    return sock_.WriteAll(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  Status Get(const std::string& path, HttpReply* reply, const std::string& extra_headers = "") {
    OSPREY_RETURN_NOT_OK(
        SendRaw("GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers + "\r\n"));
    return Read(reply);
  }
  // Reads one response, waiting at most `timeout` for it.
  Status Read(HttpReply* reply, MonoDelta timeout = MonoDelta::FromSeconds(20)) {
    MonoTime deadline = MonoTime::Now() + timeout;
    while (true) {
      size_t head_end = buf_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::string head = buf_.substr(0, head_end + 2);
        size_t cl = head.find("Content-Length: ");
        size_t len = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 16));
        if (buf_.size() >= head_end + 4 + len) {
          reply->headers = head;
          reply->status = std::stoi(head.substr(9, 3));
          reply->body = buf_.substr(head_end + 4, len);
          buf_.erase(0, head_end + 4 + len);
          return Status::OK();
        }
      }
      OSPREY_RETURN_NOT_OK(ReadSome(deadline));
    }
  }
  // True if the server closed the connection within `timeout` (reading
  // and dropping anything it sent first).
  bool ClosedWithin(MonoDelta timeout) {
    MonoTime deadline = MonoTime::Now() + timeout;
    while (true) {
      Status s = ReadSome(deadline);
      if (s.IsNetworkError()) return true;
      if (!s.ok()) return false;
      buf_.clear();
    }
  }

 private:
  Status ReadSome(MonoTime deadline) {
    int ms = static_cast<int>((deadline - MonoTime::Now()).ToMilliseconds());
    if (ms <= 0) return Status::TimedOut("no HTTP response in time");
    pollfd p{sock_.fd(), POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return Status::TimedOut("no HTTP response in time");
    uint8_t chunk[65536];
    size_t n = 0;
    OSPREY_RETURN_NOT_OK(sock_.Read(chunk, sizeof(chunk), &n));
    if (n == 0) return Status::NetworkError("server closed the connection");
    buf_.append(reinterpret_cast<const char*>(chunk), n);
    return Status::OK();
  }

  Socket sock_;
  std::string buf_;
};

}  // namespace osprey::rpc_test
