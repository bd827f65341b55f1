// ringctl's global flags: the coordinator's address and the credentials to reach it, declared once
// (kGlobalFlags). Each may stand before the subcommand or after it, the way kubectl and docker
// users expect, and each follows one precedence: the flag, wherever it stands, over its environment
// variable, over the built-in default. PlaceGlobalFlags does both on the arguments before CLI11
// parses them, so every subcommand that declares a global flag (today's and any added later) gets
// them without code of its own. (CLI11's own envname is not used: it fills the option of every
// subcommand, parsed or not, and those share one variable, so a variable could beat the flag.)
#ifndef RINGTRAIN_CLIENT_GLOBAL_FLAGS_H_
#define RINGTRAIN_CLIENT_GLOBAL_FLAGS_H_

#include <functional>
#include <string>
#include <vector>

namespace ringtrain {

inline constexpr char kCoordinatorEnv[] = "RINGTRAIN_COORDINATOR";
// The client token itself (not a file), read by ringctl's main when --token-file is not given.
inline constexpr char kTokenEnv[] = "RINGTRAIN_TOKEN";

// What the credential flags parse into, for every subcommand that calls a coordinator.
struct CredentialFlags {
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;
};

struct GlobalFlag {
  const char* name;  // "--tls-ca"
  const char* env;   // the variable that stands in for it; "" when none
  // Where a subcommand stores it; null for --coordinator, a CommonFlags member of its own
  // (client/command.h: attached for kCallsCoordinator; `up` and `loss-compare` declare their own,
  // of another meaning: `up` listens there, `loss-compare` runs on the cluster).
  std::string CredentialFlags::*field;
  const char* help;
};

inline constexpr GlobalFlag kGlobalFlags[] = {
    {"--coordinator", kCoordinatorEnv, nullptr,
     "The coordinator's address (host:port); default $RINGTRAIN_COORDINATOR, else "
     "127.0.0.1:50051"},
    {"--tls-ca", "RINGTRAIN_TLS_CA", &CredentialFlags::tls_ca,
     "PEM CA that signed the coordinator's certificate (TLS); default $RINGTRAIN_TLS_CA"},
    {"--tls-cert", "RINGTRAIN_TLS_CERT", &CredentialFlags::tls_cert,
     "PEM client certificate, for a coordinator that wants one (mutual TLS); default "
     "$RINGTRAIN_TLS_CERT"},
    {"--tls-key", "RINGTRAIN_TLS_KEY", &CredentialFlags::tls_key,
     "PEM private key of --tls-cert; default $RINGTRAIN_TLS_KEY"},
    {"--token-file", "", &CredentialFlags::token_file,
     "File holding the client token (else $RINGTRAIN_TOKEN). Sent only over TLS (--tls-ca) or to "
     "a loopback address"},
};

// `args` (without the program name) rewritten: every global flag (`--name VALUE` or
// `--name=VALUE`) before the subcommand (the first argument that is not an option) is moved to
// just after it; then, for each global flag given nowhere, whose variable `getenv` returns
// non-empty and that `takes_env(subcommand, name)` allows, "--name=VALUE" is appended. A flag after
// the subcommand comes after one before it (AttachCommonFlags has CLI11 take the last). Anything
// else is left as it is, for CLI11 to parse or refuse.
std::vector<std::string> PlaceGlobalFlags(
    const std::vector<std::string>& args,
    const std::function<std::string(const std::string& env)>& getenv,
    const std::function<bool(const std::string& subcommand, const std::string& flag)>& takes_env);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_GLOBAL_FLAGS_H_
