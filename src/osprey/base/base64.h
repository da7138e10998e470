// Base64 (RFC 4648's standard alphabet, with padding) by OpenSSL: etcd's
// keys and values, and the tokens of HTTP's Negotiate authentication. Pure
// functions; any thread.
#pragma once

#include <string>
#include <string_view>

namespace osprey {

std::string Base64Encode(std::string_view in);
// False, with *out empty, unless `in` is exactly that form: no blanks, no
// line breaks, no URL-safe alphabet, padding only at the end.
bool Base64Decode(std::string_view in, std::string* out);

}  // namespace osprey
