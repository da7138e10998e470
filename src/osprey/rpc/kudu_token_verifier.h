// KuduTokenVerifier: verifies Apache Kudu's authentication tokens, so that
// an Osprey server accepts what a Kudu master issued: a SignedTokenPB over
// a TokenPB, signed RSA-SHA256 by one of the master's token-signing keys,
// whose public halves (Kudu's TokenSigningPublicKeyPB: a sequence number,
// the key as DER SubjectPublicKeyInfo, an expiry) the user adds.
//
// Thread-safe: keys may be added while connections verify tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "osprey/base/mutex.h"
#include "osprey/base/thread_annotations.h"
#include "osprey/base/token_verifier.h"

namespace osprey {

class KuduTokenVerifier : public TokenVerifier {
 public:
  // `now_unix_seconds`: the clock tokens and keys expire by (tests give
  // their own); null: the system's.
  explicit KuduTokenVerifier(std::function<int64_t()> now_unix_seconds = nullptr);
  ~KuduTokenVerifier() override;

  // Adds the public half of token-signing key `seq_num`. InvalidArgument
  // for DER that is not an RSA public key, or a key already expired.
  Status AddPublicKey(int64_t seq_num, const std::string& rsa_public_key_der,
                      int64_t expire_unix_epoch_seconds) OSPREY_EXCLUDES(mu_);
  // Keys held, expired ones included until the next AddPublicKey.
  size_t num_keys() const OSPREY_EXCLUDES(mu_);

  Status Verify(const std::string& token, std::string* user) const override OSPREY_EXCLUDES(mu_);

 private:
  struct Key;
  const std::function<int64_t()> now_;
  mutable Mutex mu_;
  std::map<int64_t, std::shared_ptr<const Key>> keys_ OSPREY_GUARDED_BY(mu_);
};

}  // namespace osprey
