#include "osprey/transport/http_connection.h"

#include <glog/logging.h>
#include <sys/epoll.h>

#include "osprey/transport/http_host_check.h"
#include "osprey/transport/http_negotiate.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey::transport {

namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

// Bytes a client may send ahead of an answer it has not had yet.
constexpr size_t kMaxBufferedBytes =
    HttpRequestParser::kMaxHeadBytes + HttpRequestParser::kMaxBodyBytes;

}  // namespace

std::string FormatHttpResponse(const HttpResponse& response, bool keep_alive, bool head_request) {
  std::string out;
  out.append("HTTP/1.1 ").append(std::to_string(response.status)).append(" ");
  out.append(Reason(response.status)).append("\r\n");
  out.append("Content-Type: ").append(response.content_type).append("\r\n");
  out.append("Content-Length: ").append(std::to_string(response.body.size())).append("\r\n");
  out.append("Cache-Control: no-store\r\n");
  if (!response.www_authenticate.empty()) {
    out.append("WWW-Authenticate: ").append(response.www_authenticate).append("\r\n");
  }
  out.append(keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
  if (!head_request) out.append(response.body);
  return out;
}

HttpConnection::HttpConnection(Reactor* reactor, Socket socket, const Sockaddr& remote,
                               std::string first_bytes, HttpHandler* handler,
                               HttpConnectionPool::Slot slot, bool tls)
    : reactor_(reactor),
      reactor_keepalive_(reactor->shared_from_this()),
      socket_(std::move(socket)),
      remote_(remote),
      handler_(handler),
      slot_(std::move(slot)),
      healthz_only_(slot_.kind() == HttpConnectionPool::Kind::kHealthzOnly),
      opened_at_(MonoTime::Now()),
      wants_tls_(tls),
      in_(std::move(first_bytes)) {}

HttpConnection::~HttpConnection() = default;  // slot_ goes back to its pool

Status HttpConnection::Start() {
  reactor_->AssertCurrentThread();
  if (wants_tls_) {
    const ConnectionOptions& o = reactor_->options();
    if (o.http_tls == nullptr) return Status::IllegalState("HTTPS without a TLS context");
    OSPREY_RETURN_NOT_OK(o.http_tls->NewSession(&tls_));
    // The context requires a client certificate whenever it has a CA;
    // without set_http_tls's requirement, one presented is still verified.
    if (!o.http_tls_require_client_certificate) tls_->DoNotRequirePeerCertificate();
  }
  OSPREY_RETURN_NOT_OK(reactor_->AddFd(socket_.fd(), EPOLLIN, this));
  const MonoTime now = MonoTime::Now();
  timer_state_.idle_since = now;
  // A reserve slot is for a probe, which asks at once: held quiet, it goes
  // within the request timeout, so a peer cannot sit in the reserve.
  const ConnectionOptions& o = reactor_->options();
  if (healthz_only_) {
    timer_state_.retire_at = now + o.negotiation_timeout;
  } else if (o.http_max_connection_age > MonoDelta()) {
    timer_state_.retire_at = opened_at_ + o.http_max_connection_age;
  }
  NoteInput(now);
  Parse();
  UpdateTimer();
  return Status::OK();
}

void HttpConnection::NoteInput(MonoTime now) {
  // An HTTPS handshake is part of the first request: the request timeout
  // bounds it from the accept.
  const bool pending =
      !in_.empty() || parser_.in_request() || (tls_ != nullptr && !tls_->handshake_done());
  if (pending && !timer_state_.request_pending) timer_state_.request_started_at = now;
  timer_state_.request_pending = pending;
}

void HttpConnection::UpdateTimer() {
  if (closed_) return;
  timer_state_.awaiting_answer = awaiting_answer_;
  timer_state_.output_pending = !out_.empty();
  MonoTime next;
  // Only asked when to look; what is due is acted on in OnTimer.
  (void)CheckHttpTimeout(timer_state_, MonoTime::Min(), reactor_->options().negotiation_timeout,
                         reactor_->options().http_idle_timeout, &next);
  if (next == timer_at_ && (timer_ || next.IsMax())) return;
  if (timer_) reactor_->CancelTimer(timer_);
  timer_ = {};
  timer_at_ = next;
  if (next.IsMax()) return;
  std::weak_ptr<HttpConnection> weak = shared_from_this();
  timer_ = reactor_->ScheduleTimer(next, [weak] {
    auto c = weak.lock();
    if (c == nullptr) return;
    c->reactor_->AssertCurrentThread();  // timers run on the reactor
    c->timer_ = {};
    c->timer_at_ = MonoTime::Max();
    c->OnTimer();
  });
}

void HttpConnection::OnTimer() {
  if (closed_) return;
  timer_state_.awaiting_answer = awaiting_answer_;
  timer_state_.output_pending = !out_.empty();
  MonoTime next;
  switch (CheckHttpTimeout(timer_state_, MonoTime::Now(), reactor_->options().negotiation_timeout,
                           reactor_->options().http_idle_timeout, &next)) {
    case HttpTimeout::kNone:
      break;
    case HttpTimeout::kIdle:
      Close("idle");
      return;
    case HttpTimeout::kRetired:
      Close(healthz_only_ ? "no request in time on a /healthz-only connection"
                          : "past its maximum age (set_http_keepalive_limits)");
      return;
    case HttpTimeout::kNotReading:
      Close("the peer took no byte of its answer for the idle timeout");
      return;
    case HttpTimeout::kRequestIncomplete:
      if (tls_ != nullptr && !tls_->handshake_done()) {
        Close("TLS handshake not complete in time");
        return;
      }
      in_.clear();
      close_after_send_ = true;
      SendError(408, "the request was not complete in time");
      return;
  }
  UpdateTimer();
}

void HttpConnection::HandleEvents(uint32_t events) {
  reactor_->AssertCurrentThread();
  auto self = shared_from_this();  // Close() lets the reactor drop its reference
  if (closed_) return;
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    uint8_t buf[16 * 1024];
    for (int i = 0; i < 4 && !closed_; ++i) {
      size_t n = 0;
      Status s = socket_.Read(buf, sizeof(buf), &n);
      if (!s.ok()) {
        Close(s.ToString());
        return;
      }
      if (n == 0) break;
      if (TransportMetrics* m = reactor_->options().metrics.get()) m->bytes_received->Increment(n);
      if (tls_ != nullptr) {
        if (!TakeTlsBytes(buf, n)) return;
      } else {
        in_.append(reinterpret_cast<const char*>(buf), n);
      }
      if (in_.size() > kMaxBufferedBytes) {
        Close("more than " + std::to_string(kMaxBufferedBytes) + " bytes sent ahead of an answer");
        return;
      }
      if (n < sizeof(buf)) break;
    }
    NoteInput(MonoTime::Now());
    Parse();
  }
  if (!closed_ && (events & EPOLLOUT)) {
    Flush();
    Parse();  // the answer went: a pipelined request may be next
  }
  UpdateTimer();
}

