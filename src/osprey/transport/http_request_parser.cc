#include "osprey/transport/http_request_parser.h"

#include <cctype>
#include <cstring>

namespace osprey::transport {

namespace {

HttpRequestParser* Self(http_parser* p) { return static_cast<HttpRequestParser*>(p->data); }

bool EqualsIgnoreCase(const std::string& a, const char* b) {
  size_t n = strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

}  // namespace

HttpRequestParser::HttpRequestParser() {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
  http_parser_settings_init(&settings_);
  settings_.on_message_begin = &OnMessageBegin;
  settings_.on_url = &OnUrl;
  settings_.on_header_field = &OnHeaderField;
  settings_.on_header_value = &OnHeaderValue;
  settings_.on_headers_complete = &OnHeadersComplete;
  settings_.on_body = &OnBody;
  settings_.on_message_complete = &OnMessageComplete;
}

HttpRequestParser::Result HttpRequestParser::Feed(Slice data, size_t* consumed) {
  *consumed = 0;
  if (error_status_ != 0) return Result::kError;
  if (data.empty()) return Result::kNeedMore;
  const char* p = reinterpret_cast<const char*>(data.data());
  size_t n = http_parser_execute(&parser_, &settings_, p, data.size());
  *consumed = n;
  enum http_errno err = HTTP_PARSER_ERRNO(&parser_);
  if (err == HPE_PAUSED) {
    http_parser_pause(&parser_, 0);
    err = HPE_OK;
  }
  if (!headers_done_ && in_request_) head_bytes_ += n;
  if (err != HPE_OK) {
    if (error_status_ == 0) {
      error_status_ = err == HPE_HEADER_OVERFLOW ? 431 : 400;
      error_ = std::string("bad HTTP request: ") + http_errno_description(err);
    }
    return Result::kError;
  }
  if (!headers_done_ && head_bytes_ > kMaxHeadBytes) {
    HeadTooLarge();
    return Result::kError;
  }
  if (complete_) {
    complete_ = false;
    in_request_ = false;
    if (parser_.upgrade) {
      error_status_ = 400;
      error_ = "protocol upgrades are not served here";
      return Result::kError;
    }
    return Result::kRequest;
  }
  return Result::kNeedMore;
}

int HttpRequestParser::OnMessageBegin(http_parser* p) {
  HttpRequestParser* c = Self(p);
  c->request_ = HttpRequest();
  c->url_.clear();
  c->header_field_.clear();
  c->header_value_.clear();
  c->last_was_value_ = false;
  c->headers_done_ = false;
  c->in_request_ = true;
  c->head_bytes_ = 0;
  c->body_bytes_ = 0;
  return 0;
}

int HttpRequestParser::OnUrl(http_parser* p, const char* at, size_t len) {
  HttpRequestParser* c = Self(p);
  if (c->url_.size() + len > kMaxHeadBytes) return c->HeadTooLarge();
  c->url_.append(at, len);
  return 0;
}

int HttpRequestParser::HeadTooLarge() {
  error_status_ = 431;
  error_ = "request head over " + std::to_string(kMaxHeadBytes) + " bytes";
  return 1;  // stops http-parser
}

void HttpRequestParser::EndHeader() {
  if (EqualsIgnoreCase(header_field_, "accept")) request_.accept = header_value_;
  if (EqualsIgnoreCase(header_field_, "authorization")) request_.authorization = header_value_;
  if (EqualsIgnoreCase(header_field_, "host")) {
    request_.host = header_value_;
    request_.has_host = true;
  }
  header_field_.clear();
  header_value_.clear();
  last_was_value_ = false;
}

int HttpRequestParser::OnHeaderField(http_parser* p, const char* at, size_t len) {
  HttpRequestParser* c = Self(p);
  if (c->last_was_value_) c->EndHeader();
  if (c->header_field_.size() + len > kMaxHeadBytes) return c->HeadTooLarge();
  c->header_field_.append(at, len);
  return 0;
}

int HttpRequestParser::OnHeaderValue(http_parser* p, const char* at, size_t len) {
  HttpRequestParser* c = Self(p);
  if (c->header_value_.size() + len > kMaxHeadBytes) return c->HeadTooLarge();
  c->header_value_.append(at, len);
  c->last_was_value_ = true;
  return 0;
}

int HttpRequestParser::OnHeadersComplete(http_parser* p) {
  HttpRequestParser* c = Self(p);
  if (c->last_was_value_) c->EndHeader();
  c->headers_done_ = true;
  c->request_.method = http_method_str(static_cast<http_method>(p->method));
  size_t q = c->url_.find('?');
  c->request_.path = c->url_.substr(0, q);
  if (q != std::string::npos) c->request_.query = c->url_.substr(q + 1);
  return 0;
}

int HttpRequestParser::OnBody(http_parser* p, const char*, size_t len) {
  HttpRequestParser* c = Self(p);
  c->body_bytes_ += len;
  // The endpoints take no body: it is read and dropped, up to a bound.
  if (c->body_bytes_ > kMaxBodyBytes) {
    c->error_status_ = 413;
    c->error_ = "request body over " + std::to_string(kMaxBodyBytes) + " bytes";
    return 1;
  }
  return 0;
}

int HttpRequestParser::OnMessageComplete(http_parser* p) {
  HttpRequestParser* c = Self(p);
  c->complete_ = true;
  c->request_.keep_alive = http_should_keep_alive(p) != 0;
  http_parser_pause(p, 1);  // one request at a time
  return 0;
}

}  // namespace osprey::transport
