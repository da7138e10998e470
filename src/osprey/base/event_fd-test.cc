// EventFd: a signal is seen by poll and taken by one drain, however many
// came before it; ownership moves and closes exactly once; a handle writes
// the owner's descriptor and nothing else.
#include "osprey/base/event_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <utility>

namespace osprey {
namespace {

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

TEST(EventFdTest, CreatedEmptyNonBlockingAndCloseOnExec) {
  EventFd e = EventFd::Create();
  ASSERT_TRUE(e);
  EXPECT_FALSE(Readable(e.fd()));
  EXPECT_FALSE(e.Drain()) << "a drain of an unwritten counter must not block or succeed";
  EXPECT_NE(0, ::fcntl(e.fd(), F_GETFL) & O_NONBLOCK);
  EXPECT_NE(0, ::fcntl(e.fd(), F_GETFD) & FD_CLOEXEC);
}

TEST(EventFdTest, SignalsAddUpAndOneDrainTakesThemAll) {
  EventFd e = EventFd::Create();
  ASSERT_TRUE(e);
  e.Signal();
  e.Signal();
  e.ref().Signal();
  EXPECT_TRUE(Readable(e.fd()));
  EXPECT_TRUE(e.Drain());
  EXPECT_FALSE(Readable(e.fd()));
  EXPECT_FALSE(e.ref().Drain());
}

TEST(EventFdTest, ASignalWakesAThreadInPoll) {
  EventFd e = EventFd::Create();
  ASSERT_TRUE(e);
  EventFdRef ref = e.ref();
  std::thread waker([ref] { ref.Signal(); });
  pollfd p{e.fd(), POLLIN, 0};
  EXPECT_EQ(1, ::poll(&p, 1, 10000));
  waker.join();
  EXPECT_TRUE(ref.Drain());
}

TEST(EventFdTest, MovedOwnershipClosesOnce) {
  EventFd a = EventFd::Create();
  ASSERT_TRUE(a);
  const int fd = a.fd();
  EventFd b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(fd, b.fd());
  {
    EventFd c;
    c = std::move(b);
    EXPECT_TRUE(IsOpen(fd));
  }
  EXPECT_FALSE(IsOpen(fd)) << "the last owner closes it";
}

TEST(EventFdTest, ReleaseAndAdoptHandTheSameDescriptorBack) {
  EventFd a = EventFd::Create();
  ASSERT_TRUE(a);
  const int fd = a.Release();
  EXPECT_FALSE(a);
  EXPECT_TRUE(IsOpen(fd)) << "released, not closed";
  EventFd b = EventFd::Adopt(fd);
  EXPECT_EQ(fd, b.fd());
  b.Close();
  b.Close();  // idempotent
  EXPECT_FALSE(b);
  EXPECT_FALSE(IsOpen(fd));
  EXPECT_FALSE(EventFd::Adopt(-1));
}

TEST(EventFdTest, HandlesCompareByDescriptorAndEmptyOnesDoNothing) {
  EventFd a = EventFd::Create(), b = EventFd::Create();
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a.ref() == a.ref());
  EXPECT_FALSE(a.ref() == b.ref());
  EventFdRef none;
  EXPECT_FALSE(none);
  none.Signal();  // fails, touching no descriptor
  EXPECT_FALSE(none.Drain());
  EXPECT_FALSE(Readable(a.fd()));
  EXPECT_FALSE(Readable(b.fd()));
}

}  // namespace
}  // namespace osprey