bool HttpConnection::TakeTlsBytes(const uint8_t* data, size_t n) {
  if (tls_failed_) return true;  // closing after the alert or the 400: dropped
  Slice records(data, n);
  if (!tls_->handshake_done()) {
    // A TLS connection begins with a handshake record (type 22); a plain
    // request begins with its method. Say so in the clear, as most HTTPS
    // servers do, instead of an alert a browser shows as garbage.
    if (!tls_began_ && n > 0 && data[0] != 22) {
      tls_failed_ = true;
      close_after_send_ = true;
      SendError(400, "this address serves HTTPS: use https://");
      return !closed_;
    }
    tls_began_ = tls_began_ || n > 0;
    std::string out;
    bool done = false;
    Status s = tls_->Handshake(records, &out, &done);
    out_.append(out);  // the next handshake flight, or an alert
    if (!s.ok()) {
      VLOG(1) << "HTTPS handshake from " << remote_.ToString() << " failed: " << s.ToString();
      tls_failed_ = true;
      close_after_send_ = true;
      if (out_.empty()) {
        Close(s.ToString());
        return false;
      }
      Flush();
      return !closed_;
    }
    if (!out.empty()) Flush();
    if (closed_ || !done) return !closed_;
    records = Slice();  // what came with the last handshake message waits in the session
  }
  Status s = tls_->Decrypt(records, &in_);
  tls_->TakeOutput(&out_);  // an alert or a KeyUpdate answer of its own
  if (!s.ok()) {
    Close(s.IsAborted() ? "the peer ended its TLS session" : s.ToString());
    return false;
  }
  if (!out_.empty()) Flush();
  return !closed_;
}

