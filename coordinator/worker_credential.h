// Per-worker session credentials: a secret the coordinator hands an agent at Register and checks
// on every Hello and on re-registration after a restart. The coordinator keeps only a digest
// (SHA-256, hex) in memory and in the job store; the secret itself is never logged or listed.
// Pure functions over OpenSSL's libcrypto (already a dependency of gRPC). Thread-safe.
#ifndef RINGTRAIN_COORDINATOR_WORKER_CREDENTIAL_H_
#define RINGTRAIN_COORDINATOR_WORKER_CREDENTIAL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// 32 bytes from the OS's CSPRNG, as 64 lowercase hex digits. INTERNAL when no random bytes can be
// had (the caller refuses the registration rather than hand out a guessable secret).
absl::StatusOr<std::string> NewWorkerCredential();

// SHA-256 of `credential`, as 64 lowercase hex digits: what is stored and compared.
std::string CredentialDigest(absl::string_view credential);

// Whether `credential` hashes to `digest`, compared in constant time. False for an empty
// credential or an empty digest (a worker without a stored digest cannot be proven).
bool CredentialMatches(absl::string_view credential, absl::string_view digest);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_WORKER_CREDENTIAL_H_
