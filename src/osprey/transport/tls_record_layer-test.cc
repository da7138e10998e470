// The TLS record layer between two sessions that finished a handshake in
// memory, over a socketpair: what goes on the wire (the clear prefix, then
// records only), what comes out of the other side, a socket that fills up,
// and input that is not TLS.
#include "osprey/transport/tls_record_layer.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <string>
#include <vector>

namespace osprey::transport {
namespace {

using FrameQueue = TlsRecordLayer::FrameQueue;

// Collects plaintext; stops after `stop_after` writes if set.
class StringSink : public PlaintextSink {
 public:
  uint8_t* WriteSpace(size_t* space) override {
    buf_.resize(4096);
    *space = buf_.size();
    return buf_.data();
  }
  bool Wrote(size_t n) override {
    out.append(reinterpret_cast<const char*>(buf_.data()), n);
    ++writes;
    return stop_after == 0 || writes < stop_after;
  }
  std::string out;
  int writes = 0;
  int stop_after = 0;

 private:
  std::vector<uint8_t> buf_;
};

struct Sessions {
  std::unique_ptr<TlsContext> server_ctx, client_ctx;
  std::unique_ptr<TlsSession> server, client;
};

Sessions HandshakeInMemory() {
  Sessions s;
  EXPECT_TRUE(TlsContext::CreateServer(TlsOptions(), &s.server_ctx).ok());
  EXPECT_TRUE(TlsContext::CreateClient(TlsOptions(), &s.client_ctx).ok());
  EXPECT_TRUE(s.server_ctx->NewSession(&s.server).ok());
  EXPECT_TRUE(s.client_ctx->NewSession(&s.client).ok());
  std::string to_server, to_client;
  bool client_done = false, server_done = false;
  EXPECT_TRUE(s.client->Handshake(Slice(), &to_server, &client_done).ok());
  for (int round = 0; round < 10 && !(client_done && server_done); ++round) {
    to_client.clear();
    EXPECT_TRUE(s.server->Handshake(to_server, &to_client, &server_done).ok());
    to_server.clear();
    if (!to_client.empty() || !client_done) {
      EXPECT_TRUE(s.client->Handshake(to_client, &to_server, &client_done).ok());
    }
  }
  EXPECT_TRUE(client_done && server_done);
  return s;
}

struct SocketPair {
  SocketPair() {
    int fds[2];
    EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, fds));
    a = Socket(fds[0]);
    b = Socket(fds[1]);
    EXPECT_TRUE(a.SetNonBlocking(true).ok());
    EXPECT_TRUE(b.SetNonBlocking(true).ok());
  }
  Socket a, b;
};

// Everything readable on `s` now.
std::string ReadAvailable(Socket* s) {
  std::string got;
  uint8_t buf[65536];
  while (true) {
    size_t n = 0;
    if (!s->Read(buf, sizeof(buf), &n).ok() || n == 0) break;
    got.append(reinterpret_cast<const char*>(buf), n);
  }
  return got;
}

FrameQueue Frames(std::initializer_list<std::string> contents) {
  FrameQueue q;
  for (const auto& c : contents) q.push_back(wire::OutboundFrame::FromBytes(c));
  return q;
}

TEST(TlsRecordLayerTest, ClearPrefixFirstThenOnlyRecordsThatThePeerDecrypts) {
  Sessions s = HandshakeInMemory();
  SocketPair sockets;
  FrameQueue prefix = Frames({"LAST-CLEAR-TOKEN"});
  TlsRecordLayer sender(std::move(s.client), &prefix);
  EXPECT_TRUE(prefix.empty());
  EXPECT_EQ(16u, sender.unsent_bytes());

  const std::string secret_a = "first frame, secret";
  const std::string secret_b(10000, 'z');  // encrypted in place, not gathered
  FrameQueue frames = Frames({secret_a, secret_b});
  size_t frame_bytes = secret_a.size() + secret_b.size();
  size_t wrote_any = 0;
  ASSERT_TRUE(sender.Flush(&sockets.a, &frames, &frame_bytes, &wrote_any).ok());
  EXPECT_GT(wrote_any, 16u);
  EXPECT_TRUE(frames.empty());
  EXPECT_EQ(0u, frame_bytes);
  EXPECT_EQ(0u, sender.unsent_bytes());

  std::string wire = ReadAvailable(&sockets.b);
  ASSERT_EQ(0u, wire.rfind("LAST-CLEAR-TOKEN", 0));
  EXPECT_EQ(std::string::npos, wire.find("secret"));
  EXPECT_EQ(std::string::npos, wire.find(std::string(64, 'z')));
  EXPECT_EQ(0x17, static_cast<uint8_t>(wire[16]));  // a TLS application-data record

  FrameQueue none;
  TlsRecordLayer receiver(std::move(s.server), &none);
  StringSink sink;
  bool answered = true;
  // Split at an odd place: records arrive in any pieces.
  Slice records(reinterpret_cast<const uint8_t*>(wire.data()) + 16, wire.size() - 16);
  ASSERT_TRUE(receiver.Decrypt(Slice(records.data(), 7), &sink, &answered).ok());
  ASSERT_TRUE(
      receiver.Decrypt(Slice(records.data() + 7, records.size() - 7), &sink, &answered).ok());
  EXPECT_FALSE(answered);
  EXPECT_EQ(secret_a + secret_b, sink.out);
}

