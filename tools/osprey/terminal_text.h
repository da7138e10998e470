// Text a server chose (error messages, service and message names), made
// safe for a terminal: a server could otherwise send escape sequences that
// move the cursor, rewrite what the user sees, retitle the window or, on
// some terminals, answer back. Plain functions; any thread.
#pragma once

#include <string>
#include <string_view>

namespace osprey::cli {

// `text` with every C0 control byte but newline and tab, DEL, every C1
// control (U+0080..U+009F, as UTF-8) and every byte that is not part of
// well-formed UTF-8 (among them a lone 0x80..0x9f, a C1 control on
// terminals with 8-bit controls) written as \xNN, and every backslash as
// \\ so that what is shown tells the two apart.
std::string EscapeForTerminal(std::string_view text);

// `text` as it goes to file descriptor `fd`: escaped when `fd` is a
// terminal, as it is otherwise (a pipe or a file gets the exact bytes).
std::string ForOutput(int fd, std::string_view text);

}  // namespace osprey::cli
