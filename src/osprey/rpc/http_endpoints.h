// HttpEndpoints: what a messenger built with set_http_endpoints(true)
// serves on its RPC port, for operators and their tools:
//
//   /metrics      Prometheus text exposition format 0.0.4
//   /rpcz         calls in flight (both directions) and the most recent
//                 slow calls per method: JSON, or HTML for a browser
//                 (Accept: text/html, or ?format=html)
//   /connections  every connection with peer, user, direction, security,
//                 calls in flight and bytes queued: JSON
//   /healthz      200 "OK" while serving, 503 once Shutdown() has begun
//   /             an index of the above
//
// HandleHttp runs on the reactor that read the request. /rpcz and
// /connections gather from every reactor with a task on each, without
// blocking any of them, and answer from the last one.
#pragma once

#include <functional>
#include <string>

#include "osprey/transport/http_connection.h"

namespace osprey {

class Messenger;

class HttpEndpoints : public transport::HttpHandler {
 public:
  // `messenger` owns this and outlives every call to it.
  explicit HttpEndpoints(Messenger* messenger) : messenger_(messenger) {}

  void HandleHttp(const transport::HttpRequest& request, const Sockaddr& remote,
                  std::function<void(transport::HttpResponse)> respond) override;

 private:
  Messenger* const messenger_;
};

}  // namespace osprey
