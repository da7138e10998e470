// The client side of negotiation against bytes a server (or anyone on the
// path) sends (issue 40). The first input byte picks where they arrive; the
// rest are the bytes:
//  - even: the clear stream before the client's TLS switch. Frames are
//    decoded as a client connection decodes them (at most 1 MiB each, the
//    negotiation limit), and each negotiation frame (call id -33) goes to a
//    ClientNegotiator that requires TLS. It must never finish negotiation
//    (steps.done) without a finished TLS handshake: no server's bytes talk a
//    TLS-requiring client out of TLS.
//  - odd: after the switch. A real handshake with an in-memory server runs
//    first (OpenSSL on both sides), then the bytes arrive where records
//    must be, and are decrypted as the connection does. No plaintext may
//    come out (the fuzzer cannot forge authenticated records); bytes that
//    are no records and start as a clear frame go, as their first frame, to
//    ClientClearFrameAfterTls, which must never accept it.
// The seeds include the man in the middle's injection: a clear SASL_SUCCESS
// and forged answers.
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

void BeforeTheSwitch(Slice bytes) {
  ClientNegotiator client("alice", TlsFeatures{true, false}, /*tls_required=*/true,
                          ClientContext());
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
    handshake_done |= steps.tls_handshake_done;
    if (steps.done && !handshake_done) abort();  // talked out of TLS
    if (steps.tls_handshake_done) return;        // what follows is records
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

void AfterTheSwitch(Slice bytes) {
  ClientNegotiator client("alice", TlsFeatures{true, false}, /*tls_required=*/true,
                          ClientContext());
  ServerTlsPolicy policy;
  policy.available = true;
  policy.required = true;
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
  if (data[0] % 2 == 0) {
    BeforeTheSwitch(bytes);
  } else {
    AfterTheSwitch(bytes);
  }
  return 0;
}
