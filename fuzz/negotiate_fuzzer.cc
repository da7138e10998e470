// Parses input as a NegotiatePB, as a server does with the body of every
// call_id -33 frame, and exercises what server-side negotiation reads from
// it. Must never crash; re-serialization must be stable.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "osprey/base/slice.h"
#include "osprey/wire/rpc_header.pb.h"
#include "osprey/wire/sasl_plain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using osprey::wire::NegotiatePB;
  NegotiatePB pb;
  if (!pb.ParseFromArray(data, static_cast<int>(size))) return 0;

  // What a server looks at: the step, the features, the mechanisms offered
  // or chosen, the authentication types, and for SASL PLAIN the token.
  volatile int sink = pb.step();
  for (int f : pb.supported_features()) sink = sink + f;
  bool plain = false;
  for (const auto& m : pb.sasl_mechanisms()) plain |= m.mechanism() == "PLAIN";
  for (const auto& t : pb.authn_types()) sink = sink + static_cast<int>(t.type_case());
  if (pb.has_token()) {
    osprey::wire::SaslPlainCredentials creds;
    osprey::Status s = osprey::wire::DecodeSaslPlain(osprey::Slice(pb.token()), &creds);
    if (s.ok()) {
      // A token that decodes re-encodes to itself.
      if (osprey::wire::EncodeSaslPlain(creds) != pb.token()) abort();
      if (creds.authcid.empty()) abort();
    } else if (!s.IsCorruption()) {
      abort();
    }
  }
  (void)plain;

  // Round trip: serialize, parse, serialize again; the two serializations
  // must agree (the input itself need not be canonical).
  std::string once;
  if (!pb.SerializeToString(&once)) abort();
  NegotiatePB again;
  if (!again.ParseFromString(once)) abort();
  std::string twice;
  if (!again.SerializeToString(&twice)) abort();
  if (once != twice) abort();
  return 0;
}
