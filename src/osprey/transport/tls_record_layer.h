// TlsRecordLayer: a connection's bytes once TLS records carry them. It owns
// the TLS session and every buffer between the session and the socket:
//
//  - out: frames are encrypted on their way out of the connection's queue,
//    one batch at a time, so that a large frame is never held twice, as
//    itself and as records; the records wait here until the socket takes
//    them. The last clear frames before the switch go first.
//  - in: records read from the socket are decrypted straight into the
//    buffer of the connection's frame decoder (a PlaintextSink).
//
// A layer under the connection, as in Kudu: the connection does not know
// whether its bytes are records. Not thread-safe: its one Connection calls
// it on the reactor thread, under the loop lock that guards the pointer.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "osprey/base/slice.h"
#include "osprey/base/socket.h"
#include "osprey/base/status.h"
#include "osprey/transport/tls_context.h"
#include "osprey/wire/frame_encoder.h"

namespace osprey::transport {

// Where decrypted bytes go: the frame decoder's buffer.
class PlaintextSink {
 public:
  virtual ~PlaintextSink() = default;
  // Room for at least one byte.
  virtual uint8_t* WriteSpace(size_t* space) = 0;
  // `n` bytes were written at WriteSpace. False: stop, the connection is
  // closing.
  virtual bool Wrote(size_t n) = 0;
};

class TlsRecordLayer {
 public:
  using FrameQueue = std::deque<std::unique_ptr<wire::OutboundFrame>>;

  // `clear_prefix`: frames to send in the clear ahead of every record
  // (the handshake's last token); they are copied and `clear_prefix` left
  // empty.
  TlsRecordLayer(std::unique_ptr<TlsSession> session, FrameQueue* clear_prefix);
  TlsRecordLayer(const TlsRecordLayer&) = delete;
  TlsRecordLayer& operator=(const TlsRecordLayer&) = delete;

  // Encrypts `frames` and writes the records to `socket` until both are
  // done or the socket is full (*wrote: the bytes it took). Bytes
  // encrypted are taken off *frame_bytes (they are unsent_bytes() now), and
  // frames fully encrypted are popped. An error is the socket's or the
  // session's.
  Status Flush(Socket* socket, FrameQueue* frames, size_t* frame_bytes, size_t* wrote);

  // Records made but not yet taken by the socket.
  size_t unsent_bytes() const { return wire_out_.size() - wire_out_sent_; }

  // Writes what is left of the records and then a close_notify, as far as
  // the socket takes them now (the alert only if every record went), and
  // drops the rest.
  void CloseNotify(Socket* socket);

  // A buffer for one socket read of records.
  uint8_t* ReadBuffer(size_t* size);

  // Decrypts `records` into `sink` until they are used up or the sink
  // stops. Aborted: the peer ended the session (close_notify); another
  // error: the records are not TLS, or fail authentication. *answered: the
  // session made records of its own while reading (an alert, a KeyUpdate
  // answer) that wait for the next Flush.
  Status Decrypt(Slice records, PlaintextSink* sink, bool* answered);

  // While set, the raw bytes Decrypt is given are also kept: a client that
  // switched to records before the server accepted its handshake may get
  // the server's clear error frame instead (see TakeRawInput). Kept only
  // while they may be that frame: from a first byte of 0 (a frame's length
  // starts so, a record's type never), and at most `max_bytes` (one frame
  // with its length); past that, Decrypt fails with NetworkError. Bytes
  // that start as records are not kept (the frame can only come first).
  void set_keep_raw_input(bool keep, size_t max_bytes = kDefaultMaxRawInput);
  // What Decrypt was given while keep_raw_input was set.
  std::string TakeRawInput();

  // One frame of the default max_negotiation_frame_size, with its length.
  static constexpr size_t kDefaultMaxRawInput = 4 + 1024 * 1024;

 private:
  std::unique_ptr<TlsSession> session_;
  // Records for the socket; the first wire_out_sent_ bytes have been sent.
  std::string wire_out_;
  size_t wire_out_sent_ = 0;
  // Small pieces of frames, gathered to share a record.
  std::string plain_out_;
  std::vector<iovec> iov_scratch_;
  std::vector<uint8_t> read_buf_;
  bool keep_raw_input_ = false;
  size_t max_raw_input_ = kDefaultMaxRawInput;
  std::string raw_input_;
};

}  // namespace osprey::transport
