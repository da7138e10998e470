// Acceptor: a listening socket of a server Messenger, in the epoll set of
// one reactor. Accepts every waiting connection when readable and hands each
// to a reactor chosen by `pick_reactor`: as an RPC connection (which may
// still turn out to be HTTP, on the RPC port), or, on an HTTP listener, as
// an HttpConnection from its first byte. Reactor thread only, apart from
// construction.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "osprey/base/socket.h"
#include "osprey/transport/http_connection_pool.h"
#include "osprey/transport/reactor.h"

namespace osprey::transport {

class Acceptor : public EventHandler, public std::enable_shared_from_this<Acceptor> {
 public:
  enum class Serves { kRpc, kHttp };
  // kRpc: `open_connections` counts the connections alive under one limit
  // (shared with every connection this acceptor creates, which decrement
  // it on destruction); past the reactor options' max_server_connections
  // new connections are closed at once.
  // kHttp: each connection takes a slot in `http_pool` (this listener's
  // own), and one that finds none is closed at once.
  // kHttp needs the reactors' options to have an http_handler.
  Acceptor(Reactor* reactor, Socket listener, Serves serves, std::function<Reactor*()> pick_reactor,
           std::shared_ptr<std::atomic<int64_t>> open_connections,
           std::shared_ptr<HttpConnectionPool> http_pool = nullptr);
  // A listener never stopped (its reactor had already stopped) closes
  // here, and its Unix socket file goes too.
  ~Acceptor() override;

  // Binds, listens and returns the bound address (port 0 picks one).
  static Status Listen(const Sockaddr& addr, Socket* listener, Sockaddr* bound);

  // Reactor thread.
  Status Start();
  void Stop();
  void HandleEvents(uint32_t epoll_events) override;

 private:
  // A Unix socket's file would stay behind, and refuse the next listener.
  void RemoveUnixSocketFile();
  Reactor* const reactor_;
  Socket listener_;
  const Serves serves_;
  std::function<Reactor*()> pick_reactor_;
  bool paused_ = false;
  std::shared_ptr<std::atomic<int64_t>> open_connections_;
  const std::shared_ptr<HttpConnectionPool> http_pool_;
  MonoTime last_refusal_log_;
};

}  // namespace osprey::transport
