#include "osprey/base/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace osprey {
namespace {

TEST(StatusTest, OkIsDefaultAndCheap) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.posix_errno(), 0);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(Status::OK(), s);
}

TEST(StatusTest, EachFactorySetsItsCode) {
  struct Case {
    Status status;
    Status::Code code;
    bool matches;
    const char* name;
  };
  const Case cases[] = {
      {Status::NetworkError("m"), Status::Code::kNetworkError,
       Status::NetworkError("m").IsNetworkError(), "Network error"},
      {Status::TimedOut("m"), Status::Code::kTimedOut, Status::TimedOut("m").IsTimedOut(),
       "Timed out"},
      {Status::Aborted("m"), Status::Code::kAborted, Status::Aborted("m").IsAborted(), "Aborted"},
      {Status::RemoteError("m"), Status::Code::kRemoteError,
       Status::RemoteError("m").IsRemoteError(), "Remote error"},
      {Status::InvalidArgument("m"), Status::Code::kInvalidArgument,
       Status::InvalidArgument("m").IsInvalidArgument(), "Invalid argument"},
      {Status::Corruption("m"), Status::Code::kCorruption, Status::Corruption("m").IsCorruption(),
       "Corruption"},
      {Status::ServiceUnavailable("m"), Status::Code::kServiceUnavailable,
       Status::ServiceUnavailable("m").IsServiceUnavailable(), "Service unavailable"},
      {Status::NotAuthorized("m"), Status::Code::kNotAuthorized,
       Status::NotAuthorized("m").IsNotAuthorized(), "Not authorized"},
      {Status::IllegalState("m"), Status::Code::kIllegalState,
       Status::IllegalState("m").IsIllegalState(), "Illegal state"},
      {Status::NotFound("m"), Status::Code::kNotFound, Status::NotFound("m").IsNotFound(),
       "Not found"},
      {Status::IOError("m"), Status::Code::kIOError, Status::IOError("m").IsIOError(), "IO error"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_TRUE(c.matches);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_STREQ(Status::CodeName(c.code), c.name);
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
  }
  // A predicate for one code is false for the others.
  EXPECT_FALSE(Status::Corruption("m").IsNetworkError());
  EXPECT_FALSE(Status::OK().IsCorruption());
}

TEST(StatusTest, ToStringCarriesErrnoText) {
  Status s = Status::NetworkError("connect to 127.0.0.1:1", ECONNREFUSED);
  EXPECT_EQ(s.posix_errno(), ECONNREFUSED);
  EXPECT_EQ(s.message(), "connect to 127.0.0.1:1");  // message() has no errno text
  EXPECT_EQ(s.ToString(), "Network error: connect to 127.0.0.1:1: Connection refused (error " +
                              std::to_string(ECONNREFUSED) + ")");
}

TEST(StatusTest, CloneAndPrependKeepsCodeAndErrno) {
  Status s = Status::NetworkError("recv", ECONNRESET).CloneAndPrepend("reading from peer");
  EXPECT_TRUE(s.IsNetworkError());
  EXPECT_EQ(s.message(), "reading from peer: recv");
  EXPECT_EQ(s.posix_errno(), ECONNRESET);
  EXPECT_NE(s.ToString().find("Connection reset by peer"), std::string::npos) << s.ToString();

  // Prepending to OK stays OK: callers wrap results unconditionally.
  EXPECT_TRUE(Status::OK().CloneAndPrepend("context").ok());
}

TEST(StatusTest, CopiesShareStateAndCompareByCodeAndMessage) {
  Status a = Status::Corruption("x");
  Status b = a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.message(), "x");
  EXPECT_FALSE(a == Status::Corruption("y"));
  EXPECT_FALSE(a == Status::IOError("x"));
}

Status ReturnsEarly(bool fail, int* reached) {
  OSPREY_RETURN_NOT_OK(fail ? Status::Aborted("stop") : Status::OK());
  ++*reached;
  return Status::OK();
}

TEST(StatusTest, ReturnNotOkMacro) {
  int reached = 0;
  EXPECT_TRUE(ReturnsEarly(false, &reached).ok());
  EXPECT_EQ(reached, 1);
  EXPECT_TRUE(ReturnsEarly(true, &reached).IsAborted());
  EXPECT_EQ(reached, 1);
}

}  // namespace
}  // namespace osprey