void HttpConnection::Parse() {
  // An answer given inside Dispatch() calls Send(), which calls Parse():
  // the loop below goes on instead, so pipelined requests never recurse.
  if (parsing_) return;
  parsing_ = true;
  while (!closed_ && !awaiting_answer_ && !close_after_send_ && out_.empty() && !in_.empty()) {
    size_t consumed = 0;
    HttpRequestParser::Result r = parser_.Feed(Slice(in_), &consumed);
    in_.erase(0, consumed);
    if (r == HttpRequestParser::Result::kNeedMore) break;
    if (r == HttpRequestParser::Result::kError) {
      close_after_send_ = true;
      SendError(parser_.error_status(), parser_.error());
      break;
    }
    timer_state_.request_pending = false;
    Dispatch();
    NoteInput(MonoTime::Now());
  }
  parsing_ = false;
  UpdateTimer();
}

void HttpConnection::Dispatch() {
  const HttpRequest& req = parser_.request();
  head_request_ = req.method == "HEAD";
  keep_alive_ = req.keep_alive;
  if (req.method != "GET" && !head_request_) {
    SendError(405, "only GET and HEAD are served");
    return;
  }
  if (healthz_only_ && req.path != "/healthz") {
    // The same answer as a full pool on the RPC port: this connection got
    // in only to answer probes.
    close_after_send_ = true;
    SendError(503, "too many HTTP connections");
    return;
  }
  if (const HttpHostCheck* check = reactor_->options().http_host_check.get()) {
    Sockaddr local;
    Status hs = socket_.GetLocalAddress(&local);
    if (hs.ok()) hs = check->Check(req.has_host, req.host, local);
    if (!hs.ok()) {
      close_after_send_ = true;
      SendError(403, hs.message());
      return;
    }
  }
  // The pages' Kerberos login; /healthz stays open to load balancers, which
  // learn from it only whether the server serves.
  std::string www_authenticate;
  if (const KerberosCredentials* spnego = reactor_->options().http_spnego.get();
      spnego != nullptr && req.path != "/healthz") {
    std::string principal;
    Status as = CheckHttpNegotiate(*spnego, req.authorization, &principal, &www_authenticate);
    if (!as.ok()) {
      // As a failed HTTPS handshake: the reason goes back to the peer.
      VLOG(1) << "HTTP login from " << remote_.ToString() << " refused: " << as.ToString();
      HttpResponse r;
      r.status = 401;
      r.body = as.message() + "\n";
      r.www_authenticate = "Negotiate";
      Send(std::move(r));
      return;
    }
    if (Status rs = CheckHttpReader(reactor_->options().http_readers.get(), principal); !rs.ok()) {
      VLOG(1) << "HTTP login from " << remote_.ToString() << " refused: " << rs.ToString();
      HttpResponse r;
      r.status = 403;
      r.body = rs.message() + "\n";
      Send(std::move(r));
      return;
    }
  }
  awaiting_answer_ = true;
  UpdateTimer();
  std::weak_ptr<HttpConnection> weak = shared_from_this();
  std::shared_ptr<Reactor> reactor = reactor_keepalive_;
  auto answered = std::make_shared<std::atomic<bool>>(false);
  handler_->HandleHttp(
      req, remote_, [weak, reactor, answered, www_authenticate](HttpResponse response) {
        if (answered->exchange(true)) return;  // once
        response.www_authenticate = www_authenticate;
        auto deliver = [weak, r = std::move(response)]() mutable {
          if (auto c = weak.lock()) {
            c->reactor_->AssertCurrentThread();
            c->Send(std::move(r));
          }
        };
        if (reactor->IsCurrentThread()) {
          deliver();
        } else {
          (void)reactor->Schedule(std::move(deliver));  // false: shutting down; the connection goes
        }
      });
}

