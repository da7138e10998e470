// kudu-token-issuer: issues an authentication token with Apache Kudu's own
// TokenSigner, the class a Kudu master issues them with, so that Osprey's
// KuduTokenVerifier is checked against tokens Kudu made rather than tokens
// made by our own reading of Kudu's format.
//
// Not part of Osprey's build: scripts/kudu-interop.sh compiles it against a
// Kudu peer built by ../shared/peers/kudu (its headers, generated protos and
// libkudu_core.a).
//
//   kudu-token-issuer OUT_DIR USER [VALIDITY_SECONDS]
//
// writes OUT_DIR/token (a serialized SignedTokenPB for USER) and, for each
// token-signing public key the signer's verifier holds, OUT_DIR/key-SEQ.der
// (DER SubjectPublicKeyInfo) and a line "SEQ EXPIRE_UNIX_SECONDS" in
// OUT_DIR/keys.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kudu/security/token.pb.h"
#include "kudu/security/token_signer.h"
#include "kudu/security/token_signing_key.h"
#include "kudu/security/token_verifier.h"
#include "kudu/util/status.h"

namespace {

int Fail(const std::string& what, const kudu::Status& s) {
  std::cerr << "kudu-token-issuer: " << what << ": " << s.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: kudu-token-issuer OUT_DIR USER [VALIDITY_SECONDS]\n";
    return 2;
  }
  const std::string out_dir = argv[1];
  const std::string user = argv[2];
  const int64_t validity = argc == 4 ? std::atoll(argv[3]) : 3600;
  if (validity <= 0) {
    std::cerr << "kudu-token-issuer: VALIDITY_SECONDS must be positive\n";
    return 2;
  }

  // As a master starts: no keys yet, so generate one, add it, make it
  // current.
  kudu::security::TokenSigner signer(validity, validity, /*key_rotation_seconds=*/3600);
  std::unique_ptr<kudu::security::TokenSigningPrivateKey> key;
  kudu::Status s = signer.CheckNeedKey(&key);
  if (!s.ok()) return Fail("CheckNeedKey", s);
  if (key == nullptr) {
    std::cerr << "kudu-token-issuer: the signer wanted no key\n";
    return 1;
  }
  s = signer.AddKey(std::move(key));
  if (!s.ok()) return Fail("AddKey", s);
  s = signer.TryRotateKey();
  if (!s.ok()) return Fail("TryRotateKey", s);

  kudu::security::SignedTokenPB token;
  s = signer.GenerateAuthnToken(user, &token);
  if (!s.ok()) return Fail("GenerateAuthnToken", s);
  std::ofstream(out_dir + "/token", std::ios::binary) << token.SerializeAsString();

  std::ofstream index(out_dir + "/keys");
  for (const kudu::security::TokenSigningPublicKeyPB& pub : signer.verifier().ExportKeys()) {
    std::ofstream(out_dir + "/key-" + std::to_string(pub.key_seq_num()) + ".der", std::ios::binary)
        << pub.rsa_key_der();
    index << pub.key_seq_num() << " " << pub.expire_unix_epoch_seconds() << "\n";
  }
  std::cout << "ISSUED user=" << user << " keys=" << signer.verifier().ExportKeys().size()
            << " token_bytes=" << token.ByteSizeLong() << "\n";
  return 0;
}
