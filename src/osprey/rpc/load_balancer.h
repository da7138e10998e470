// Load balancing: which server of a set a call goes to. A pure function of
// the servers' state, the call's key and a random draw, so that every rule
// is tested cell by cell (load_balancer-test.cc); ServerSet keeps the state
// and calls it. Plain values; any thread.
//
// Policies (issue 49):
//  - kRoundRobin: the next eligible server after the last one picked.
//  - kPowerOfTwoChoices (the default): two distinct eligible servers drawn
//    at random, the one of lower cost: its calls outstanding, plus the one
//    to come, times its recent latency (Finagle's and Linkerd's "peak
//    EWMA" balancer; ties: the first drawn), latencies within twice each
//    other, or less than a millisecond apart, counting as equal. A slow
//    server costs more per call and keeps its calls longer, so it is
//    picked less: it gets about the share its speed earns, at low load as
//    at high; like servers share alike.
//  - kConsistentHash: rendezvous hashing (highest random weight) of the
//    caller's key (RpcController::set_hash_key) with each eligible server's
//    id: a key keeps its server while that server stays, and when one of N
//    servers comes or goes only the keys that were, or become, its move:
//    about 1/N of them.
// A server is eligible unless it is ejected or draining. With none
// eligible, every server is (a fleet all of whose servers failed is tried
// rather than refused).
//
// A pick looks at a few servers, not all, whatever their number: round
// robin from its position to the first eligible one; two choices draw
// among all the servers and draw again, up to kDraws (16) times, when a
// draw is not eligible (at most half the servers are ejected, so 16 fail
// together once in 65,536 unless many drain); only when those draws fail
// are the eligible servers listed. Rendezvous hashing weighs every server,
// one hash each (the ids in one array when the caller has them), so its
// cost grows with the set (bench/server-set-microbench.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace osprey {

enum class LoadBalancing { kRoundRobin, kPowerOfTwoChoices, kConsistentHash };

// "round_robin", "p2c" or "hash"; nullopt for anything else.
std::optional<LoadBalancing> ParseLoadBalancing(std::string_view name);
const char* LoadBalancingName(LoadBalancing lb);

// What the picker sees of one server.
struct ServerView {
  bool eligible = true;     // not ejected, not draining
  int64_t outstanding = 0;  // calls sent to it and not yet ended
  // Its recent latency (an average that decays; 0: none known, costed as
  // the fastest).
  double latency_ns = 0;
  uint64_t id = 0;  // a stable hash of its address (ServerIdOf)
};

// What a client knows of one server of a set, for reports
// (Proxy::servers(), ServerSet::Report()): its address, the attempts sent
// to it, and whether it is ejected or draining now.
struct ServerReport {
  std::string address;
  int64_t calls = 0;
  int64_t outstanding = 0;
  bool ejected = false;
  bool draining = false;
};

// The id of the server at `address` for consistent hashing: the same on
// every client and in every run.
uint64_t ServerIdOf(std::string_view address);

// The index of the server for a call among `servers` (not empty).
// `round_robin_next`: kRoundRobin's position, advanced past the pick.
// `draw1`, `draw2`: uniform random numbers (kPowerOfTwoChoices: its first
// two draws are draw1 % n and draw2 % (n - 1), its later ones mixed from
// them). `key`: the call's hash key (kConsistentHash). `exclude` (-1:
// none): a server not to pick if any other can be, such as the one that
// just refused the call.
size_t PickServer(LoadBalancing lb, std::span<const ServerView> servers, uint64_t key,
                  uint64_t draw1, uint64_t draw2, uint64_t* round_robin_next, int exclude = -1);
// The same, over `n` servers whose views `view_of` gives when asked, so
// that a pick among thousands of servers builds the views of a few.
// `ids`, if given, are the servers' ids in order (as their views say), in
// one array: rendezvous hashing weighs them there and asks for the view
// of the heaviest alone, unless it is not eligible.
using ServerViewOf = std::function<ServerView(size_t)>;
size_t PickServer(LoadBalancing lb, size_t n, const ServerViewOf& view_of, uint64_t key,
                  uint64_t draw1, uint64_t draw2, uint64_t* round_robin_next, int exclude = -1,
                  std::span<const uint64_t> ids = {});
// Two choices' draws before it lists the eligible servers.
inline constexpr int kDraws = 16;

}  // namespace osprey