void HttpConnection::SendError(int status, const std::string& text) {
  HttpResponse r;
  r.status = status;
  r.body = text + "\n";
  Send(std::move(r));
}

void HttpConnection::Send(HttpResponse response) {
  if (closed_) return;
  awaiting_answer_ = false;
  const ConnectionOptions& o = reactor_->options();
  ++answers_;
  // Caps on a keep-alive connection (issue 47): without them one that asks
  // before each idle timeout held its slot for ever.
  const bool capped =
      healthz_only_ ||
      (o.http_max_requests_per_connection > 0 && answers_ >= o.http_max_requests_per_connection) ||
      MonoTime::Now() >= timer_state_.retire_at;
  const bool keep = keep_alive_ && !close_after_send_ && !capped;
  if (tls_ready()) {
    Status s = tls_->Encrypt(Slice(FormatHttpResponse(response, keep, head_request_)), &out_);
    if (s.ok() && !keep) tls_->CloseNotify(&out_);  // a clean end: the answer was whole
    if (!s.ok()) {
      Close(s.ToString());
      return;
    }
  } else {
    out_.append(FormatHttpResponse(response, keep, head_request_));
  }
  if (!keep) close_after_send_ = true;
  timer_state_.output_progress_at = MonoTime::Now();
  Flush();
  if (closed_) return;
  Parse();  // a pipelined request may be waiting (at once, if this one is sent)
}

void HttpConnection::Flush() {
  const size_t before = out_sent_;
  while (out_sent_ < out_.size()) {
    iovec v{out_.data() + out_sent_, out_.size() - out_sent_};
    size_t n = 0;
    Status s = socket_.Writev(&v, 1, &n);
    if (!s.ok()) {
      Close(s.ToString());
      return;
    }
    if (n == 0) break;
    if (TransportMetrics* m = reactor_->options().metrics.get()) m->bytes_sent->Increment(n);
    out_sent_ += n;
  }
  if (out_sent_ != before) timer_state_.output_progress_at = MonoTime::Now();
  if (out_sent_ == out_.size()) {
    // Answered: don't keep a large answer's buffer for the next one.
    std::string().swap(out_);
    out_sent_ = 0;
    timer_state_.idle_since = MonoTime::Now();
    if (close_after_send_) {
      Close("answered");
      return;
    }
  }
  const bool want_out = !out_.empty();
  if (want_out != epollout_) {
    epollout_ = want_out;
    Status s =
        reactor_->ModifyFd(socket_.fd(), EPOLLIN | (want_out ? uint32_t{EPOLLOUT} : 0u), this);
    if (!s.ok()) Close(s.ToString());
  }
}

void HttpConnection::Close(const std::string& why) {
  reactor_->AssertCurrentThread();
  if (closed_) return;
  closed_ = true;
  VLOG(1) << "HTTP connection from " << remote_.ToString() << " closed: " << why;
  if (timer_) reactor_->CancelTimer(timer_);
  timer_ = {};
  if (socket_.is_open()) {
    reactor_->RemoveFd(socket_.fd());
    socket_.Close();
  }
  reactor_->ReleaseHttpConnection(this);
}

}  // namespace osprey::transport
