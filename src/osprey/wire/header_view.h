// RequestHeaderView and ResponseHeaderView: the frame headers as the
// connections read them on every call, parsed by hand into views of the
// frame's bytes: no allocation, and several times faster than the protobuf
// classes (bench/wire-microbench.cc). They accept what protobuf accepts for
// these messages: fields in any order, repeated scalars packed or not, the
// last of a repeated singular field winning, unknown fields skipped. The
// differences: a group (wire types 3 and 4, unused by KRPC) is refused, and
// request_id is kept as its bytes (the last one), for the rare method that
// tracks results to parse. The Slices point into the frame; InboundFrame
// keeps those bytes alive. Plain values; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "osprey/base/slice.h"

namespace osprey::wire {

// Which count limit of frame.h a header went past, if any. One byte in the
// view: the message is made only for the error.
enum class HeaderLimit : uint8_t { kNone, kSidecars, kFeatureFlags };
std::string HeaderLimitMessage(HeaderLimit limit);

class RequestHeaderView {
 public:
  class RemoteMethod {
   public:
    std::string_view service_name() const { return service_name_; }
    std::string_view method_name() const { return method_name_; }

   private:
    friend class RequestHeaderView;
    std::string_view service_name_;
    std::string_view method_name_;
    bool has_service_name_ = false;
    bool has_method_name_ = false;
  };

  // False if the bytes are not a well-formed message. A size_t, not
  // protobuf's int: no length can turn negative.
  bool ParsePartialFromArray(const void* data, size_t size);
  // True when required fields are present (call_id; in remote_method, both
  // names).
  bool IsInitialized() const;
  std::string InitializationErrorString() const;
  static const char* TypeName() { return "RequestHeader"; }
  // After ParsePartialFromArray returned false: which count limit the
  // header went past (frame.h), or empty if it was malformed.
  std::string limit_exceeded() const { return HeaderLimitMessage(limit_exceeded_); }

  int32_t call_id() const { return call_id_; }
  bool has_remote_method() const { return has_remote_method_; }
  const RemoteMethod& remote_method() const { return remote_method_; }
  bool has_timeout_millis() const { return has_timeout_millis_; }
  uint32_t timeout_millis() const { return timeout_millis_; }
  const std::vector<uint32_t>& required_feature_flags() const { return feature_flags_; }
  bool has_request_id() const { return has_request_id_; }
  // The serialized RequestIdPB.
  std::string_view request_id_pb() const { return request_id_; }
  const std::vector<uint32_t>& sidecar_offsets() const { return sidecar_offsets_; }
  int sidecar_offsets_size() const { return static_cast<int>(sidecar_offsets_.size()); }

 private:
  bool has_request_id_ = false;
  std::string_view request_id_;
  int32_t call_id_ = 0;
  bool has_call_id_ = false;
  bool has_remote_method_ = false;
  RemoteMethod remote_method_;
  bool has_timeout_millis_ = false;
  uint32_t timeout_millis_ = 0;
  std::vector<uint32_t> feature_flags_;
  std::vector<uint32_t> sidecar_offsets_;
  HeaderLimit limit_exceeded_ = HeaderLimit::kNone;
};

class ResponseHeaderView {
 public:
  bool ParsePartialFromArray(const void* data, size_t size);
  bool IsInitialized() const { return has_call_id_; }
  std::string InitializationErrorString() const { return has_call_id_ ? "" : "call_id"; }
  static const char* TypeName() { return "ResponseHeader"; }
  std::string limit_exceeded() const { return HeaderLimitMessage(limit_exceeded_); }

  int32_t call_id() const { return call_id_; }
  bool has_is_error() const { return has_is_error_; }
  bool is_error() const { return is_error_; }
  const std::vector<uint32_t>& sidecar_offsets() const { return sidecar_offsets_; }
  int sidecar_offsets_size() const { return static_cast<int>(sidecar_offsets_.size()); }

 private:
  int32_t call_id_ = 0;
  bool has_call_id_ = false;
  bool has_is_error_ = false;
  bool is_error_ = false;
  std::vector<uint32_t> sidecar_offsets_;
  HeaderLimit limit_exceeded_ = HeaderLimit::kNone;
};

}  // namespace osprey::wire
