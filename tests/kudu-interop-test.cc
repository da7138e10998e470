// Byte-level interoperability with Apache Kudu's RPC: replays the bytes a
// real Kudu client sent into an Osprey server and checks the answers, and
// plays a Kudu server to an Osprey client, checking every frame it sends.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <thread>

#include "bench_service.h"
#include "osprey/base/countdown_latch.h"
#include "osprey/base/socket.h"
#include "osprey/base/user.h"
#include "osprey/rpc/messenger.h"
#include "osprey/transport/connection_options.h"
#include "osprey/wire/connection_header.h"
#include "osprey/wire/frame_decoder.h"
#include "osprey/wire/frame_encoder.h"
#include "wire_test_util.h"

namespace osprey {
namespace {

using KuduCalculator = bench::BenchService;

// One Add call in flight from `client` to `addr`, for the tests that play a
// Kudu server by hand and read what the client sends.
struct PendingAdd {
  PendingAdd(const std::shared_ptr<Messenger>& client, const Sockaddr& addr, uint32_t x, uint32_t y,
             MonoDelta timeout)
      : proxy(client, addr) {
    req.set_x(x);
    req.set_y(y);
    ctl.set_timeout(timeout);
    proxy.AddAsync(req, &resp, &ctl, [this] { done.CountDown(); });
  }
  kudu::rpc_test::CalculatorServiceProxy proxy;
  kudu::rpc_test::AddRequestPB req;
  kudu::rpc_test::AddResponsePB resp;
  RpcController ctl;
  CountDownLatch done{1};
};

// An Osprey server with Kudu's test CalculatorService on a loopback port.
class KuduServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MessengerBuilder("server").set_num_reactors(1).Build(&server).ok());
    ASSERT_TRUE(server->RegisterService(std::make_unique<KuduCalculator>()).ok());
    ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  }
  std::shared_ptr<Messenger> server;
  Sockaddr addr;
};

// A Kudu client's whole connection (header, negotiation as user root,
// connection context, two Add calls), sent to an Osprey server in one
// write: the server's answer must be exactly what Kudu's server sent.
TEST_F(KuduServerTest, KuduClientBytesGetKuduServerAnswers) {
  std::string c2s = Golden("c2s.bin");
  std::string s2c = Golden("s2c.bin");
  ASSERT_EQ(209u, c2s.size());
  ASSERT_EQ(79u, s2c.size());

  Socket sock;
  ASSERT_TRUE(sock.Init(addr).ok());
  ASSERT_TRUE(sock.Connect(addr).ok());
  ASSERT_TRUE(sock.WriteAll(reinterpret_cast<const uint8_t*>(c2s.data()), c2s.size()).ok());
  std::string got;
  for (int i = 0; i < 4; ++i) {
    std::string frame;
    Status s = ReadFrameBytes(&sock, &frame);
    ASSERT_TRUE(s.ok()) << "frame " << i << ": " << s.ToString();
    got += frame;
  }
  EXPECT_EQ(Slice(s2c).ToDebugString(200), Slice(got).ToDebugString(200));
  EXPECT_TRUE(got == s2c);
}

// The same bytes fed to the server a byte at a time still work.
TEST_F(KuduServerTest, KuduClientBytesOneAtATime) {
  std::string c2s = Golden("c2s.bin");
  std::string s2c = Golden("s2c.bin");
  Socket sock;
  ASSERT_TRUE(sock.Init(addr).ok());
  ASSERT_TRUE(sock.Connect(addr).ok());
  ASSERT_TRUE(sock.SetNoDelay(true).ok());
  for (char c : c2s) {
    ASSERT_TRUE(sock.WriteAll(reinterpret_cast<const uint8_t*>(&c), 1).ok());
  }
  std::string got;
  for (int i = 0; i < 4; ++i) {
    std::string frame;
    ASSERT_TRUE(ReadFrameBytes(&sock, &frame).ok());
    got += frame;
  }
  EXPECT_TRUE(got == s2c);
}

