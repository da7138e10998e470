// EscapeForLog: text that a peer chose (a SASL mechanism, a user name, a
// request line), made safe to put in a log line. Without it, a peer that
// sends "x\nE1206 00:00:00 auth.cc:42] ..." writes a line of its own into
// the server's log, and one that sends terminal controls drives the
// terminal of whoever reads the log.
#pragma once

#include <string>
#include <string_view>

namespace osprey {

// `text` with every byte that could break a log line or drive a terminal
// written as an escape: newline, carriage return and tab as \n, \r and \t;
// other control bytes (below 0x20, and 0x7f), the bytes of C1 controls
// (U+0080 to U+009F) and of the Unicode line and paragraph separators
// (U+2028, U+2029), and bytes that are not valid UTF-8 as \xNN. Printable
// ASCII and other valid UTF-8 are kept.
//
// Backslashes are kept too, so that escaping twice changes nothing: a
// message escaped where it is built reads the same after the log sink
// escapes the whole line. A peer can write the two characters "\n", never
// a line break.
std::string EscapeForLog(std::string_view text);

}  // namespace osprey
