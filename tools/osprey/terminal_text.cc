#include "terminal_text.h"

#include <unistd.h>

#include <cstdio>

namespace osprey::cli {

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
    if (c == '\\') {
      out += "\\\\";
    } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      hex(c);
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      hex(c);  // a C1 control, such as CSI (U+009B)
      hex(static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string ForOutput(int fd, std::string_view text) {
  return isatty(fd) ? EscapeForTerminal(text) : std::string(text);
}

}  // namespace osprey::cli