// Plays Kudu's server (its recorded answers) to an Osprey client and checks
// each frame the client sends, built by hand from the spec's field numbers.
TEST(KuduInteropTest, OspreyClientSendsKuduFrames) {
  Socket listener;
  Sockaddr addr;
  ASSERT_TRUE(ListenOnLoopback(&listener, &addr).ok());

  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, addr);
  proxy.set_user("root");  // as in the recording
  kudu::rpc_test::AddRequestPB req;
  req.set_x(0);
  req.set_y(1000);
  kudu::rpc_test::AddResponsePB resp;
  RpcController ctl;
  CountDownLatch done(1);
  proxy.AddAsync(req, &resp, &ctl, [&] { done.CountDown(); });

  Socket conn;
  Sockaddr remote;
  ASSERT_TRUE(listener.Accept(&conn, &remote, false).ok());
  std::string s2c = Golden("s2c.bin");

  // Connection header.
  std::string header(7, '\0');
  ASSERT_TRUE(conn.ReadAll(reinterpret_cast<uint8_t*>(header.data()), 7).ok());
  EXPECT_EQ(std::string("hrpc\x09\x00\x00", 7), header);

  // NEGOTIATE: call id -33 (a 10-byte varint), features [1], step 1,
  // authn_types { sasl {} }.
  const std::string kMinus33 = "\x18\xdf\xff\xff\xff\xff\xff\xff\xff\xff\x01";
  std::string frame;
  ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
  std::string negotiate_body = std::string("\x08\x01\x10\x01\x3a\x02\x0a\x00", 8);
  std::string expected =
      std::string("\x00\x00\x00\x15", 4) + "\x0b" + kMinus33 + "\x08" + negotiate_body;
  EXPECT_EQ(Slice(expected).ToDebugString(), Slice(frame).ToDebugString());

  // Kudu's server answers NEGOTIATE (frame 1 of s2c.bin: 34 bytes).
  ASSERT_TRUE(conn.WriteAll(reinterpret_cast<const uint8_t*>(s2c.data()), 34).ok());

  // SASL_INITIATE: step 2, token "\0root\0", mechanism PLAIN: exactly the
  // Kudu client's frame 2 (c2s.bin offset 36, 36 bytes).
  std::string c2s = Golden("c2s.bin");
  ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
  EXPECT_EQ(Slice(c2s.substr(36, 36)).ToDebugString(), Slice(frame).ToDebugString());

  // SASL_SUCCESS (s2c.bin frame 2).
  ASSERT_TRUE(conn.WriteAll(reinterpret_cast<const uint8_t*>(s2c.data()) + 34, 19).ok());

  // Connection context: exactly Kudu's frame 3 (offset 72, 25 bytes).
  ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
  EXPECT_EQ(Slice(c2s.substr(72, 25)).ToDebugString(), Slice(frame).ToDebugString());

  // The call: Kudu's frame 4 without timeout_millis (no timeout set here).
  ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
  std::vector<wire::InboundRequestFrame> frames;
  wire::RequestFrameDecoder dec;
  ASSERT_TRUE(dec.Feed(frame, &frames).ok());
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ(0, frames[0].header.call_id());
  EXPECT_EQ("kudu.rpc_test.CalculatorService", frames[0].header.remote_method().service_name());
  EXPECT_EQ("Add", frames[0].header.remote_method().method_name());
  EXPECT_FALSE(frames[0].header.has_timeout_millis());
  EXPECT_EQ(std::string("\x08\x00\x10\xe8\x07", 5), frames[0].main_message.ToString());

  // Kudu's response to call 0 (s2c.bin frame 3).
  ASSERT_TRUE(conn.WriteAll(reinterpret_cast<const uint8_t*>(s2c.data()) + 53, 13).ok());
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ(1000u, resp.result());
}

