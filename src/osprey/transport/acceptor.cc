#include "osprey/transport/acceptor.h"

#include <glog/logging.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>

#include "osprey/base/log_rate_limiter.h"
#include "osprey/transport/connection.h"
#include "osprey/transport/http_connection.h"
#include "osprey/transport/transport_metrics.h"

namespace osprey::transport {

Acceptor::Acceptor(Reactor* reactor, Socket listener, Serves serves,
                   std::function<Reactor*()> pick_reactor,
                   std::shared_ptr<std::atomic<int64_t>> open_connections,
                   std::shared_ptr<HttpConnectionPool> http_pool)
    : reactor_(reactor),
      listener_(std::move(listener)),
      serves_(serves),
      pick_reactor_(std::move(pick_reactor)),
      open_connections_(std::move(open_connections)),
      http_pool_(std::move(http_pool)) {}

Acceptor::~Acceptor() {
  if (listener_.is_open()) RemoveUnixSocketFile();
}

void Acceptor::RemoveUnixSocketFile() {
  Sockaddr local;
  if (listener_.GetLocalAddress(&local).ok() && local.is_unix() &&
      local.unix_path().rfind('@', 0) != 0 && !local.unix_path().empty()) {
    if (::unlink(local.unix_path().c_str()) != 0 && errno != ENOENT) {
      PLOG(WARNING) << "removing Unix socket " << local.unix_path();
    }
  }
}

namespace {
// A Unix socket's file outlives a process that crashed; binding again
// finds it in use. It is stale when nobody accepts on it: then it goes.
Status BindUnix(Socket* s, const Sockaddr& addr) {
  Status bound = s->Bind(addr);
  if (bound.ok() || bound.posix_errno() != EADDRINUSE || addr.unix_path().rfind('@', 0) == 0) {
    return bound;
  }
  Socket probe;
  OSPREY_RETURN_NOT_OK(probe.Init(addr));
  Status connected = probe.Connect(addr);
  if (connected.ok() || connected.posix_errno() != ECONNREFUSED) {
    return Status::NetworkError(addr.ToString() + " is in use: another process listens on it");
  }
  LOG(INFO) << "removing stale Unix socket " << addr.unix_path() << " (nobody listens on it)";
  if (::unlink(addr.unix_path().c_str()) != 0 && errno != ENOENT) {
    return Status::NetworkError("removing stale Unix socket " + addr.unix_path(), errno);
  }
  return s->Bind(addr);
}
}  // namespace

Status Acceptor::Listen(const Sockaddr& addr, Socket* listener, Sockaddr* bound) {
  Socket s;
  OSPREY_RETURN_NOT_OK(s.Init(addr));
  if (addr.is_unix()) {
    OSPREY_RETURN_NOT_OK(BindUnix(&s, addr));
  } else {
    OSPREY_RETURN_NOT_OK(s.SetReuseAddr(true));
    OSPREY_RETURN_NOT_OK(s.Bind(addr));
  }
  OSPREY_RETURN_NOT_OK(s.Listen(1024));
  OSPREY_RETURN_NOT_OK(s.SetNonBlocking(true));
  OSPREY_RETURN_NOT_OK(s.GetLocalAddress(bound));
  *listener = std::move(s);
  return Status::OK();
}

Status Acceptor::Start() { return reactor_->AddFd(listener_.fd(), EPOLLIN, this); }

void Acceptor::Stop() {
  if (!listener_.is_open()) return;
  reactor_->RemoveFd(listener_.fd());
  RemoveUnixSocketFile();
  listener_.Close();
}

void Acceptor::HandleEvents(uint32_t) {
  while (listener_.is_open() && !paused_) {
    Socket conn;
    Sockaddr remote;
    Status s = listener_.Accept(&conn, &remote, /*nonblocking=*/true);
    if (!s.ok()) {
      int err = s.posix_errno();
      if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED) return;
      // Out of descriptors (EMFILE, ENFILE) or memory: the listener stays
      // readable, so stop polling it for a moment instead of spinning. A
      // peer can cause it at will: rate-limited like bad peers.
      std::string suffix;
      if (LogRateLimiter::BadPeers()->Allow(MonoTime::Now(), &suffix)) {
        LOG(WARNING) << "accept failed, pausing the listener for 100 ms: " << s.ToString()
                     << suffix;
      }
      paused_ = true;
      reactor_->RemoveFd(listener_.fd());
      std::weak_ptr<Acceptor> weak = shared_from_this();
      reactor_->ScheduleTimer(MonoTime::Now() + MonoDelta::FromMilliseconds(100), [weak]() {
        auto self = weak.lock();
        if (!self || !self->listener_.is_open()) return;
        self->paused_ = false;
        Status st = self->Start();
        if (!st.ok()) LOG(WARNING) << "listener could not resume: " << st.ToString();
      });
      return;
    }
    HttpConnectionPool::Slot http_slot;
    if (serves_ == Serves::kHttp) {
      http_slot = http_pool_->Take(remote);
      if (http_slot.kind() == HttpConnectionPool::Kind::kRefused) {
        MonoTime now = MonoTime::Now();
        if (now - last_refusal_log_ > MonoDelta::FromSeconds(1)) {
          LOG(WARNING) << "refusing HTTP connection from " << remote.ToString()
                       << ": this address's pool, that peer's share of it and the /healthz "
                          "reserve are full (set_http_connection_limits, "
                          "set_http_max_connections_per_peer, set_http_healthz_reserve)";
          last_refusal_log_ = now;
        }
        continue;  // `conn` closes here
      }
    } else {
      const auto limit = static_cast<int64_t>(reactor_->options().max_server_connections);
      if (open_connections_->load() >= limit) {
        MonoTime now = MonoTime::Now();
        if (now - last_refusal_log_ > MonoDelta::FromSeconds(1)) {
          LOG(WARNING) << "refusing connection from " << remote.ToString() << ": " << limit
                       << " server connections are open (the configured maximum)";
          last_refusal_log_ = now;
        }
        continue;  // `conn` closes here
      }
    }
    Status ns;
    if (!remote.is_unix()) ns = conn.SetNoDelay(true);
    if (ns.ok() && !remote.is_unix()) ns = conn.SetTcpKeepalive(reactor_->options().tcp_keepalive);
    if (!ns.ok()) {
      VLOG(1) << "dropping accepted connection from " << remote.ToString() << ": " << ns.ToString();
      continue;
    }
    if (TransportMetrics* m = reactor_->options().metrics.get())
      m->connections_accepted->Increment();
    Reactor* target = pick_reactor_();
    Task adopt;
    if (serves_ == Serves::kHttp) {
      auto h = std::make_shared<HttpConnection>(target, std::move(conn), remote, std::string(),
                                                target->http_handler(), std::move(http_slot),
                                                /*tls=*/reactor_->options().http_tls != nullptr);
      adopt = [target, h = std::move(h)]() mutable { target->AdoptHttpConnection(std::move(h)); };
    } else {
      // Before it authenticates, a peer holds a place among the
      // connections not yet negotiated, bounded in all and per address.
      PreAuthLimits::Ticket ticket;
      if (const std::shared_ptr<PreAuthLimits>& limits = reactor_->options().pre_auth) {
        std::string why;
        ticket = limits->Admit(remote, &why);
        if (!ticket.held()) {
          std::string suffix;
          if (LogRateLimiter::BadPeers()->Allow(MonoTime::Now(), &suffix)) {
            LOG(WARNING) << "refusing connection from " << remote.ToString() << ": " << why
                         << suffix;
          }
          if (TransportMetrics* m = reactor_->options().metrics.get()) {
            m->connections_refused_unauthenticated->Increment();
          }
          continue;  // `conn` closes here
        }
      }
      auto c =
          std::make_shared<Connection>(target, Connection::Role::kServer, std::move(conn), remote,
                                       std::string(), std::string(), std::move(ticket));
      c->CountIn(open_connections_);
      adopt = [target, c = std::move(c)]() mutable { target->AdoptServerConnection(std::move(c)); };
    }
    if (target == reactor_) {
      adopt();
    } else {
      target->Schedule(std::move(adopt));  // false: shutting down; the socket closes
    }
  }
}

}  // namespace osprey::transport
