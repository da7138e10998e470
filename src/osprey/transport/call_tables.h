// The calls in flight on one connection, one table per role.
//
// ClientCallTable: a client connection's calls from the time they are
// queued until they complete: those held until negotiation ends, and
// those sent, by call id. It chooses call ids: counting up from 0,
// wrapping at INT32_MAX to 0 (negative ids are the protocol's), never one
// in use.
//
// ServerCallTable: the ids of a server connection's calls whose response
// has not been queued yet. A peer may not reuse one while it is in flight.
// Its size is also published to an atomic the connection owns, for other
// threads (a worker deciding whether to write its response itself).
//
// Both are owned by one Connection and used on its reactor thread, under
// the loop lock that guards them there.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/transport/client_call.h"

namespace osprey::transport {

// What /rpcz shows of a server call in flight, when call tracking is on
// (ConnectionOptions::track_calls). Owned by the connection's
// ServerCallTable, which reuses it once the call's answer is queued; the
// call (on a worker) marks it running when its handler starts and reads
// its method when it answers, both before its answer is queued, and keeps
// the connection (and so the table) alive meanwhile.
struct InboundCallTrace {
  // "<service>.<method>", once the call is routed to its service; owned by
  // the service pool, which outlives the reactors' work.
  std::atomic<const std::string*> method{nullptr};
  MonoTime received;
  std::atomic<bool> running{false};
};

// One call in flight, as /rpcz lists it.
struct CallInfo {
  bool inbound = false;
  std::string method;
  Sockaddr remote;
  std::string user;
  // Inbound, after Kerberos: the principal the caller proved; else empty.
  std::string principal;
  MonoDelta elapsed;
  // Inbound: "queued" or "running". Outbound: "awaiting negotiation" or
  // "awaiting response".
  std::string state;
};

class ClientCallTable {
 public:
  // `first_id`: where the ids start (tests start near the wrap).
  explicit ClientCallTable(int32_t first_id = 0) : next_id_(first_id) {}

  // Waits for negotiation to end.
  void Hold(std::shared_ptr<ClientCall> call) { held_.push_back(std::move(call)); }
  // The held calls, in the order they came.
  std::deque<std::shared_ptr<ClientCall>> TakeHeld();

  // An id no sent call uses.
  int32_t NextFreeId();
  void AddSent(int32_t id, std::shared_ptr<ClientCall> call);
  // The sent call with `id`, removed; null if there is none (it gave up).
  std::shared_ptr<ClientCall> TakeSent(int32_t id);
  // Removes `call` if it is the one sent with `id`: a call that gave up
  // must not take a later call's response.
  void ForgetSent(int32_t id, const ClientCall* call);

  size_t sent() const { return sent_.size(); }
  // f(const ClientCall&, bool sent) for each call, held then sent.
  template <class F>
  void ForEach(F&& f) const {
    for (const auto& c : held_) f(*c, false);
    for (const auto& [id, c] : sent_) f(*c, true);
  }
  // Every call, held first, leaving the table empty.
  std::vector<std::shared_ptr<ClientCall>> TakeAll();

 private:
  int32_t next_id_;
  std::deque<std::shared_ptr<ClientCall>> held_;
  std::unordered_map<int32_t, std::shared_ptr<ClientCall>> sent_;
};

class ServerCallTable {
 public:
  // `size_published`: kept equal to size(), for readers on any thread.
  explicit ServerCallTable(std::atomic<size_t>* size_published) : published_(size_published) {}

  // False if a call with `id` is already in flight. With `traced`, sets
  // *trace to the call's trace (see InboundCallTrace for how long it may be
  // used), else to null.
  bool Add(int32_t id, bool traced, MonoTime received, InboundCallTrace** trace);
  void Remove(int32_t id);
  void Clear();
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  // f(const InboundCallTrace&) for each call in flight that has a trace.
  template <class F>
  void ForEachTrace(F&& f) const {
    for (const auto& [id, trace] : ids_) {
      if (trace != nullptr) f(*trace);
    }
  }

 private:
  std::unordered_map<int32_t, InboundCallTrace*> ids_;
  // Every trace made, at stable addresses; reused from free_traces_ instead
  // of allocated per call. Clear() does not free the traces of the calls it
  // drops: their workers may still hold them.
  std::deque<InboundCallTrace> traces_;
  std::vector<InboundCallTrace*> free_traces_;
  std::atomic<size_t>* const published_;
};

}  // namespace osprey::transport