// The TLS capture: a Kudu client's NEGOTIATE and its real TLS 1.3
// ClientHello, sent to an Osprey server with TLS on loopback. The server
// answers NEGOTIATE with exactly Kudu's server bytes (TLS and
// TLS_AUTHENTICATION_ONLY chosen), then takes the ClientHello and answers
// with its own ServerHello flight, as Kudu's server did. (The client's
// Finished cannot be replayed: it depends on the server's random key.)
TEST(KuduTlsInteropTest, KuduClientHelloGetsAServerHello) {
  std::shared_ptr<Messenger> server;
  ASSERT_TRUE(MessengerBuilder("server")
                  .set_num_reactors(1)
                  .set_rpc_encryption(RpcEncryption::kOptional)
                  .Build(&server)
                  .ok());
  ASSERT_TRUE(server->RegisterService(std::make_unique<KuduCalculator>()).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());

  std::string c2s = Golden("c2s.bin", "tls");
  std::string s2c = Golden("s2c.bin", "tls");
  // Header (7) + NEGOTIATE (29) + TLS_HANDSHAKE with the ClientHello (286).
  Socket sock;
  ASSERT_TRUE(sock.Init(addr).ok());
  ASSERT_TRUE(sock.Connect(addr).ok());
  ASSERT_TRUE(sock.WriteAll(reinterpret_cast<const uint8_t*>(c2s.data()), 7 + 29 + 286).ok());

  std::string frame;
  ASSERT_TRUE(ReadFrameBytes(&sock, &frame).ok());
  EXPECT_EQ(Slice(s2c.substr(0, 38)).ToDebugString(), Slice(frame).ToDebugString());

  ASSERT_TRUE(ReadFrameBytes(&sock, &frame).ok());
  std::vector<wire::InboundResponseFrame> frames;
  wire::ResponseFrameDecoder dec;
  ASSERT_TRUE(dec.Feed(frame, &frames).ok());
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ(-33, frames[0].header.call_id());
  ASSERT_FALSE(frames[0].header.is_error()) << frames[0].main_message.ToString();
  wire::NegotiatePB answer;
  ASSERT_TRUE(answer.ParseFromArray(frames[0].main_message.data(),
                                    static_cast<int>(frames[0].main_message.size())));
  EXPECT_EQ(wire::NegotiatePB::TLS_HANDSHAKE, answer.step());
  // A TLS handshake record (22), TLS 1.2 record version, holding a
  // ServerHello (2): the start of Kudu's server's token too.
  const std::string& token = answer.tls_handshake();
  ASSERT_GT(token.size(), 6u);
  EXPECT_EQ(std::string("\x16\x03\x03", 3), token.substr(0, 3));
  EXPECT_EQ('\x02', token[5]);
}

// An Osprey client with TLS on loopback sends Kudu's client's NEGOTIATE,
// byte for byte (c2s.bin frame 1 of the TLS capture).
TEST(KuduTlsInteropTest, OspreyTlsClientSendsKuduNegotiate) {
  Socket listener;
  Sockaddr addr;
  ASSERT_TRUE(ListenOnLoopback(&listener, &addr).ok());

  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client")
                  .set_num_reactors(1)
                  .set_rpc_encryption(RpcEncryption::kOptional)
                  .Build(&client)
                  .ok());
  PendingAdd call(client, addr, 1, 2, MonoDelta::FromSeconds(5));

  Socket conn;
  Sockaddr remote;
  ASSERT_TRUE(listener.Accept(&conn, &remote, false).ok());
  std::string c2s = Golden("c2s.bin", "tls");
  std::string got(7 + 29, '\0');
  ASSERT_TRUE(conn.ReadAll(reinterpret_cast<uint8_t*>(got.data()), got.size()).ok());
  EXPECT_EQ(Slice(c2s.substr(0, 36)).ToDebugString(), Slice(got).ToDebugString());
  conn.Close();
  ASSERT_TRUE(call.done.WaitFor(MonoDelta::FromSeconds(10)));
  EXPECT_FALSE(call.ctl.status().ok());
}

std::vector<uint32_t> Flags(const google::protobuf::RepeatedField<uint32_t>& r) {
  return {r.begin(), r.end()};
}