// The lengths of the TLS records in `wire`, which holds whole records.
std::vector<size_t> RecordLengths(const std::string& wire) {
  std::vector<size_t> lengths;
  size_t off = 0;
  while (off + 5 <= wire.size()) {
    size_t len =
        (size_t{static_cast<uint8_t>(wire[off + 3])} << 8) | static_cast<uint8_t>(wire[off + 4]);
    lengths.push_back(len);
    off += 5 + len;
  }
  EXPECT_EQ(off, wire.size()) << "a record is cut short";
  return lengths;
}

// Small frames share a record, but one that ends its record (a negotiation
// message, the connection context) is never followed in it: a Kudu server
// reads the context through its session and then waits for the socket.
TEST(TlsRecordLayerTest, AFrameThatEndsItsRecordIsNotFollowedInIt) {
  for (bool mark : {false, true}) {
    SCOPED_TRACE(mark ? "context ends its record" : "no mark");
    Sessions s = HandshakeInMemory();
    SocketPair sockets;
    FrameQueue none;
    TlsRecordLayer sender(std::move(s.client), &none);
    FrameQueue frames = Frames({"the connection context", "call one", "call two"});
    if (mark) frames.front()->set_ends_record();
    size_t frame_bytes = 22 + 8 + 8;
    size_t wrote = 0;
    ASSERT_TRUE(sender.Flush(&sockets.a, &frames, &frame_bytes, &wrote).ok());
    EXPECT_TRUE(frames.empty());
    std::string wire = ReadAvailable(&sockets.b);
    EXPECT_EQ(mark ? 2u : 1u, RecordLengths(wire).size());

    TlsRecordLayer receiver(std::move(s.server), &none);
    StringSink sink;
    bool answered;
    ASSERT_TRUE(receiver
                    .Decrypt(Slice(reinterpret_cast<const uint8_t*>(wire.data()), wire.size()),
                             &sink, &answered)
                    .ok());
    EXPECT_EQ("the connection contextcall onecall two", sink.out);
  }
}

