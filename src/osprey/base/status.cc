#include "osprey/base/status.h"

#include <cstring>

namespace osprey {

Status::Status(Code code, std::string_view msg, int posix_errno)
    : state_(std::make_shared<State>(State{code, posix_errno, std::string(msg)})) {}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

const char* Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kNetworkError:
      return "Network error";
    case Code::kTimedOut:
      return "Timed out";
    case Code::kAborted:
      return "Aborted";
    case Code::kRemoteError:
      return "Remote error";
    case Code::kInvalidArgument:
      return "Invalid argument";
    case Code::kCorruption:
      return "Corruption";
    case Code::kServiceUnavailable:
      return "Service unavailable";
    case Code::kNotAuthorized:
      return "Not authorized";
    case Code::kIllegalState:
      return "Illegal state";
    case Code::kNotFound:
      return "Not found";
    case Code::kIOError:
      return "IO error";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = CodeName(state_->code);
  s += ": ";
  s += state_->message;
  if (state_->posix_errno != 0) {
    char buf[128];
    // GNU strerror_r returns a pointer that may or may not be buf.
    const char* text = strerror_r(state_->posix_errno, buf, sizeof(buf));
    s += ": ";
    s += text;
    s += " (error " + std::to_string(state_->posix_errno) + ")";
  }
  return s;
}

Status Status::CloneAndPrepend(std::string_view prefix) const {
  if (ok()) return *this;
  std::string msg(prefix);
  msg += ": ";
  msg += state_->message;
  return Status(state_->code, msg, state_->posix_errno);
}

}  // namespace osprey