Status WriteString(Socket* s, const std::string& bytes) {
  return s->WriteAll(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// A real Kudu server at its production defaults (rpc_encryption=optional)
// lists TLS and TLS_AUTHENTICATION_ONLY even to a client that offered no
// TLS. Its recorded answers (server-lists-tls/s2c.bin), played to an Osprey
// client without TLS: the client ignores the features only the server
// listed, sends exactly what the recorded Kudu client sent, negotiates in
// the clear and gets both recorded sums.
TEST(KuduReplayTest, ServerListingTlsToAClientWithoutTls) {
  const std::vector<std::string> c2s = SplitFrames(Golden("c2s.bin", "server-lists-tls"), 7);
  const std::vector<std::string> s2c = SplitFrames(Golden("s2c.bin", "server-lists-tls"), 0);
  ASSERT_EQ(5u, c2s.size());
  ASSERT_EQ(4u, s2c.size());
  Socket listener;
  Sockaddr addr;
  ASSERT_TRUE(ListenOnLoopback(&listener, &addr).ok());

  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, addr);
  proxy.set_user("root");  // as in the recording
  kudu::rpc_test::AddRequestPB req[2];
  kudu::rpc_test::AddResponsePB resp[2];
  RpcController ctl[2];
  CountDownLatch done(2);
  for (int i = 0; i < 2; ++i) {
    req[i].set_x(i);
    req[i].set_y(1000 + i);
    ctl[i].set_timeout(MonoDelta::FromSeconds(10));
    proxy.AddAsync(req[i], &resp[i], &ctl[i], [&] { done.CountDown(); });
  }

  Socket conn;
  Sockaddr remote;
  ASSERT_TRUE(listener.Accept(&conn, &remote, false).ok());
  std::string header(7, '\0');
  ASSERT_TRUE(conn.ReadAll(reinterpret_cast<uint8_t*>(header.data()), 7).ok());
  EXPECT_EQ(std::string("hrpc\x09\x00\x00", 7), header);
  std::string frame;
  // NEGOTIATE, listing APPLICATION_FEATURE_FLAGS alone: Kudu's client's bytes.
  ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
  EXPECT_EQ(Slice(c2s[0]).ToDebugString(), Slice(frame).ToDebugString());
  // The server lists APPLICATION_FEATURE_FLAGS, TLS, TLS_AUTHENTICATION_ONLY.
  ASSERT_TRUE(WriteString(&conn, s2c[0]).ok());
  // No TLS_HANDSHAKE: SASL_INITIATE follows at once, as Kudu's client did.
  ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
  EXPECT_EQ(Slice(c2s[1]).ToDebugString(), Slice(frame).ToDebugString());
  ASSERT_TRUE(WriteString(&conn, s2c[1]).ok());
  ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());  // connection context
  EXPECT_EQ(Slice(c2s[2]).ToDebugString(), Slice(frame).ToDebugString());

  // The two calls, in the clear: Kudu's frames but for timeout_millis, which
  // counts down from our own clock.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
    std::vector<wire::InboundRequestFrame> got, recorded;
    wire::RequestFrameDecoder got_dec, recorded_dec;
    ASSERT_TRUE(got_dec.Feed(frame, &got).ok());
    ASSERT_TRUE(recorded_dec.Feed(c2s[3 + i], &recorded).ok());
    ASSERT_EQ(1u, got.size());
    EXPECT_EQ(recorded[0].header.call_id(), got[0].header.call_id());
    EXPECT_EQ(recorded[0].header.remote_method().SerializeAsString(),
              got[0].header.remote_method().SerializeAsString());
    EXPECT_GT(got[0].header.timeout_millis(), 9000u);
    EXPECT_LE(got[0].header.timeout_millis(), 10000u);
    EXPECT_EQ(recorded[0].main_message.ToString(), got[0].main_message.ToString());
  }
  ASSERT_TRUE(WriteString(&conn, s2c[2] + s2c[3]).ok());
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(ctl[i].status().ok()) << ctl[i].status().ToString();
  EXPECT_EQ(1000u, resp[0].result());
  EXPECT_EQ(1002u, resp[1].result());  // the recorded sums, 0 + 1000 and 1 + 1001

  std::vector<ConnectionInfo> conns;
  ASSERT_TRUE(client->DumpConnections(&conns).ok());
  ASSERT_EQ(1u, conns.size());
  EXPECT_EQ(ConnectionSecurity::kClear, conns[0].security);
}

