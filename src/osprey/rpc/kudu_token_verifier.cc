#include "osprey/rpc/kudu_token_verifier.h"

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <chrono>

#include "osprey/wire/kudu_token.pb.h"

namespace osprey {

struct KuduTokenVerifier::Key {
  EVP_PKEY* pkey = nullptr;
  int64_t expires = 0;
  ~Key() { EVP_PKEY_free(pkey); }
};

KuduTokenVerifier::KuduTokenVerifier(std::function<int64_t()> now_unix_seconds)
    : now_(now_unix_seconds ? std::move(now_unix_seconds) : [] {
        return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
      }) {}

KuduTokenVerifier::~KuduTokenVerifier() = default;

Status KuduTokenVerifier::AddPublicKey(int64_t seq_num, const std::string& der,
                                       int64_t expire_unix_epoch_seconds) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  auto key = std::make_shared<Key>();
  key->pkey = d2i_PUBKEY(nullptr, &p, static_cast<long>(der.size()));
  if (key->pkey == nullptr || EVP_PKEY_base_id(key->pkey) != EVP_PKEY_RSA) {
    return Status::InvalidArgument("token-signing key " + std::to_string(seq_num) +
                                   " is not an RSA public key in DER (SubjectPublicKeyInfo)");
  }
  int64_t now = now_();
  if (expire_unix_epoch_seconds <= now) {
    return Status::InvalidArgument("token-signing key " + std::to_string(seq_num) +
                                   " has already expired");
  }
  key->expires = expire_unix_epoch_seconds;
  MutexLock l(mu_);
  // Expired keys go: they can vouch for nothing, and the map stays bounded
  // by the keys a master has live at once.
  for (auto it = keys_.begin(); it != keys_.end();) {
    it = it->second->expires <= now ? keys_.erase(it) : std::next(it);
  }
  keys_[seq_num] = std::move(key);
  return Status::OK();
}

size_t KuduTokenVerifier::num_keys() const {
  MutexLock l(mu_);
  return keys_.size();
}

Status KuduTokenVerifier::Verify(const std::string& token, std::string* user) const {
  wire::SignedTokenPB signed_token;
  if (!signed_token.ParseFromString(token) || !signed_token.has_token_data() ||
      !signed_token.has_signature() || !signed_token.has_signing_key_seq_num()) {
    return Status::NotAuthorized("authentication token: not a signed Kudu token");
  }
  std::shared_ptr<const Key> key;
  {
    MutexLock l(mu_);
    auto it = keys_.find(signed_token.signing_key_seq_num());
    if (it != keys_.end()) key = it->second;
  }
  if (key == nullptr) {
    return Status::NotAuthorized("authentication token: signed by unknown key " +
                                 std::to_string(signed_token.signing_key_seq_num()) +
                                 " (give the server the master's current token-signing keys)");
  }
  int64_t now = now_();
  if (key->expires <= now) {
    return Status::NotAuthorized("authentication token: its signing key " +
                                 std::to_string(signed_token.signing_key_seq_num()) +
                                 " has expired; get a new token");
  }
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  bool good =
      md != nullptr && EVP_DigestVerifyInit(md, nullptr, EVP_sha256(), nullptr, key->pkey) == 1 &&
      EVP_DigestVerify(md, reinterpret_cast<const unsigned char*>(signed_token.signature().data()),
                       signed_token.signature().size(),
                       reinterpret_cast<const unsigned char*>(signed_token.token_data().data()),
                       signed_token.token_data().size()) == 1;
  EVP_MD_CTX_free(md);
  if (!good) return Status::NotAuthorized("authentication token: the signature does not verify");
  wire::TokenPB t;
  if (!t.ParseFromString(signed_token.token_data())) {
    return Status::NotAuthorized("authentication token: its data does not parse");
  }
  if (t.incompatible_features_size() > 0) {
    return Status::NotAuthorized(
        "authentication token: it uses features this server does not know");
  }
  if (!t.has_expire_unix_epoch_seconds() || t.expire_unix_epoch_seconds() <= now) {
    return Status::NotAuthorized("authentication token: expired; get a new token");
  }
  if (!t.has_authn() || !t.authn().has_username() || t.authn().username().empty()) {
    return Status::NotAuthorized("authentication token: not an authentication token for a user");
  }
  *user = t.authn().username();
  return Status::OK();
}

}  // namespace osprey
