// TLS credentials and bearer tokens from files, for every ringtrain gRPC server and client.
//
// Servers: ServerCredentialsFromFiles (--tls-cert, --tls-key, optional --tls-client-ca for mutual
// TLS). Clients: LoadChannelSecurity (--tls-ca, optional --tls-cert/--tls-key for mutual TLS, a
// bearer token) and MakeChannel, which sends `authorization: Bearer <token>` on every call of the
// channel (a client interceptor, so it works over plaintext loopback too, where gRPC's call
// credentials refuse to run; never in cleartext to any other address: CheckTokenTransport). Every
// error names the flag and the file, and says what would work.
#ifndef RINGTRAIN_COMMON_GRPC_CREDENTIALS_H_
#define RINGTRAIN_COMMON_GRPC_CREDENTIALS_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// The metadata key a bearer token travels in (lower case, as gRPC requires).
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// A server's TLS files; all empty: plaintext.
struct ServerTlsFiles {
  std::string cert;       // --tls-cert: PEM certificate chain
  std::string key;        // --tls-key: PEM private key of that certificate
  std::string client_ca;  // --tls-client-ca: when set, clients must present a certificate it signed
};

// Plaintext when every field is empty. INVALID_ARGUMENT naming the flag when only one of cert/key
// is given, client_ca without them, a file cannot be read or holds no PEM certificate / key, or the
// key is not the certificate's.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files);

// A client's TLS files; all empty: plaintext.
struct ClientTlsFiles {
  std::string ca;    // --tls-ca: PEM CA that signed the server's certificate
  std::string cert;  // --tls-cert: the client's own certificate (mutual TLS), with --tls-key
  std::string key;   // --tls-key
};

// How a client reaches a server: channel credentials (null: plaintext) and a bearer token (empty:
// none). Copyable; immutable once built.
struct ChannelSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string bearer_token;

  bool tls() const { return credentials != nullptr; }
  // The token would travel readable by anyone on the path (CheckTokenTransport decides where).
  bool cleartext_token() const { return !tls() && !bearer_token.empty(); }
};

// TLS from `files` (plaintext when all empty; cert/key without ca is INVALID_ARGUMENT: a client
// certificate needs TLS) and `bearer_token` as is (checked by CheckToken).
absl::StatusOr<ChannelSecurity> LoadChannelSecurity(const ClientTlsFiles& files,
                                                    std::string bearer_token);

// True when the gRPC target `target` can only reach this machine: 127.0.0.0/8, [::1] or localhost,
// with or without a port and a dns:, ipv4: or ipv6: scheme (every address of an ipv4:/ipv6: list),
// or a unix: / unix-abstract: socket. Any other host is not, a DNS name included: it may resolve
// anywhere, and a name that looks local (localhost.example.com) is the classic trick.
bool IsLoopbackTarget(absl::string_view target);

// Whether `security`'s bearer token may go to `target`: OK without a token, over TLS, or in
// cleartext to a loopback target (callers then warn with CleartextTokenWarning). Otherwise
// INVALID_ARGUMENT naming `token_source` (e.g. "--join-token-file FILE") and what would work:
// --tls-ca, or a loopback address.
absl::Status CheckTokenTransport(absl::string_view target, const ChannelSecurity& security,
                                 absl::string_view token_source);

// The one-line warning for a token sent in cleartext to a loopback `target`; empty when
// `security` sends none in cleartext.
std::string CleartextTokenWarning(absl::string_view target, const ChannelSecurity& security,
                                  absl::string_view token_source);

// A channel to `address` with `security`: TLS when it has credentials, and its bearer token added
// to every call's metadata when it has one and CheckTokenTransport allows it. A token it refuses
// is left off (the server then answers UNAUTHENTICATED): callers run CheckTokenTransport first to
// say why; this only makes sure a caller that forgot never leaks the token.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelSecurity& security,
                                           const grpc::ChannelArguments& args);

// The tokens of a token file: one per line, surrounding whitespace trimmed, blank lines and lines
// starting with '#' ignored. INVALID_ARGUMENT naming `flag` and `path` when the file cannot be
// read, holds no token, or a token is not printable ASCII without spaces (what HTTP/2 metadata
// carries).
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path,
                                                       absl::string_view flag);

// The one token of a client's token file (ReadTokenFile, and exactly one token).
absl::StatusOr<std::string> ReadSingleToken(const std::string& path, absl::string_view flag);

// OK when `token` is printable ASCII without spaces, else INVALID_ARGUMENT naming `source`.
absl::Status CheckToken(absl::string_view token, absl::string_view source);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_GRPC_CREDENTIALS_H_
