// HttpRequestParser: HTTP/1.1 requests out of a byte stream, one at a time,
// through http-parser (Debian's libhttp-parser), with the bounds a server
// on the RPC port needs: a request head over 8 KiB, a body over 64 KiB or
// anything http-parser rejects is an error with the status to answer. Pure
// code over bytes, no socket: the HTTP fuzzer drives it directly. One
// thread at a time.
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <string>

#include "osprey/base/slice.h"

namespace osprey::transport {

struct HttpRequest {
  std::string method;  // "GET"
  std::string path;    // "/metrics"
  std::string query;   // after '?', without it
  std::string accept;  // the Accept header, if any
  // The Authorization header, if any (a Negotiate token: set_http_spnego).
  std::string authorization;
  std::string host;  // the Host header, if any
  bool has_host = false;
  bool keep_alive = true;
};

class HttpRequestParser {
 public:
  static constexpr size_t kMaxHeadBytes = 8 * 1024;
  static constexpr size_t kMaxBodyBytes = 64 * 1024;

  enum class Result {
    kNeedMore,  // every byte was taken; the request is not complete yet
    kRequest,   // request() is complete; Feed() the rest after answering it
    kError,     // error_status() and error() say why; the stream is unusable
  };

  HttpRequestParser();
  HttpRequestParser(const HttpRequestParser&) = delete;
  HttpRequestParser& operator=(const HttpRequestParser&) = delete;

  // Parses from `data` up to the end of one request; *consumed is how many
  // bytes it took (all of them unless a request ended or an error came).
  Result Feed(Slice data, size_t* consumed);

  const HttpRequest& request() const { return request_; }
  // Whether a request has begun and not ended (bytes are pending).
  bool in_request() const { return in_request_; }
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

 private:
  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, size_t len);
  static int OnHeaderField(http_parser* p, const char* at, size_t len);
  static int OnHeaderValue(http_parser* p, const char* at, size_t len);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t len);
  static int OnMessageComplete(http_parser* p);
  void EndHeader();
  // Records the 431 error; returns what stops http-parser.
  int HeadTooLarge();

  http_parser parser_;
  http_parser_settings settings_;
  HttpRequest request_;
  std::string url_, header_field_, header_value_;
  bool last_was_value_ = false;
  bool headers_done_ = false;
  bool complete_ = false;
  bool in_request_ = false;
  size_t head_bytes_ = 0;
  size_t body_bytes_ = 0;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace osprey::transport
