#include "osprey/base/socket.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <string>

namespace osprey {

Socket::~Socket() { Close(); }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.Release();
  }
  return *this;
}

int Socket::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::Close() {
  if (fd_ < 0) return;
  // The descriptor is released whatever close() says (Linux frees it even
  // on EINTR), so there is nothing for a caller to retry or undo.
  (void)::close(Release());
}

Status Socket::Init(const Sockaddr& for_addr) {
  Close();
  int fd = ::socket(for_addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::NetworkError("socket", errno);
  fd_ = fd;
  return Status::OK();
}

Status Socket::SetNonBlocking(bool enabled) {
  int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0) return Status::NetworkError("fcntl(F_GETFL)", errno);
  flags = enabled ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd_, F_SETFL, flags) < 0) return Status::NetworkError("fcntl(F_SETFL)", errno);
  return Status::OK();
}

Status Socket::SetNoDelay(bool enabled) {
  int v = enabled ? 1 : 0;
  if (::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) != 0) {
    return Status::NetworkError("setsockopt(TCP_NODELAY)", errno);
  }
  return Status::OK();
}

Status Socket::SetTcpKeepalive(const TcpKeepalive& k) {
  auto set = [this](int level, int name, int v, const char* what) -> Status {
    if (::setsockopt(fd_, level, name, &v, sizeof(v)) != 0) {
      return Status::NetworkError(std::string("setsockopt(") + what + ")", errno);
    }
    return Status::OK();
  };
  auto seconds = [](MonoDelta d) {
    return static_cast<int>(std::clamp<int64_t>((d.ToMilliseconds() + 999) / 1000, 1, 32767));
  };
  OSPREY_RETURN_NOT_OK(set(SOL_SOCKET, SO_KEEPALIVE, k.enabled ? 1 : 0, "SO_KEEPALIVE"));
  if (k.enabled) {
    OSPREY_RETURN_NOT_OK(set(IPPROTO_TCP, TCP_KEEPIDLE, seconds(k.idle), "TCP_KEEPIDLE"));
    OSPREY_RETURN_NOT_OK(set(IPPROTO_TCP, TCP_KEEPINTVL, seconds(k.interval), "TCP_KEEPINTVL"));
    OSPREY_RETURN_NOT_OK(set(IPPROTO_TCP, TCP_KEEPCNT, std::clamp(k.count, 1, 127), "TCP_KEEPCNT"));
  }
  int64_t user_ms = k.user_timeout.ToMilliseconds();
  int user = user_ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(user_ms, INT32_MAX));
  return set(IPPROTO_TCP, TCP_USER_TIMEOUT, user, "TCP_USER_TIMEOUT");
}

Status Socket::SetReuseAddr(bool enabled) {
  int v = enabled ? 1 : 0;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v)) != 0) {
    return Status::NetworkError("setsockopt(SO_REUSEADDR)", errno);
  }
  return Status::OK();
}

Status Socket::Bind(const Sockaddr& addr) {
  if (::bind(fd_, addr.addr(), addr.addrlen()) != 0) {
    return Status::NetworkError("bind to " + addr.ToString(), errno);
  }
  return Status::OK();
}

Status Socket::Listen(int backlog) {
  if (::listen(fd_, backlog) != 0) return Status::NetworkError("listen", errno);
  return Status::OK();
}

Status Socket::Accept(Socket* new_conn, Sockaddr* remote, bool nonblocking) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int flags = SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
  int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, flags);
  if (fd < 0) return Status::NetworkError("accept", errno);
  *new_conn = Socket(fd);
  if (remote) *remote = Sockaddr::FromNative(reinterpret_cast<sockaddr*>(&ss), len);
  return Status::OK();
}

Status Socket::Connect(const Sockaddr& remote, bool* in_progress) {
  if (in_progress) *in_progress = false;
  int rc;
  do {
    rc = ::connect(fd_, remote.addr(), remote.addrlen());
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return Status::OK();
  if (errno == EINPROGRESS && in_progress) {
    *in_progress = true;
    return Status::OK();
  }
  return Status::NetworkError("connect to " + remote.ToString(), errno);
}

Status Socket::GetSocketError() {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return Status::NetworkError("getsockopt(SO_ERROR)", errno);
  }
  if (err != 0) return Status::NetworkError("socket error", err);
  return Status::OK();
}

Status Socket::GetLocalAddress(Sockaddr* out) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Status::NetworkError("getsockname", errno);
  }
  *out = Sockaddr::FromNative(reinterpret_cast<sockaddr*>(&ss), len);
  return Status::OK();
}

Status Socket::GetPeerAddress(Sockaddr* out) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Status::NetworkError("getpeername", errno);
  }
  *out = Sockaddr::FromNative(reinterpret_cast<sockaddr*>(&ss), len);
  return Status::OK();
}

Status Socket::Read(uint8_t* buf, size_t len, size_t* n) {
  *n = 0;
  ssize_t r;
  do {
    r = ::recv(fd_, buf, len, 0);
  } while (r < 0 && errno == EINTR);
  if (r > 0) {
    *n = static_cast<size_t>(r);
    return Status::OK();
  }
  if (r == 0) return Status::NetworkError("connection closed by peer", ECONNRESET);
  if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
  return Status::NetworkError("recv", errno);
}

Status Socket::Writev(const iovec* iov, int iovcnt, size_t* n) {
  *n = 0;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  ssize_t r;
  do {
    // sendmsg rather than writev: MSG_NOSIGNAL keeps a vanished peer from
    // raising SIGPIPE in the whole process.
    r = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
  } while (r < 0 && errno == EINTR);
  if (r >= 0) {
    *n = static_cast<size_t>(r);
    return Status::OK();
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
  return Status::NetworkError("sendmsg", errno);
}

Status Socket::WriteAll(const uint8_t* buf, size_t len) {
  while (len > 0) {
    ssize_t r = ::send(fd_, buf, len, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::NetworkError("send", errno);
    }
    buf += r;
    len -= static_cast<size_t>(r);
  }
  return Status::OK();
}

Status Socket::ReadAll(uint8_t* buf, size_t len) {
  while (len > 0) {
    ssize_t r = ::recv(fd_, buf, len, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::NetworkError("recv", errno);
    }
    if (r == 0) return Status::NetworkError("connection closed by peer", ECONNRESET);
    buf += r;
    len -= static_cast<size_t>(r);
  }
  return Status::OK();
}

}  // namespace osprey
