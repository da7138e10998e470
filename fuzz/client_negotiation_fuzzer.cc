// The client side of negotiation against bytes a server (or anyone on the
// path) sends (issues 40 and 47). The client requires encryption and
// offers every TLS feature, TLS_AUTHENTICATION_ONLY included (a loopback
// client that does not encrypt loopback), with one set of credentials:
// bits 1-2 of the first input byte pick a CA that verifies the server, a
// token (with the CA), a certificate of its own, or certificate
// authentication. Bit 0 picks where the rest of the bytes arrive:
//  - 0: the clear stream before the client's TLS switch. Frames are
//    decoded as a client connection decodes them (at most 1 MiB each, the
//    negotiation limit), and each negotiation frame (call id -33) goes to
//    the ClientNegotiator. No server's bytes talk it out of encryption: it
//    never agrees to authentication only (whatever features the answer
//    lists), never finishes negotiation (steps.done) without a finished
//    TLS handshake, and switches to records when the handshake ends.
//  - 1: after the switch. A real handshake with an in-memory server that
//    would allow authentication only runs first (OpenSSL on both sides);
//    the client must switch to records at its end. Then the bytes arrive
//    where records must be, and are decrypted as the connection does. No
//    plaintext may come out (the fuzzer cannot forge authenticated
//    records); bytes that are no records and start as a clear frame go, as
//    their first frame, to ClientClearFrameAfterTls, which must never
//    accept it.
// The seeds include the man in the middle's injections: a clear
// SASL_SUCCESS and forged answers, and a NEGOTIATE answer listing
// TLS_AUTHENTICATION_ONLY.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "osprey/transport/negotiation.h"
#include "osprey/transport/negotiator.h"
#include "osprey/transport/tls_context.h"
#include "osprey/transport/tls_record_layer.h"
#include "osprey/wire/frame_decoder.h"

namespace {

using osprey::Slice;
using osprey::Status;
using namespace osprey::transport;
using osprey::wire::NegotiatePB;

constexpr size_t kNegotiationFrameLimit = 1024 * 1024;

// One of each per process: making a server context makes its key.
const TlsContext* MakeContext(bool server) {
  std::unique_ptr<TlsContext> c;
  Status s = server ? TlsContext::CreateServer(TlsOptions(), &c)
                    : TlsContext::CreateClient(TlsOptions(), &c);
  if (!s.ok()) abort();
  return c.release();
}
const TlsContext* ServerContext() {
  static const TlsContext* ctx = MakeContext(true);
  return ctx;
}
const TlsContext* ClientContext() {
  static const TlsContext* ctx = MakeContext(false);
  return ctx;
}

// What the client holds, by `pick` (0-3): each alone makes a downgrade
// worth an attacker's while.
ClientAuthPolicy Credentials(int pick) {
  ClientAuthPolicy auth;
  switch (pick) {
    case 0:
      auth.verifies_server = true;
      break;
    case 1:
      auth.verifies_server = true;
      auth.token = "a signed token";
      break;
    case 2:
      auth.presents_certificate = true;
      break;
    default:
      auth.presents_certificate = true;
      auth.certificate = true;
      break;
  }
  return auth;
}

// Every TLS feature: what a loopback client that does not encrypt loopback
// is asked to offer.
constexpr TlsFeatures kEveryFeature{true, true};

void BeforeTheSwitch(Slice bytes, int credentials) {
  ClientNegotiator client("alice", kEveryFeature, /*tls_required=*/true, ClientContext(),
                          Credentials(credentials));
  (void)client.Start();
  osprey::wire::ResponseDecoder decoder(kNegotiationFrameLimit);
  std::vector<osprey::wire::InboundResponse> frames;
  if (!decoder.Feed(bytes, &frames).ok() && frames.empty()) return;
  bool handshake_done = false;
  for (const auto& f : frames) {
    if (f.header.call_id() != -33 || f.header.is_error()) return;  // the connection closes
    NegotiatePB pb;
    if (!pb.ParseFromArray(f.main_message.data(), static_cast<int>(f.main_message.size()))) {
      return;
    }
    NegotiationSteps steps;
    if (!client.Handle(pb, &steps).ok()) return;
    if (client.agreed().authentication_only) abort();  // talked out of encryption
    handshake_done |= steps.tls_handshake_done;
    if (steps.done && !handshake_done) abort();  // talked out of TLS
    if (steps.tls_handshake_done) {
      if (steps.records_from < 0) abort();  // the handshake ended and records do not follow
      return;                               // what follows is records
    }
  }
}

class Collect : public PlaintextSink {
 public:
  uint8_t* WriteSpace(size_t* space) override {
    *space = sizeof(buf_);
    return buf_;
  }
  bool Wrote(size_t n) override {
    got_ += n;
    return true;
  }
  size_t got() const { return got_; }

 private:
  uint8_t buf_[4096];
  size_t got_ = 0;
};

void AfterTheSwitch(Slice bytes, int credentials) {
  ClientNegotiator client("alice", kEveryFeature, /*tls_required=*/true, ClientContext(),
                          Credentials(credentials));
  ServerTlsPolicy policy;
  policy.available = true;
  policy.required = true;
  // A loopback server that does not encrypt loopback: it lists
  // authentication only, as a relay could for any server.
  policy.allow_authentication_only = true;
  ServerNegotiator server(policy, ServerContext());
  std::deque<NegotiatePB> to_server{client.Start()}, to_client;
  bool switched = false;
  for (int round = 0; round < 20 && !switched; ++round) {
    while (!to_server.empty()) {
      NegotiationSteps steps;
      if (!server.Handle(to_server.front(), &steps).ok()) abort();
      to_server.pop_front();
      for (auto& m : steps.send) to_client.push_back(m);
    }
    while (!to_client.empty() && !switched) {
      NegotiationSteps steps;
      if (!client.Handle(to_client.front(), &steps).ok()) abort();
      to_client.pop_front();
      for (auto& m : steps.send) to_server.push_back(m);
      switched = steps.tls_handshake_done;
      // The client encrypts whatever the server allowed.
      if (switched && (steps.records_from < 0 || client.agreed().authentication_only)) abort();
    }
  }
  if (!switched) abort();  // two real negotiators always finish the handshake
  TlsRecordLayer::FrameQueue none;
  TlsRecordLayer records(client.TakeTlsSession(), &none);
  records.set_keep_raw_input(true);
  Collect plaintext;
  bool answered = false;
  Status s = records.Decrypt(bytes, &plaintext, &answered);
  if (plaintext.got() > 0) abort();  // forged records were taken
  if (s.ok()) return;                // an incomplete record: waits for more
  std::string raw = records.TakeRawInput();
  if (raw.empty() || raw[0] != '\0') return;  // not a clear frame: the connection closes
  osprey::wire::ResponseDecoder decoder(kNegotiationFrameLimit);
  std::vector<osprey::wire::InboundResponse> frames;
  (void)decoder.Feed(Slice(raw), &frames);
  if (frames.empty()) return;
  const auto& f = frames.front();
  if (ClientClearFrameAfterTls(f.header.call_id(), f.header.is_error(), f.main_message).ok()) {
    abort();  // a clear frame accepted where records must be
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Slice bytes(data + 1, size - 1);
  const int credentials = (data[0] >> 1) & 3;
  if (data[0] % 2 == 0) {
    BeforeTheSwitch(bytes, credentials);
  } else {
    AfterTheSwitch(bytes, credentials);
  }
  return 0;
}