// A Kudu client that encrypts loopback lists TLS alone; a Kudu server at
// its defaults still lists TLS_AUTHENTICATION_ONLY too
// (tls-encrypted-loopback). An Osprey client set the same way sends Kudu's
// client's NEGOTIATE byte for byte and, given the recorded answer, goes on
// to a TLS_HANDSHAKE step carrying a ClientHello, as Kudu's client did.
TEST(KuduReplayTest, EncryptedLoopbackClientAnswersWithATlsHandshake) {
  const std::vector<std::string> c2s = SplitFrames(Golden("c2s.bin", "tls-encrypted-loopback"), 7);
  const std::vector<std::string> s2c = SplitFrames(Golden("s2c.bin", "tls-encrypted-loopback"), 0);
  ASSERT_GE(c2s.size(), 3u);
  ASSERT_GE(s2c.size(), 2u);
  for (auto encryption : {RpcEncryption::kOptional, RpcEncryption::kRequired}) {
    Socket listener;
    Sockaddr addr;
    ASSERT_TRUE(ListenOnLoopback(&listener, &addr).ok());
    std::shared_ptr<Messenger> client;
    ASSERT_TRUE(MessengerBuilder("client")
                    .set_num_reactors(1)
                    .set_rpc_encryption(encryption)
                    .set_rpc_encrypt_loopback(true)
                    .Build(&client)
                    .ok());
    PendingAdd call(client, addr, 0, 1000, MonoDelta::FromSeconds(10));

    Socket conn;
    Sockaddr remote;
    ASSERT_TRUE(listener.Accept(&conn, &remote, false).ok());
    std::string header(7, '\0');
    ASSERT_TRUE(conn.ReadAll(reinterpret_cast<uint8_t*>(header.data()), 7).ok());
    std::string frame;
    ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
    EXPECT_EQ(Slice(c2s[0]).ToDebugString(), Slice(frame).ToDebugString());
    ASSERT_TRUE(WriteString(&conn, s2c[0]).ok());

    ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());
    std::vector<wire::InboundRequestFrame> frames;
    wire::RequestFrameDecoder dec;
    ASSERT_TRUE(dec.Feed(frame, &frames).ok());
    ASSERT_EQ(1u, frames.size());
    EXPECT_EQ(-33, frames[0].header.call_id());
    wire::NegotiatePB step;
    ASSERT_TRUE(step.ParseFromArray(frames[0].main_message.data(),
                                    static_cast<int>(frames[0].main_message.size())));
    EXPECT_EQ(wire::NegotiatePB::TLS_HANDSHAKE, step.step());
    // A handshake record (22) holding a ClientHello (1), as Kudu's was.
    const std::string& token = step.tls_handshake();
    ASSERT_GT(token.size(), 6u);
    EXPECT_EQ('\x16', token[0]);
    EXPECT_EQ('\x01', token[5]);
    conn.Close();
    ASSERT_TRUE(call.done.WaitFor(MonoDelta::FromSeconds(10)));
    EXPECT_FALSE(call.ctl.status().ok());
  }
}

// Kudu's client's recorded connection (plain), with its first Add call
// made to require application feature flag 7, as Kudu's
// RpcController::RequireServerFeature writes it (field 11, after
// timeout_millis). The Osprey server, whose service supports no flags,
// refuses that call as a Kudu server does (ERROR_INVALID_REQUEST, flag 7 in
// unsupported_feature_flags) and answers the second call exactly as Kudu's
// server did.
TEST_F(KuduServerTest, KuduRequestRequiringAnUnsupportedFeatureFlag) {
  std::string c2s = Golden("c2s.bin");
  const std::vector<std::string> s2c = SplitFrames(Golden("s2c.bin"), 0);
  std::vector<std::string> frames = SplitFrames(c2s, 7);
  ASSERT_EQ(5u, frames.size());
  ASSERT_EQ(4u, s2c.size());
  // Frame 4: length, varint header length 45, header, varint body length, body.
  std::string add = frames[3];
  ASSERT_EQ(45, add[4]);
  std::string header = add.substr(5, 45) + "\x58\x07";  // required_feature_flags: 7
  std::string rest = add.substr(5 + 45);
  std::string rebuilt = std::string(1, static_cast<char>(header.size())) + header + rest;
  uint32_t n = static_cast<uint32_t>(rebuilt.size());
  std::string len{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                  static_cast<char>(n)};
  wire::RequestHeader parsed;
  ASSERT_TRUE(parsed.ParseFromString(header));
  ASSERT_EQ(std::vector<uint32_t>{7}, Flags(parsed.required_feature_flags()));

  std::string stream =
      c2s.substr(0, 7) + frames[0] + frames[1] + frames[2] + len + rebuilt + frames[4];
  Socket sock;
  ASSERT_TRUE(sock.Init(addr).ok());
  ASSERT_TRUE(sock.Connect(addr).ok());
  ASSERT_TRUE(WriteString(&sock, stream).ok());
  std::string got[4];
  for (auto& f : got) ASSERT_TRUE(ReadFrameBytes(&sock, &f).ok());
  EXPECT_EQ(s2c[0], got[0]);
  EXPECT_EQ(s2c[1], got[1]);
  // Responses may come in either order: the refusal is written on the
  // reactor, the sum by a worker.
  int refused = got[2] == s2c[3] ? 3 : 2;
  EXPECT_EQ(s2c[3], got[5 - refused]);
  std::vector<wire::InboundResponseFrame> resp;
  wire::ResponseFrameDecoder dec;
  ASSERT_TRUE(dec.Feed(got[refused], &resp).ok());
  ASSERT_EQ(1u, resp.size());
  EXPECT_EQ(0, resp[0].header.call_id());
  ASSERT_TRUE(resp[0].header.is_error());
  wire::ErrorStatusPB err;
  ASSERT_TRUE(err.ParseFromArray(resp[0].main_message.data(),
                                 static_cast<int>(resp[0].main_message.size())));
  EXPECT_EQ(wire::ErrorStatusPB::ERROR_INVALID_REQUEST, err.code());
  EXPECT_EQ(std::vector<uint32_t>{7}, Flags(err.unsupported_feature_flags()));
  EXPECT_NE(std::string::npos, err.message().find("unsupported feature flags")) << err.message();
}

