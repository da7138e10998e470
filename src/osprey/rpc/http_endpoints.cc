#include "osprey/rpc/http_endpoints.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "osprey/base/prometheus_text.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/slow_call_log.h"
#include "osprey/transport/call_tables.h"
#include "osprey/transport/reactor.h"

namespace osprey {

namespace {

using nlohmann::json;
using transport::CallInfo;
using transport::HttpResponse;

HttpResponse Text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse Json(const json& j) {
  HttpResponse r;
  r.content_type = "application/json";
  // Invalid UTF-8 in a peer-supplied string (a user name) is replaced,
  // not thrown.
  r.body = j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double Millis(MonoDelta d) { return static_cast<double>(d.ToMicroseconds()) / 1000.0; }

// What /rpcz and /connections list at most, of calls and of connections:
// the page stays small and cheap to build on a reactor whatever the load.
constexpr size_t kMaxListed = 1000;

// Everything /rpcz and /connections show, from every reactor: at most
// kMaxListed of each, and how many there were.
struct Gathered {
  std::vector<ConnectionInfo> connections;
  std::vector<CallInfo> calls;
  size_t connections_total = 0;
  size_t calls_total = 0;
};

// Runs a task on every reactor that appends what it has; `done` runs once,
// on the last reactor to answer (or here, if none could).
void Gather(const std::vector<std::shared_ptr<transport::Reactor>>& reactors,
            std::function<void(Gathered)> done) {
  struct State {
    Mutex mu;
    size_t left OSPREY_GUARDED_BY(mu);
    Gathered got OSPREY_GUARDED_BY(mu);
    std::function<void(Gathered)> done;
  };
  auto st = std::make_shared<State>();
  {
    MutexLock l(st->mu);
    st->left = reactors.size();
  }
  st->done = std::move(done);
  auto finish_one = [st](Gathered part) {
    bool last;
    Gathered all;
    {
      MutexLock l(st->mu);
      auto& g = st->got;
      for (auto& c : part.connections) {
        if (g.connections.size() < kMaxListed) g.connections.push_back(std::move(c));
      }
      for (auto& c : part.calls) {
        if (g.calls.size() < kMaxListed) g.calls.push_back(std::move(c));
      }
      g.connections_total += part.connections_total;
      g.calls_total += part.calls_total;
      last = --st->left == 0;
      if (last) all = std::move(g);
    }
    if (last) st->done(std::move(all));
  };
  if (reactors.empty()) {
    st->done(Gathered());
    return;
  }
  for (const auto& r : reactors) {
    transport::Reactor* raw = r.get();
    bool ok = r->Schedule([raw, finish_one] {
      Gathered part;
      raw->CollectConnections(kMaxListed, &part.connections, &part.connections_total);
      raw->CollectCalls(kMaxListed, &part.calls, &part.calls_total);
      finish_one(std::move(part));
    });
    if (!ok) finish_one(Gathered());  // stopped: it has nothing left to show
  }
}

json CallsJson(const std::vector<CallInfo>& calls) {
  json a = json::array();
  for (const CallInfo& c : calls) {
    a.push_back({{"direction", c.inbound ? "inbound" : "outbound"},
                 {"method", c.method},
                 {"peer", c.remote.ToString()},
                 {"user", c.user},
                 {"principal", c.principal},
                 {"elapsed_ms", Millis(c.elapsed)},
                 {"state", c.state}});
  }
  return a;
}

json SlowJson(const std::vector<SlowCall>& slow, MonoTime now) {
  json a = json::array();
  for (const SlowCall& c : slow) {
    a.push_back({{"direction", c.inbound ? "inbound" : "outbound"},
                 {"method", c.method},
                 {"peer", c.remote.ToString()},
                 {"user", c.user},
                 {"took_ms", Millis(c.took)},
                 {"outcome", c.outcome},
                 {"finished_ms_ago", Millis(now - c.finished)}});
  }
  return a;
}

std::string RpczHtml(const std::string& name, const std::vector<CallInfo>& calls,
                     size_t calls_total, const std::vector<SlowCall>& slow, MonoDelta threshold,
                     MonoTime now) {
  std::string h;
  h += "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rpcz: " + HtmlEscape(name) +
       "</title>\n<style>body{font-family:sans-serif;margin:2em;background:#fff;color:#111}"
       "table{border-collapse:collapse;margin-bottom:2em}th,td{border:1px solid #999;"
       "padding:4px 10px;text-align:left}th{background:#dde6f0}h1{font-size:1.6em}"
       "</style></head><body>\n";
  h += "<h1>rpcz: " + HtmlEscape(name) + "</h1>\n";
  h += "<h2>Calls in flight (" + std::to_string(calls_total) + ")</h2>\n";
  if (calls_total > calls.size()) {
    h += "<p>The first " + std::to_string(calls.size()) + " of them:</p>\n";
  }
  h += "<table>\n";
  h += "<tr><th>direction</th><th>method</th><th>peer</th><th>user</th><th>elapsed (ms)</th>"
       "<th>state</th></tr>\n";
  for (const CallInfo& c : calls) {
    char ms[32];
    snprintf(ms, sizeof(ms), "%.1f", Millis(c.elapsed));
    h += "<tr><td>" + std::string(c.inbound ? "inbound" : "outbound") + "</td><td>" +
         HtmlEscape(c.method) + "</td><td>" + HtmlEscape(c.remote.ToString()) + "</td><td>" +
         HtmlEscape(c.user) + "</td><td>" + ms + "</td><td>" + HtmlEscape(c.state) + "</td></tr>\n";
  }
  h += "</table>\n<h2>Recent slow calls (at least " + std::to_string(threshold.ToMilliseconds()) +
       " ms)</h2>\n<table>\n";
  h += "<tr><th>direction</th><th>method</th><th>peer</th><th>user</th><th>took (ms)</th>"
       "<th>outcome</th><th>finished (s ago)</th></tr>\n";
  for (const SlowCall& c : slow) {
    char took[32], ago[32];
    snprintf(took, sizeof(took), "%.1f", Millis(c.took));
    snprintf(ago, sizeof(ago), "%.1f", Millis(now - c.finished) / 1000.0);
    h += "<tr><td>" + std::string(c.inbound ? "inbound" : "outbound") + "</td><td>" +
         HtmlEscape(c.method) + "</td><td>" + HtmlEscape(c.remote.ToString()) + "</td><td>" +
         HtmlEscape(c.user) + "</td><td>" + took + "</td><td>" + HtmlEscape(c.outcome) +
         "</td><td>" + ago + "</td></tr>\n";
  }
  h += "</table>\n</body></html>\n";
  return h;
}

bool WantsHtml(const transport::HttpRequest& req) {
  if (req.query.find("format=json") != std::string::npos) return false;
  if (req.query.find("format=html") != std::string::npos) return true;
  return req.accept.find("text/html") != std::string::npos;
}

}  // namespace

void HttpEndpoints::HandleHttp(const transport::HttpRequest& req, const Sockaddr& /*remote*/,
                               std::function<void(HttpResponse)> respond) {
  Messenger* m = messenger_;
  const std::string& path = req.path;
  if (path == "/metrics") {
    HttpResponse r;
    r.content_type = kPrometheusTextContentType;
    r.body = RenderPrometheusText(m->metrics()->Snapshot());
    respond(std::move(r));
    return;
  }
  if (path == "/healthz") {
    if (m->shutting_down()) {
      respond(Text(503, "shutting down\n"));
    } else if (m->draining()) {
      respond(Text(503, "draining\n"));
    } else {
      respond(Text(200, "OK\n"));
    }
    return;
  }
  if (path == "/") {
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" +
             HtmlEscape(m->name()) + "</title></head><body><h1>" + HtmlEscape(m->name()) +
             "</h1><ul><li><a href=\"/metrics\">/metrics</a></li><li><a href=\"/rpcz\">/rpcz</a>"
             "</li><li><a href=\"/connections\">/connections</a></li><li><a href=\"/healthz\">"
             "/healthz</a></li></ul></body></html>\n";
    respond(std::move(r));
    return;
  }
  if (path == "/rpcz" || path == "/connections") {
    const bool rpcz = path == "/rpcz";
    const bool html = rpcz && WantsHtml(req);
    std::string name = m->name();
    std::vector<SlowCall> slow;
    MonoDelta threshold;
    if (rpcz && m->slow_calls() != nullptr) {
      slow = m->slow_calls()->Snapshot();
      threshold = m->slow_calls()->threshold();
    }
    Gather(m->reactors_, [rpcz, html, name, slow = std::move(slow), threshold,
                          respond = std::move(respond)](Gathered got) {
      MonoTime now = MonoTime::Now();
      if (!rpcz) {
        json a = json::array();
        for (const ConnectionInfo& c : got.connections) {
          a.push_back({{"peer", c.remote.ToString()},
                       {"direction", c.inbound ? "inbound" : "outbound"},
                       {"user", c.user},
                       {"principal", c.principal},
                       {"authentication",
                        c.negotiated ? AuthenticationMethodName(c.authentication) : "negotiating"},
                       {"negotiated", c.negotiated},
                       {"security", ConnectionSecuritySlug(c.security)},
                       {"calls_in_flight", c.calls_in_flight},
                       {"wake_route", c.wake_route},
                       {"outbound_queued_bytes", c.outbound_queued_bytes}});
        }
        respond(Json({{"messenger", name},
                      {"connections", a},
                      {"connections_total", got.connections_total},
                      {"listed_at_most", kMaxListed}}));
        return;
      }
      if (html) {
        HttpResponse r;
        r.content_type = "text/html; charset=utf-8";
        r.body = RpczHtml(name, got.calls, got.calls_total, slow, threshold, now);
        respond(std::move(r));
        return;
      }
      respond(Json({{"messenger", name},
                    {"in_flight", CallsJson(got.calls)},
                    {"in_flight_total", got.calls_total},
                    {"listed_at_most", kMaxListed},
                    {"slow_call_threshold_ms", Millis(threshold)},
                    {"slow_calls", SlowJson(slow, now)}}));
    });
    return;
  }
  respond(Text(404, "no such page: " + path + "\n"));
}

}  // namespace osprey
