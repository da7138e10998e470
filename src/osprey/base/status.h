// Status: the outcome of an operation, OK or an error code with a message.
// A plain value; any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace osprey {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kNetworkError,
    kTimedOut,
    kAborted,
    kRemoteError,
    kInvalidArgument,
    kCorruption,
    kServiceUnavailable,
    kNotAuthorized,
    kIllegalState,
    kNotFound,
    kIOError,
  };

  Status() = default;  // OK
  static Status OK() { return Status(); }

#define OSPREY_STATUS_FACTORY(Name)                               \
  static Status Name(std::string_view msg, int posix_errno = 0) { \
    return Status(Code::k##Name, msg, posix_errno);               \
  }                                                               \
  bool Is##Name() const { return code() == Code::k##Name; }
  OSPREY_STATUS_FACTORY(NetworkError)
  OSPREY_STATUS_FACTORY(TimedOut)
  OSPREY_STATUS_FACTORY(Aborted)
  OSPREY_STATUS_FACTORY(RemoteError)
  OSPREY_STATUS_FACTORY(InvalidArgument)
  OSPREY_STATUS_FACTORY(Corruption)
  OSPREY_STATUS_FACTORY(ServiceUnavailable)
  OSPREY_STATUS_FACTORY(NotAuthorized)
  OSPREY_STATUS_FACTORY(IllegalState)
  OSPREY_STATUS_FACTORY(NotFound)
  OSPREY_STATUS_FACTORY(IOError)
#undef OSPREY_STATUS_FACTORY

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  // The message without the code name; empty for OK.
  const std::string& message() const;
  // errno the error came from, or 0.
  int posix_errno() const { return state_ ? state_->posix_errno : 0; }
  // "Network error: connect to 127.0.0.1:1: Connection refused (error 111)".
  std::string ToString() const;
  static const char* CodeName(Code code);

  // A copy whose message is "<prefix>: <message>".
  Status CloneAndPrepend(std::string_view prefix) const;

  bool operator==(const Status& o) const { return code() == o.code() && message() == o.message(); }

 private:
  Status(Code code, std::string_view msg, int posix_errno);
  struct State {
    Code code;
    int posix_errno;
    std::string message;
  };
  // Shared and immutable: copying a Status is cheap and OK costs nothing.
  std::shared_ptr<const State> state_;
};

}  // namespace osprey

#define OSPREY_RETURN_NOT_OK(expr) \
  do {                             \
    ::osprey::Status _s = (expr);  \
    if (!_s.ok()) return _s;       \
  } while (0)