TEST(TlsRecordLayerTest, AFullSocketKeepsRecordsAndEncryptsALargeFrameInBatches) {
  Sessions s = HandshakeInMemory();
  SocketPair sockets;
  int small = 4096;
  ASSERT_EQ(0, setsockopt(sockets.a.fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
  FrameQueue none;
  TlsRecordLayer sender(std::move(s.client), &none);
  TlsRecordLayer receiver(std::move(s.server), &none);

  std::string big(4 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 / 7);
  FrameQueue frames = Frames({big});
  size_t frame_bytes = big.size();
  StringSink sink;
  for (int round = 0; round < 100000 && (!frames.empty() || sender.unsent_bytes() > 0); ++round) {
    size_t wrote_any;
    ASSERT_TRUE(sender.Flush(&sockets.a, &frames, &frame_bytes, &wrote_any).ok());
    // Never the whole frame as records at once: one batch at most.
    EXPECT_LE(sender.unsent_bytes(), size_t{300 * 1024});
    // Every byte is counted once: as plaintext still to encrypt or as
    // records still to send (with the records' few bytes of overhead).
    EXPECT_LE(frame_bytes + sender.unsent_bytes(), big.size() + 8 * 1024);
    std::string wire = ReadAvailable(&sockets.b);
    bool answered;
    ASSERT_TRUE(receiver.Decrypt(wire, &sink, &answered).ok());
  }
  EXPECT_TRUE(frames.empty());
  EXPECT_EQ(0u, frame_bytes);
  EXPECT_TRUE(sink.out == big);
}

TEST(TlsRecordLayerTest, ASinkThatStopsEndsDecryptionAndCloseNotifyIsAborted) {
  Sessions s = HandshakeInMemory();
  SocketPair sockets;
  FrameQueue none;
  TlsRecordLayer sender(std::move(s.client), &none);
  TlsRecordLayer receiver(std::move(s.server), &none);
  std::string payload(20000, 'q');
  FrameQueue frames = Frames({payload});
  size_t frame_bytes = payload.size();
  size_t wrote_any;
  bool answered;
  ASSERT_TRUE(sender.Flush(&sockets.a, &frames, &frame_bytes, &wrote_any).ok());
  std::string wire = ReadAvailable(&sockets.b);

  StringSink stopping;
  stopping.stop_after = 1;
  ASSERT_TRUE(receiver.Decrypt(wire, &stopping, &answered).ok());
  EXPECT_EQ(1, stopping.writes);
  EXPECT_LT(stopping.out.size(), payload.size());

  sender.CloseNotify(&sockets.a);
  StringSink rest;
  Status st = receiver.Decrypt(ReadAvailable(&sockets.b), &rest, &answered);
  EXPECT_TRUE(st.IsAborted()) << st.ToString();
}

// A close_notify comes only after the last record: with the socket full and
// records left, none is sent behind them; once the peer reads, the rest
// and the alert go.
TEST(TlsRecordLayerTest, CloseNotifyNeverFollowsARecordCutShort) {
  Sessions s = HandshakeInMemory();
  SocketPair sockets;
  int small = 4096;
  ASSERT_EQ(0, setsockopt(sockets.a.fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
  FrameQueue none;
  TlsRecordLayer sender(std::move(s.client), &none);
  TlsRecordLayer receiver(std::move(s.server), &none);
  std::string payload(200000, 'r');
  FrameQueue frames = Frames({payload});
  size_t frame_bytes = payload.size();
  size_t wrote;
  ASSERT_TRUE(sender.Flush(&sockets.a, &frames, &frame_bytes, &wrote).ok());
  ASSERT_GT(sender.unsent_bytes(), 0u) << "the socket should be full";
  sender.CloseNotify(&sockets.a);
  // What arrived is records only, cut where the socket was full: no alert
  // in it, so decrypting it ends without the peer's goodbye.
  StringSink sink;
  bool answered;
  Status st = receiver.Decrypt(ReadAvailable(&sockets.b), &sink, &answered);
  EXPECT_FALSE(st.IsAborted()) << "a close_notify followed records cut short";
  EXPECT_LT(sink.out.size(), payload.size());
}

TEST(TlsRecordLayerTest, BytesThatAreNotRecordsAreAnErrorAndKeptWhenAsked) {
  Sessions s = HandshakeInMemory();
  FrameQueue none;
  TlsRecordLayer receiver(std::move(s.client), &none);
  receiver.set_keep_raw_input(true);
  // What a server's clear error frame looks like: a length starting with 0.
  const std::string clear_frame("\0\0\0\x0cnot a record", 16);
  StringSink sink;
  bool answered;
  Status st = receiver.Decrypt(clear_frame, &sink, &answered);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(sink.out.empty());
  EXPECT_EQ(clear_frame, receiver.TakeRawInput());
  EXPECT_EQ("", receiver.TakeRawInput());

  receiver.set_keep_raw_input(false);
  (void)receiver.Decrypt(clear_frame, &sink, &answered);
  EXPECT_EQ("", receiver.TakeRawInput());
}

// Issue 47, finding 8: a client keeps the raw bytes after its switch to
// records only while they may be the server's clear error frame, and never
// more than one frame of them. Records from the server (here 3 MiB of them,
// more than the 1 MiB frame a connection allows before it is open) are not
// kept at all.
TEST(TlsRecordLayerTest, RawInputIsNotKeptOnceItIsRecords) {
  Sessions s = HandshakeInMemory();
  FrameQueue none;
  TlsRecordLayer sender(std::move(s.server), &none);
  TlsRecordLayer receiver(std::move(s.client), &none);
  receiver.set_keep_raw_input(true);
  SocketPair sockets;
  const std::string payload(64 * 1024, 'p');
  StringSink sink;
  for (int i = 0; i < 48; ++i) {
    FrameQueue frames = Frames({payload});
    size_t frame_bytes = payload.size(), wrote;
    ASSERT_TRUE(sender.Flush(&sockets.a, &frames, &frame_bytes, &wrote).ok());
    ASSERT_EQ(0u, sender.unsent_bytes());
    bool answered;
    ASSERT_TRUE(receiver.Decrypt(ReadAvailable(&sockets.b), &sink, &answered).ok());
  }
  EXPECT_EQ(48 * payload.size(), sink.out.size());
  EXPECT_EQ(0u, receiver.TakeRawInput().size()) << "raw bytes kept after 3 MiB of records";
}

// Clear bytes after the switch (what a server's error frame looks like) are
// kept up to the bound; past it, the negotiation fails with an error that
// says so, and nothing is kept.
TEST(TlsRecordLayerTest, RawInputPastOneFrameFailsTheNegotiation) {
  Sessions s = HandshakeInMemory();
  FrameQueue none;
  TlsRecordLayer receiver(std::move(s.client), &none);
  receiver.set_keep_raw_input(true, /*max_bytes=*/64);
  StringSink sink;
  bool answered;
  const std::string fits("\0\0\0\x3c", 4);  // a length, the start of a clear frame
  EXPECT_FALSE(receiver.Decrypt(fits, &sink, &answered).IsNetworkError());
  EXPECT_EQ(fits, receiver.TakeRawInput());

  TlsRecordLayer second(std::move(s.server), &none);
  second.set_keep_raw_input(true, /*max_bytes=*/64);
  const std::string too_long = std::string("\0\0\0\x40", 4) + std::string(61, 'x');
  Status st = second.Decrypt(too_long, &sink, &answered);
  EXPECT_TRUE(st.IsNetworkError()) << st.ToString();
  EXPECT_NE(std::string::npos, st.message().find("more than 64 bytes")) << st.ToString();
  EXPECT_EQ("", second.TakeRawInput());
  EXPECT_TRUE(sink.out.empty());
}

}  // namespace
}  // namespace osprey::transport
