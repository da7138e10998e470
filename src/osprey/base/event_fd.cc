#include "osprey/base/event_fd.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace osprey {

void EventFdRef::Signal() const {
  uint64_t one = 1;
  ssize_t n = ::write(fd_, &one, sizeof(one));
  (void)n;  // EAGAIN: the counter is at its maximum, a wake-up is pending
}

bool EventFdRef::Drain() const {
  uint64_t v;
  // An eventfd's read returns the whole counter and zeroes it: one read
  // takes every write so far.
  return ::read(fd_, &v, sizeof(v)) == static_cast<ssize_t>(sizeof(v));
}

EventFd& EventFd::operator=(EventFd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.Release();
  }
  return *this;
}

EventFd EventFd::Create() {
  EventFd e;
  e.fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return e;
}

void EventFd::Close() {
  if (fd_ < 0) return;
  // Released whatever close() says (Linux frees it even on EINTR).
  (void)::close(Release());
}

}  // namespace osprey
