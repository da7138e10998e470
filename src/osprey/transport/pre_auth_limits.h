// PreAuthLimits: what a server messenger's connections that have not yet
// finished negotiating may hold, all together: how many there are, in all
// and from one peer address, and how many bytes they have buffered. A peer
// that never authenticates can hold no more than these, however many
// connections it opens or however it splits its frames, and one address
// cannot take the slots every other address needs to log in (issue 47).
//
// The acceptor admits each new RPC connection (Admit); the connection holds
// the Ticket, charges the bytes its decoder buffers after each read, and
// gives the ticket back when it opens (negotiated, context received) or
// closes. Unix-socket peers have no address to tell apart: only the total
// applies to them. Any thread: the acceptor's reactor admits, each
// connection's reactor charges and releases (one mutex).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "osprey/base/mutex.h"
#include "osprey/base/sockaddr.h"

namespace osprey::transport {

class PreAuthLimits : public std::enable_shared_from_this<PreAuthLimits> {
 public:
  struct Options {
    size_t max_connections = 0;              // not yet negotiated, in all
    size_t max_connections_per_address = 0;  // of those, from one address
    size_t max_bytes = 0;                    // buffered by all of them
  };

  // One admitted connection's hold on the limits. Move-only; gives back
  // its place and its bytes when released or destroyed. Used by one thread
  // at a time (its connection's reactor).
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }

    bool held() const { return limits_ != nullptr; }
    // This connection now buffers `bytes`: true if the total stays within
    // max_bytes (the charge is then `bytes`); false leaves the charge as it
    // was, and the connection must close. Always true once released.
    bool Charge(size_t bytes);
    // Gives back the place and the bytes; idempotent.
    void Release();

   private:
    friend class PreAuthLimits;
    std::shared_ptr<PreAuthLimits> limits_;
    std::string address_;  // empty: a Unix-socket peer, counted in the total only
    size_t charged_ = 0;
  };

  // Every limit must be at least 1 (checked by MessengerBuilder::Build).
  explicit PreAuthLimits(Options options) : options_(options) {}

  // A held ticket for a new connection from `peer`; an empty one, with
  // *why saying which bound, when the total or the peer's address is at
  // its bound.
  Ticket Admit(const Sockaddr& peer, std::string* why) OSPREY_EXCLUDES(mu_);

  const Options& options() const { return options_; }
  // For tests and /metrics.
  size_t connections() const OSPREY_EXCLUDES(mu_);
  size_t connections_from(const std::string& address) const OSPREY_EXCLUDES(mu_);
  size_t bytes() const OSPREY_EXCLUDES(mu_);

 private:
  const Options options_;
  mutable Mutex mu_;
  size_t connections_ OSPREY_GUARDED_BY(mu_) = 0;
  size_t bytes_ OSPREY_GUARDED_BY(mu_) = 0;
  // Only addresses with a connection waiting: at most max_connections keys.
  std::unordered_map<std::string, size_t> per_address_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey::transport
