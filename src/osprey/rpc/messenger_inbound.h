// Messenger::InboundHandler: where the reactors hand the calls they read
// (messenger_inbound.cc). Internal: only messenger*.cc include it.
#pragma once

#include <memory>

#include "osprey/rpc/messenger.h"
#include "osprey/transport/client_call.h"

namespace osprey {

// Called on the reactor thread of the connection (or on a worker reading
// that connection in its place, holding its loop lock): it holds the calls
// of one read per thread and queues them at the read's end.
class Messenger::InboundHandler final : public transport::InboundCallHandler {
 public:
  explicit InboundHandler(Messenger* m) : m_(m) {}
  // Reactor thread of `conn`.
  void HandleInboundCall(const std::shared_ptr<transport::Connection>& conn,
                         wire::InboundRequest frame, transport::InboundCallTrace* trace) override;
  void EndOfInboundCalls() override;
  void ConnectionClosed(const transport::Connection* conn) override;

 private:
  Messenger* const m_;
};

}  // namespace osprey
