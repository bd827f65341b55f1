#include "coordinator/worker_credential.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdint>

#include "absl/strings/escaping.h"

namespace ringtrain {

absl::StatusOr<std::string> NewWorkerCredential() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("cannot draw random bytes for a worker credential (OpenSSL RAND)");
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string CredentialDigest(absl::string_view credential) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(credential.data()), credential.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

bool CredentialMatches(absl::string_view credential, absl::string_view digest) {
  if (credential.empty() || digest.empty()) return false;
  const std::string mine = CredentialDigest(credential);
  // Both are 64 hex digits when the digest came from CredentialDigest; a stored value of another
  // length cannot match, and its length is not a secret.
  if (mine.size() != digest.size()) return false;
  return CRYPTO_memcmp(mine.data(), digest.data(), mine.size()) == 0;
}

}  // namespace ringtrain
