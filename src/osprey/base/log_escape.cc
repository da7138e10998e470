#include "osprey/base/log_escape.h"

#include <cstdint>

namespace osprey {

namespace {

// The length of the valid UTF-8 sequence at the start of `s` that is
// neither a C1 control nor a line or paragraph separator, or 0.
size_t KeptUtf8Length(std::string_view s) {
  auto at = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  auto continuation = [&](size_t i, uint8_t lo = 0x80, uint8_t hi = 0xbf) {
    return i < s.size() && at(i) >= lo && at(i) <= hi;
  };
  const uint8_t b = at(0);
  if (b >= 0xc2 && b <= 0xdf) {
    // U+0080 to U+009F (C2 80 to C2 9F) are C1 controls: CSI is C2 9B.
    return continuation(1, b == 0xc2 ? 0xa0 : 0x80) ? 2 : 0;
  }
  if (b >= 0xe0 && b <= 0xef) {
    // E0: no overlong forms; ED: no UTF-16 surrogates.
    const uint8_t lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
    if (!continuation(1, lo, hi) || !continuation(2)) return 0;
    if (b == 0xe2 && at(1) == 0x80 && (at(2) == 0xa8 || at(2) == 0xa9)) return 0;  // U+2028/9
    return 3;
  }
  if (b >= 0xf0 && b <= 0xf4) {
    // F0: no overlong forms; F4: nothing past U+10FFFF.
    const uint8_t lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
    return continuation(1, lo, hi) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string EscapeForLog(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b >= 0x20 && b < 0x7f) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    if (b >= 0x80) {
      if (size_t n = KeptUtf8Length(text.substr(i)); n > 0) {
        out.append(text.substr(i, n));
        i += n;
        continue;
      }
    }
    switch (b) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += "\\x";
        out.push_back(kHex[b >> 4]);
        out.push_back(kHex[b & 0xf]);
    }
    ++i;
  }
  return out;
}

}  // namespace osprey
