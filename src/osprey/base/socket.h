// Socket: owns one socket file descriptor (closed on destruction). Methods
// return a Status whose message carries the errno text. One owner thread at
// a time; the RPC layer touches a connection's Socket only on its reactor.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "osprey/base/connection_types.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"

namespace osprey {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.Release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // A new TCP socket for the family of `for_addr`, close-on-exec.
  Status Init(const Sockaddr& for_addr);
  int fd() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  int Release();
  // Idempotent. Never fails in a way a caller could act on: the
  // descriptor is gone either way.
  void Close();

  Status SetNonBlocking(bool enabled);
  Status SetNoDelay(bool enabled);
  Status SetReuseAddr(bool enabled);
  // A TCP socket's keepalive and user timeout, as `k` says; the kernel
  // counts in whole seconds (keepalive) and milliseconds (user timeout), so
  // shorter settings round up to 1 s and 1 ms.
  Status SetTcpKeepalive(const TcpKeepalive& k);

  Status Bind(const Sockaddr& addr);
  Status Listen(int backlog);
  // Accepts one connection; non-blocking and close-on-exec as asked.
  // IsNetworkError with posix_errno EAGAIN when none is waiting.
  Status Accept(Socket* new_conn, Sockaddr* remote, bool nonblocking);
  // For a non-blocking socket, EINPROGRESS is returned as OK with
  // *in_progress set; check GetSocketError() once writable.
  Status Connect(const Sockaddr& remote, bool* in_progress = nullptr);
  Status GetSocketError();
  Status GetLocalAddress(Sockaddr* out) const;
  Status GetPeerAddress(Sockaddr* out) const;

  // Non-blocking I/O. *n is bytes moved; 0 with OK means "would block".
  // A peer that closed makes Read return NetworkError.
  Status Read(uint8_t* buf, size_t len, size_t* n);
  Status Writev(const iovec* iov, int iovcnt, size_t* n);
  // Blocking helpers for tests and tools: all of it, or an error.
  Status WriteAll(const uint8_t* buf, size_t len);
  Status ReadAll(uint8_t* buf, size_t len);

 private:
  int fd_ = -1;
};

}  // namespace osprey
