#include "osprey/base/base64.h"

#include <glog/logging.h>
#include <openssl/evp.h>

#include <climits>

namespace osprey {

std::string Base64Encode(std::string_view in) {
  CHECK_LE(in.size(), static_cast<size_t>(INT_MAX / 2)) << "too long to encode";
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

bool Base64Decode(std::string_view in, std::string* out) {
  out->clear();
  // EVP_DecodeBlock also takes surrounding blanks and pads '=' with zero
  // bytes: only the exact form is let through to it.
  if (in.size() % 4 != 0 || in.size() > static_cast<size_t>(INT_MAX / 2)) return false;
  size_t padding = 0;
  while (padding < 2 && padding < in.size() && in[in.size() - 1 - padding] == '=') padding++;
  for (size_t i = 0; i + padding < in.size(); ++i) {
    const char c = in[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
          c == '/')) {
      return false;
    }
  }
  if (in.empty()) return true;
  out->resize(in.size() / 4 * 3);
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out->data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0 || static_cast<size_t>(n) != out->size()) {
    out->clear();
    return false;
  }
  out->resize(out->size() - padding);
  return true;
}

}  // namespace osprey
