// EventFd: owns one eventfd, the counter by which one thread wakes another
// that sleeps in poll or epoll_wait on it. The only code that makes,
// writes (Signal) and drains an eventfd: a wake-up is one write and taking
// it one read, whoever does them, so that no caller adds a system call or
// mistakes the EAGAIN that means "already written" for an error.
//
// A descriptor written after its owner closed it writes whatever took its
// number since, a socket most likely; so only the owner closes it, and the
// threads that write or drain it while the owner keeps it hold an
// EventFdRef, which can do nothing else. How long an EventFdRef stays
// valid is its owner's rule, stated and checked where the owner is: a
// blocking caller's is lent (transport::WakeFdLease), a worker's is its
// connection's (transport::Connection::worker_wake_fd()).
#pragma once

namespace osprey {

class EventFd;

// A non-owning handle to an EventFd's descriptor: it signals and drains,
// but neither closes nor outlives the rule its owner states. Copyable;
// only an EventFd makes one, so that no other number is written as an
// eventfd. Any thread.
class EventFdRef {
 public:
  EventFdRef() = default;

  int fd() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  // Adds one to the counter: a poll on it returns. One write; a counter
  // already written stays so (the wake-up is pending either way). An
  // empty handle's write fails and does nothing: holders whose rule makes
  // that a bug DCHECK it themselves (WakeFdLease::Wake).
  void Signal() const;
  // Takes the wake-up: true if the counter was written (it is zero after).
  // One read, which does not block.
  bool Drain() const;

  friend bool operator==(EventFdRef a, EventFdRef b) { return a.fd_ == b.fd_; }

 private:
  friend class EventFd;
  explicit EventFdRef(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Move-only; closed when destroyed. Any thread, as its owner's rules say.
class EventFd {
 public:
  EventFd() = default;
  ~EventFd() { Close(); }
  EventFd(EventFd&& other) noexcept : fd_(other.Release()) {}
  EventFd& operator=(EventFd&& other) noexcept;
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  // A new eventfd, non-blocking and close-on-exec, its counter zero. If
  // the process is out of descriptors, an empty one, with errno saying why.
  static EventFd Create();
  // Takes back a descriptor Release() gave up (-1: an empty one): for an
  // owner that keeps a spare in one atomic word (Reactor's lent eventfds).
  static EventFd Adopt(int released_fd) {
    EventFd e;
    e.fd_ = released_fd;
    return e;
  }
  // Gives up ownership without closing; the number goes back through Adopt.
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Idempotent.
  void Close();

  int fd() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  EventFdRef ref() const { return EventFdRef(fd_); }
  void Signal() const { ref().Signal(); }
  bool Drain() const { return ref().Drain(); }

 private:
  int fd_ = -1;
};

}  // namespace osprey
