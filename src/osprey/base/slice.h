// Slice: a non-owning view of bytes. The owner must outlive it. Any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace osprey {

class Slice {
 public:
  constexpr Slice() = default;
  constexpr Slice(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  Slice(const char* data, size_t size)
      : data_(reinterpret_cast<const uint8_t*>(data)), size_(size) {}
  Slice(const std::string& s) : Slice(s.data(), s.size()) {}  // NOLINT: implicit on purpose
  Slice(std::string_view s) : Slice(s.data(), s.size()) {}    // NOLINT
  Slice(const char* s) : Slice(s, std::strlen(s)) {}          // NOLINT

  const uint8_t* data() const { return data_; }
  const char* cdata() const { return reinterpret_cast<const char*>(data_); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint8_t operator[](size_t i) const { return data_[i]; }

  void remove_prefix(size_t n) {
    data_ += n;
    size_ -= n;
  }
  void truncate(size_t n) { size_ = n; }
  Slice sub(size_t pos, size_t len) const { return Slice(data_ + pos, len); }
  bool starts_with(Slice prefix) const {
    return size_ >= prefix.size_ && std::memcmp(data_, prefix.data_, prefix.size_) == 0;
  }

  std::string ToString() const { return std::string(cdata(), size_); }
  std::string_view ToStringView() const { return std::string_view(cdata(), size_); }
  // Printable form for logs: non-printing bytes as \xNN.
  std::string ToDebugString(size_t max_len = 64) const;

  bool operator==(const Slice& o) const {
    return size_ == o.size_ && (size_ == 0 || std::memcmp(data_, o.data_, size_) == 0);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace osprey
