// HttpConnection: a connection served as HTTP/1.1 on one reactor: either
// one to a messenger's RPC port whose first bytes were an HTTP request line
// instead of "hrpc" (one port serves both, as brpc does), or one accepted
// on an HTTP-only listener (Messenger::ListenHttp).
// Requests come out of an HttpRequestParser one at a time and go to the
// HttpHandler, whose answer may come from any thread. A pipelined request
// is parsed only once the answer before it is wholly sent, so a peer that
// pipelines without reading holds one answer and at most
// kMaxBufferedBytes of requests, and is dropped when it sends more.
//
// Hostile input gets what the RPC wire gets: what the parser refuses is
// answered 4xx and closes this connection alone; so does a request not
// complete within the negotiation timeout of its first byte (408), and a
// peer that takes no byte of an answer for the idle timeout. Keep-alive
// connections close when idle for the idle timeout (http_timeouts.h), and
// after their request cap or age (the answer that reaches it says
// "Connection: close"). A connection in a /healthz-only slot of its pool
// (HttpConnectionPool) answers one request, 503 unless it is /healthz, and
// closes; quiet, it closes within the request timeout.
//
// HTTPS (on an HTTP listener when the messenger has set_http_tls): the
// bytes on the socket are TLS records of the messenger's own TlsSession
// (tls_context.h), made with the server's certificate; the request's
// plaintext goes through the same parser and limits. A handshake not done
// within the request timeout closes the connection, a client without an
// accepted certificate (when one is required) gets OpenSSL's alert, and a
// plain HTTP request gets 400 in the clear, saying to use https.
//
// Owned by its Reactor (AdoptHttpConnection); every method runs on that
// reactor's thread, under its loop lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "osprey/base/sockaddr.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"
#include "osprey/transport/http_connection_pool.h"
#include "osprey/transport/http_request_parser.h"
#include "osprey/transport/http_timeouts.h"
#include "osprey/transport/reactor.h"
#include "osprey/transport/timer_id.h"
#include "osprey/transport/tls_context.h"

namespace osprey::transport {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // A WWW-Authenticate header's value, if not empty ("Negotiate", or
  // "Negotiate <token>" with the server's answer to a Kerberos login).
  std::string www_authenticate;
};

// `response` as HTTP/1.1 bytes: status line, headers and (unless
// `head_request`) body; "Connection: close" unless `keep_alive`.
std::string FormatHttpResponse(const HttpResponse& response, bool keep_alive, bool head_request);

// Answers HTTP requests (the Messenger's endpoints).
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Reactor thread. `request` is valid only during the call. `respond` must
  // be called once, from any thread; later calls are ignored.
  virtual void HandleHttp(const HttpRequest& request, const Sockaddr& remote,
                          std::function<void(HttpResponse)> respond) = 0;
};

class HttpConnection : public EventHandler, public std::enable_shared_from_this<HttpConnection> {
 public:
  // `first_bytes`: what was read before the connection was known to be HTTP.
  // `slot`: its place in its pool (not kRefused), given back when it goes.
  // `tls`: serve HTTPS with the reactor options' http_tls context.
  HttpConnection(Reactor* reactor, Socket socket, const Sockaddr& remote, std::string first_bytes,
                 HttpHandler* handler, HttpConnectionPool::Slot slot, bool tls = false);
  ~HttpConnection() override;

  // Registers with the reactor and parses the first bytes.
  Status Start();
  void HandleEvents(uint32_t epoll_events) override;
  // Closes the socket; the reactor lets go of this connection. Idempotent.
  void Close(const std::string& why);

 private:
  void Parse() OSPREY_REQUIRES(reactor_->loop_mu_);
  void Dispatch() OSPREY_REQUIRES(reactor_->loop_mu_);
  void Send(HttpResponse response) OSPREY_REQUIRES(reactor_->loop_mu_);
  void SendError(int status, const std::string& text) OSPREY_REQUIRES(reactor_->loop_mu_);
  void Flush() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Sets the timer for what the connection waits for now.
  void UpdateTimer() OSPREY_REQUIRES(reactor_->loop_mu_);
  void OnTimer() OSPREY_REQUIRES(reactor_->loop_mu_);
  // Notes that request bytes wait (at `now`) or that none do.
  void NoteInput(MonoTime now) OSPREY_REQUIRES(reactor_->loop_mu_);
  // HTTPS: takes `n` bytes read from the socket (records, or handshake
  // messages); the plaintext goes to in_. False once the connection is
  // closed.
  bool TakeTlsBytes(const uint8_t* data, size_t n) OSPREY_REQUIRES(reactor_->loop_mu_);
  bool tls_ready() const OSPREY_REQUIRES(reactor_->loop_mu_) {
    return tls_ != nullptr && tls_->handshake_done();
  }

  Reactor* const reactor_;
  const std::shared_ptr<Reactor> reactor_keepalive_;
  Socket socket_;
  const Sockaddr remote_;
  HttpHandler* const handler_;
  const HttpConnectionPool::Slot slot_;
  const bool healthz_only_;
  const MonoTime opened_at_;
  const bool wants_tls_;

  HttpRequestParser parser_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  std::string in_ OSPREY_GUARDED_BY(reactor_->loop_mu_);  // read, not yet parsed
  bool head_request_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  bool keep_alive_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = true;
  bool awaiting_answer_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  bool close_after_send_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  std::string out_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  size_t out_sent_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = 0;
  bool epollout_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  bool closed_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  bool parsing_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;  // Parse() is on the stack
  uint64_t answers_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = 0;  // begun, toward the request cap
  // HTTPS: the session, made at Start; tls_failed_: the handshake failed
  // (or the peer spoke plain HTTP), what it sends next is dropped.
  std::unique_ptr<TlsSession> tls_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  bool tls_failed_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;
  bool tls_began_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = false;  // a first byte came
  HttpTimerState timer_state_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  TimerId timer_ OSPREY_GUARDED_BY(reactor_->loop_mu_);
  MonoTime timer_at_ OSPREY_GUARDED_BY(reactor_->loop_mu_) = MonoTime::Max();
};

}  // namespace osprey::transport
