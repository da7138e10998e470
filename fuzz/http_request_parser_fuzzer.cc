// The HTTP request parser of the RPC port (http-parser plus Osprey's
// bounds), fed arbitrary bytes in arbitrary pieces: it must never crash,
// leak or hang; each outcome must hold its invariants (a request has a
// method and a path within the head bound; an error has a 4xx status and a
// reason), and after an error it must stay in error. The Authorization
// header of each request goes through the Negotiate header's parser too.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "osprey/transport/http_negotiate.h"
#include "osprey/transport/http_request_parser.h"

using osprey::Slice;
using osprey::transport::HttpRequestParser;

static void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "invariant broken: %s\n", what);
    abort();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte sets the piece size, so that requests split anywhere.
  size_t piece = 1 + data[0] % 64;
  data++;
  size--;
  HttpRequestParser parser;
  size_t off = 0;
  int requests = 0;
  while (off < size) {
    size_t n = std::min(piece, size - off);
    size_t consumed = 0;
    HttpRequestParser::Result r = parser.Feed(Slice(data + off, n), &consumed);
    Check(consumed <= n, "consumed more than given");
    if (r == HttpRequestParser::Result::kError) {
      Check(parser.error_status() >= 400 && parser.error_status() < 500, "error status is 4xx");
      Check(!parser.error().empty(), "error has a reason");
      size_t again = 0;
      Check(parser.Feed(Slice(data, size), &again) == HttpRequestParser::Result::kError,
            "an error is final");
      return 0;
    }
    if (r == HttpRequestParser::Result::kRequest) {
      ++requests;
      Check(!parser.request().method.empty(), "a request has a method");
      Check(parser.request().path.size() <= HttpRequestParser::kMaxHeadBytes,
            "the path is within the head bound");
      // The pages' Kerberos login reads this header: a token comes out
      // only of "Negotiate <base64>", and is shorter than the header.
      const std::string& authorization = parser.request().authorization;
      Check(authorization.size() <= HttpRequestParser::kMaxHeadBytes,
            "the Authorization header is within the head bound");
      std::string token;
      osprey::Status ns = osprey::transport::ParseNegotiateHeader(authorization, &token);
      Check(ns.ok() || ns.IsInvalidArgument(), "a bad Negotiate header is InvalidArgument");
      Check(!ns.ok() || token.size() < authorization.size(), "a token is shorter than its header");
    } else {
      Check(consumed == n, "need-more takes every byte");
    }
    off += consumed;
    if (r != HttpRequestParser::Result::kRequest && consumed == 0) break;
  }
  (void)requests;
  return 0;
}
