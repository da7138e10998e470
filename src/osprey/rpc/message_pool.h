// MessagePool: a method's spare large request or response messages.
//
// A server call parses its request into a new message and the handler
// fills a new response; for a large message (a 1 MiB bytes field, a long
// repeated field) both are freed after the answer, and the next call
// allocates, faults in and copies into fresh memory again (see
// BufferPool for why that costs system time). A message given back here is
// cleared, which keeps its strings' and repeated fields' capacity, and the
// next large call of the method parses into it.
//
// Only messages of kMinWireBytes to kMaxWireBytes on the wire are kept
// (and a kept one goes back even if its next call was small, so that a
// method of mixed sizes does not free it), at most kMaxKept per pool, each
// counted by what it holds (SpaceUsedLong after clearing). A method whose
// messages are all small, the common case, never takes the pool's lock. Every pool's bytes are
// summed in total_kept_bytes() (the osprey_server_pooled_message_bytes gauge). Thread-safe: a
// message taken on one worker is given back by whichever thread answers the call.
#pragma once

#include <google/protobuf/message.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "osprey/base/mutex.h"
#include "osprey/base/thread_annotations.h"

namespace osprey {

class MessagePool {
 public:
  static constexpr size_t kMinWireBytes = 32 * 1024;
  static constexpr size_t kMaxWireBytes = 8 * 1024 * 1024;
  static constexpr size_t kMaxKept = 8;

  // `prototype` (a generated default instance) outlives the pool.
  explicit MessagePool(const google::protobuf::Message* prototype);
  ~MessagePool();
  MessagePool(const MessagePool&) = delete;
  MessagePool& operator=(const MessagePool&) = delete;

  // A cleared message to parse `wire_bytes` of request into: a kept one
  // if the request is large and one is kept, else a new one. *reused
  // (if given) says which.
  std::unique_ptr<google::protobuf::Message> TakeFor(size_t wire_bytes, bool* reused = nullptr)
      OSPREY_EXCLUDES(mu_);
  // A cleared message for a response: a kept one if any (the method's
  // last responses were large), else a new one.
  std::unique_ptr<google::protobuf::Message> Take(bool* reused = nullptr) OSPREY_EXCLUDES(mu_);
  // `m` is done with; it was `wire_bytes` on the wire (0: unknown).
  // Kept if there is room and it was large or `reused` (taken from this
  // pool), else freed.
  void Give(std::unique_ptr<google::protobuf::Message> m, size_t wire_bytes, bool reused = false)
      OSPREY_EXCLUDES(mu_);

  size_t kept() const { return kept_count_.load(std::memory_order_relaxed); }
  size_t kept_bytes() const OSPREY_EXCLUDES(mu_);
  // Over every pool in the process.
  static size_t total_kept_bytes();

 private:
  std::unique_ptr<google::protobuf::Message> TakeKept() OSPREY_EXCLUDES(mu_);

  struct Kept {
    std::unique_ptr<google::protobuf::Message> message;
    size_t bytes;
  };

  const google::protobuf::Message* const prototype_;
  mutable Mutex mu_;
  std::vector<Kept> kept_ OSPREY_GUARDED_BY(mu_);
  size_t kept_bytes_ OSPREY_GUARDED_BY(mu_) = 0;
  // kept_.size(), read without the lock so that small calls skip it.
  std::atomic<size_t> kept_count_{0};
};

}  // namespace osprey