// A server answering FATAL_SERVER_SHUTTING_DOWN has not run the call, so a
// call with a retry policy is sent again, on a new connection, though Add is
// neither tracked nor idempotent. The server is played by hand from the
// plain Kudu capture: its negotiation answers, then our own call answer.
TEST(KuduRetryTest, AServerShuttingDownIsRetriedOnANewConnection) {
  const std::vector<std::string> s2c = SplitFrames(Golden("s2c.bin"), 0);
  ASSERT_GE(s2c.size(), 2u);
  Socket listener;
  Sockaddr addr;
  ASSERT_TRUE(ListenOnLoopback(&listener, &addr).ok());
  std::shared_ptr<Messenger> client;
  ASSERT_TRUE(MessengerBuilder("client").set_num_reactors(1).Build(&client).ok());
  kudu::rpc_test::CalculatorServiceProxy proxy(client, addr);
  kudu::rpc_test::AddRequestPB req;
  req.set_x(2);
  req.set_y(3);
  kudu::rpc_test::AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(10));
  RetryPolicy retries;
  retries.max_attempts = 3;
  retries.initial_backoff = MonoDelta::FromMilliseconds(10);
  ASSERT_TRUE(ctl.set_retry_policy(retries).ok());
  CountDownLatch done(1);
  proxy.AddAsync(req, &resp, &ctl, [&] { done.CountDown(); });

  // One connection: negotiation as Kudu's server answered it, then the call,
  // answered with `answer` (given the call's id).
  auto serve = [&](const std::function<std::string(int32_t)>& answer) {
    Socket conn;
    Sockaddr remote;
    ASSERT_TRUE(listener.Accept(&conn, &remote, false).ok());
    std::string header(7, '\0'), frame;
    ASSERT_TRUE(conn.ReadAll(reinterpret_cast<uint8_t*>(header.data()), 7).ok());
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());  // NEGOTIATE, SASL_INITIATE
      ASSERT_TRUE(WriteString(&conn, s2c[step]).ok());
    }
    ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());  // connection context
    ASSERT_TRUE(ReadFrameBytes(&conn, &frame).ok());  // the call
    wire::RequestFrameDecoder decoder;
    std::vector<wire::InboundRequestFrame> frames;
    ASSERT_TRUE(decoder.Feed(Slice(frame), &frames).ok());
    ASSERT_EQ(1u, frames.size());
    EXPECT_EQ("Add", frames[0].header.remote_method().method_name());
    ASSERT_TRUE(WriteString(&conn, answer(frames[0].header.call_id())).ok());
  };
  auto response = [](int32_t call_id, bool is_error, const google::protobuf::MessageLite& body) {
    wire::ResponseHeader h;
    h.set_call_id(call_id);
    h.set_is_error(is_error);
    std::unique_ptr<wire::OutboundFrame> f;
    EXPECT_TRUE(
        wire::OutboundFrame::EncodeSerialized(&h, Slice(body.SerializeAsString()), {}, &f).ok());
    return f->ToString();
  };
  serve([&](int32_t call_id) {
    wire::ErrorStatusPB err;
    err.set_code(wire::ErrorStatusPB::FATAL_SERVER_SHUTTING_DOWN);
    err.set_message("Service unavailable: server is shutting down");
    return response(call_id, true, err);
  });
  serve([&](int32_t call_id) {
    kudu::rpc_test::AddResponsePB sum;
    sum.set_result(5);
    return response(call_id, false, sum);
  });
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ(5u, resp.result());
  EXPECT_EQ(2, ctl.attempts());
}

}  // namespace
}  // namespace osprey
