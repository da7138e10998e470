#include "osprey/wire/header_view.h"

#include "osprey/wire/frame.h"

namespace osprey::wire {
namespace {

// A protobuf wire-format reader over a byte range. Each method returns false
// on malformed input.
class Reader {
 public:
  Reader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}
  bool done() const { return p_ == end_; }

  bool Varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      uint8_t b = *p_++;
      result |= uint64_t{static_cast<uint8_t>(b & 0x7f)} << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }
  bool Bytes(std::string_view* out) {
    uint64_t len;
    if (!Varint(&len) || len > static_cast<uint64_t>(end_ - p_)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(p_), static_cast<size_t>(len));
    p_ += len;
    return true;
  }
  // Skips a field of the given wire type; groups are refused.
  bool Skip(uint32_t wire_type) {
    uint64_t v;
    std::string_view s;
    switch (wire_type) {
      case 0:
        return Varint(&v);
      case 1:
        return Advance(8);
      case 2:
        return Bytes(&s);
      case 5:
        return Advance(4);
      default:
        return false;
    }
  }
  bool Tag(uint32_t* field, uint32_t* wire_type) {
    uint64_t tag;
    if (!Varint(&tag) || tag > UINT32_MAX || (tag >> 3) == 0) return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<uint32_t>(tag & 7);
    return true;
  }

 private:
  bool Advance(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    p_ += n;
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

Reader ReaderOf(std::string_view s) {
  auto* p = reinterpret_cast<const uint8_t*>(s.data());
  return Reader(p, p + s.size());
}

// A repeated uint32, unpacked (one varint) or packed (wire type 2), of at
// most `max` entries in all: past that, false with *limit saying so, before
// the entry is stored.
bool ReadRepeatedUint32(Reader* r, uint32_t wire_type, std::vector<uint32_t>* out, size_t max,
                        HeaderLimit which, HeaderLimit* limit) {
  auto add = [&](uint64_t v) {
    if (out->size() >= max) {
      *limit = which;
      return false;
    }
    out->push_back(static_cast<uint32_t>(v));
    return true;
  };
  if (wire_type == 0) {
    uint64_t v;
    return r->Varint(&v) && add(v);
  }
  std::string_view packed;
  if (!r->Bytes(&packed)) return false;
  Reader pr = ReaderOf(packed);
  while (!pr.done()) {
    uint64_t v;
    if (!pr.Varint(&v) || !add(v)) return false;
  }
  return true;
}

}  // namespace

std::string HeaderLimitMessage(HeaderLimit limit) {
  switch (limit) {
    case HeaderLimit::kNone:
      break;
    case HeaderLimit::kSidecars:
      return "more than " + std::to_string(kMaxSidecars) + " sidecars";
    case HeaderLimit::kFeatureFlags:
      return "more than " + std::to_string(kMaxFeatureFlags) + " required feature flags";
  }
  return "";
}

bool RequestHeaderView::ParsePartialFromArray(const void* data, size_t size) {
  auto* p = static_cast<const uint8_t*>(data);
  Reader r(p, p + size);
  while (!r.done()) {
    uint32_t field, wt;
    if (!r.Tag(&field, &wt)) return false;
    uint64_t v;
    if (field == 3 && wt == 0) {  // call_id: int32, sign-extended varint
      if (!r.Varint(&v)) return false;
      call_id_ = static_cast<int32_t>(static_cast<uint32_t>(v));
      has_call_id_ = true;
    } else if (field == 6 && wt == 2) {  // remote_method: merged like protobuf
      std::string_view m;
      if (!r.Bytes(&m)) return false;
      has_remote_method_ = true;
      Reader mr = ReaderOf(m);
      while (!mr.done()) {
        uint32_t mf, mwt;
        if (!mr.Tag(&mf, &mwt)) return false;
        if (mf == 1 && mwt == 2) {
          if (!mr.Bytes(&remote_method_.service_name_)) return false;
          remote_method_.has_service_name_ = true;
        } else if (mf == 2 && mwt == 2) {
          if (!mr.Bytes(&remote_method_.method_name_)) return false;
          remote_method_.has_method_name_ = true;
        } else if (!mr.Skip(mwt)) {
          return false;
        }
      }
    } else if (field == 10 && wt == 0) {
      if (!r.Varint(&v)) return false;
      timeout_millis_ = static_cast<uint32_t>(v);
      has_timeout_millis_ = true;
    } else if (field == 11 && (wt == 0 || wt == 2)) {
      if (!ReadRepeatedUint32(&r, wt, &feature_flags_, kMaxFeatureFlags, HeaderLimit::kFeatureFlags,
                              &limit_exceeded_)) {
        return false;
      }
    } else if (field == 15 && wt == 2) {
      if (!r.Bytes(&request_id_)) return false;
      has_request_id_ = true;
    } else if (field == 16 && (wt == 0 || wt == 2)) {
      if (!ReadRepeatedUint32(&r, wt, &sidecar_offsets_, kMaxSidecars, HeaderLimit::kSidecars,
                              &limit_exceeded_)) {
        return false;
      }
    } else if (!r.Skip(wt)) {
      return false;
    }
  }
  return true;
}

bool RequestHeaderView::IsInitialized() const {
  return has_call_id_ && (!has_remote_method_ ||
                          (remote_method_.has_service_name_ && remote_method_.has_method_name_));
}

std::string RequestHeaderView::InitializationErrorString() const {
  std::string missing;
  auto add = [&](const char* f) {
    if (!missing.empty()) missing += ", ";
    missing += f;
  };
  if (!has_call_id_) add("call_id");
  if (has_remote_method_ && !remote_method_.has_service_name_) add("remote_method.service_name");
  if (has_remote_method_ && !remote_method_.has_method_name_) add("remote_method.method_name");
  return missing;
}

bool ResponseHeaderView::ParsePartialFromArray(const void* data, size_t size) {
  auto* p = static_cast<const uint8_t*>(data);
  Reader r(p, p + size);
  while (!r.done()) {
    uint32_t field, wt;
    if (!r.Tag(&field, &wt)) return false;
    uint64_t v;
    if (field == 1 && wt == 0) {
      if (!r.Varint(&v)) return false;
      call_id_ = static_cast<int32_t>(static_cast<uint32_t>(v));
      has_call_id_ = true;
    } else if (field == 2 && wt == 0) {
      if (!r.Varint(&v)) return false;
      is_error_ = v != 0;
      has_is_error_ = true;
    } else if (field == 3 && (wt == 0 || wt == 2)) {
      if (!ReadRepeatedUint32(&r, wt, &sidecar_offsets_, kMaxSidecars, HeaderLimit::kSidecars,
                              &limit_exceeded_)) {
        return false;
      }
    } else if (!r.Skip(wt)) {
      return false;
    }
  }
  return true;
}

}  // namespace osprey::wire
