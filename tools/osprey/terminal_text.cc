#include "terminal_text.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>

namespace osprey::cli {

namespace {

// The length (2 to 4) of the well-formed UTF-8 sequence starting at
// text[i], a byte of 0x80 or above, with its code point in *cp; 0 if none
// starts there (a stray continuation byte, an overlong form, a surrogate,
// a sequence cut short).
size_t Utf8Sequence(std::string_view text, size_t i, uint32_t* cp) {
  auto byte = [&text](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  size_t len;
  uint32_t least;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    *cp = c & 0x1f;
    least = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    *cp = c & 0x0f;
    least = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    *cp = c & 0x07;
    least = 0x10000;
  } else {
    return 0;
  }
  if (text.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    *cp = (*cp << 6) | (byte(i + k) & 0x3f);
  }
  if (*cp < least || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) return 0;
  return len;
}

}  // namespace

std::string EscapeForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto hex = [&out](unsigned char c) {
    char buf[5];
    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
    out += buf;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\\') {
        out += "\\\\";
      } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        hex(c);
      } else {
        out += static_cast<char>(c);
      }
      continue;
    }
    uint32_t cp = 0;
    const size_t len = Utf8Sequence(text, i, &cp);
    if (len == 0) {
      // Not UTF-8: a lone byte. One of 0x80-0x9f is a C1 control itself on
      // a terminal with 8-bit controls (0x9b is CSI); no such byte is text.
      hex(c);
    } else if (cp <= 0x9f) {
      for (size_t k = 0; k < len; ++k) hex(static_cast<unsigned char>(text[i + k]));
      i += len - 1;  // a C1 control as UTF-8, such as CSI (U+009B)
    } else {
      out.append(text.substr(i, len));
      i += len - 1;
    }
  }
  return out;
}

std::string ForOutput(int fd, std::string_view text) {
  return isatty(fd) ? EscapeForTerminal(text) : std::string(text);
}

}  // namespace osprey::cli
