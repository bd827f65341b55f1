#include "common/grpc/credentials.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <grpcpp/support/client_interceptor.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": cannot read it (", std::strerror(errno), ")"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// OK when `pem` holds at least one certificate (TLS libraries take the first of a chain as the
// leaf); `leaf`, when given, receives it.
absl::Status CheckCertificate(const std::string& pem, absl::string_view flag,
                              const std::string& path, X509** leaf = nullptr) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, " holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)"));
  }
  if (leaf != nullptr) {
    *leaf = cert;
  } else {
    X509_free(cert);
  }
  return absl::OkStatus();
}

// OK when `key_pem` holds a private key and it is `cert`'s.
absl::Status CheckKeyPair(const std::string& key_pem, absl::string_view key_flag,
                          const std::string& key_path, absl::string_view cert_flag,
                          const std::string& cert_path, X509* cert) {
  BIO* bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  absl::Status status;
  if (key == nullptr) {
    status = absl::InvalidArgumentError(
        absl::StrCat(key_flag, " ", key_path,
                     " holds no unencrypted PEM private key (expected -----BEGIN "
                     "PRIVATE KEY-----)"));
  } else if (X509_check_private_key(cert, key) != 1) {
    status = absl::InvalidArgumentError(
        absl::StrCat(key_flag, " ", key_path, " is not the private key of the certificate in ",
                     cert_flag, " ", cert_path, " (give the key the certificate was made from)"));
  }
  EVP_PKEY_free(key);
  ERR_clear_error();
  return status;
}

// Reads and checks a certificate and its key; fills `cert_pem` and `key_pem`.
absl::Status ReadKeyPair(const std::string& cert_path, absl::string_view cert_flag,
                         const std::string& key_path, absl::string_view key_flag,
                         std::string* cert_pem, std::string* key_pem) {
  RT_ASSIGN_OR_RETURN(*cert_pem, ReadWholeFile(cert_path, cert_flag));
  RT_ASSIGN_OR_RETURN(*key_pem, ReadWholeFile(key_path, key_flag));
  X509* leaf = nullptr;
  RT_RETURN_IF_ERROR(CheckCertificate(*cert_pem, cert_flag, cert_path, &leaf));
  const absl::Status pair = CheckKeyPair(*key_pem, key_flag, key_path, cert_flag, cert_path, leaf);
  X509_free(leaf);
  return pair;
}

absl::StatusOr<std::string> ReadCa(const std::string& path, absl::string_view flag) {
  RT_ASSIGN_OR_RETURN(std::string pem, ReadWholeFile(path, flag));
  RT_RETURN_IF_ERROR(CheckCertificate(pem, flag, path));
  return pem;
}

// Adds `authorization: Bearer <token>` to the initial metadata of every call.
class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* value) : value_(value) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationKey, *value_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const value_;  // owned by the factory, which the channel keeps
};

class BearerInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& token)
      : value_(absl::StrCat(kBearerPrefix, token)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerInterceptor(&value_);
  }

 private:
  const std::string value_;
};

// The host of "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 literal; "" when a '['
// is not closed.
absl::string_view HostOf(absl::string_view address) {
  if (absl::ConsumePrefix(&address, "[")) {
    const size_t close = address.find(']');
    return close == absl::string_view::npos ? "" : address.substr(0, close);
  }
  if (std::count(address.begin(), address.end(), ':') > 1) return address;  // "::1"
  return address.substr(0, address.find(':'));
}

bool IsLoopbackHost(absl::string_view host) {
  const std::string name = absl::AsciiStrToLower(host);
  if (name == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, name.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

bool IsLoopbackTarget(absl::string_view target) {
  // A socket file or an abstract socket never leaves the machine.
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) return true;
  if (absl::ConsumePrefix(&target, "ipv4:") || absl::ConsumePrefix(&target, "ipv6:")) {
    // gRPC may pick any address of the list.
    if (target.empty()) return false;
    for (absl::string_view address : absl::StrSplit(target, ',')) {
      if (!IsLoopbackHost(HostOf(address))) return false;
    }
    return true;
  }
  if (absl::ConsumePrefix(&target, "dns:") && absl::ConsumePrefix(&target, "//")) {
    // dns://AUTHORITY/NAME: the authority is the DNS server to ask, not where calls go.
    const size_t slash = target.find('/');
    if (slash == absl::string_view::npos) return false;
    target.remove_prefix(slash + 1);
  }
  // Another scheme (xds:, vsock:) parses as a host that is no loopback address.
  return IsLoopbackHost(HostOf(target));
}

absl::Status CheckTokenTransport(absl::string_view target, const ChannelSecurity& security,
                                 absl::string_view token_source) {
  if (!security.cleartext_token() || IsLoopbackTarget(target)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "refusing to send the token of ", token_source, " in cleartext to ", target,
      ", which is not a loopback address: anyone on the way could read it and use it. Give "
      "--tls-ca "
      "FILE (the CA that signed the server's certificate) to send it over TLS, or reach the "
      "server at a loopback address (127.0.0.1, [::1], localhost; e.g. through an SSH tunnel or "
      "kubectl port-forward)"));
}

std::string CleartextTokenWarning(absl::string_view target, const ChannelSecurity& security,
                                  absl::string_view token_source) {
  if (!security.cleartext_token()) return "";
  return absl::StrCat("warning: sending the token of ", token_source, " in cleartext to ", target,
                      " (a loopback address, so it stays on this machine); give --tls-ca FILE if "
                      "the server serves TLS");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files) {
  if (files.cert.empty() && files.key.empty()) {
    if (!files.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-ca needs TLS: give --tls-cert and --tls-key too");
    }
    return grpc::InsecureServerCredentials();
  }
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        files.cert.empty() ? "--tls-key" : "--tls-cert", " needs ",
        files.cert.empty() ? "--tls-cert" : "--tls-key", ": TLS takes a certificate and its key"));
  }
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  RT_RETURN_IF_ERROR(ReadKeyPair(files.cert, "--tls-cert", files.key, "--tls-key", &pair.cert_chain,
                                 &pair.private_key));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.client_ca.empty()) {
    RT_ASSIGN_OR_RETURN(options.pem_root_certs, ReadCa(files.client_ca, "--tls-client-ca"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<ChannelSecurity> LoadChannelSecurity(const ClientTlsFiles& files,
                                                    std::string bearer_token) {
  ChannelSecurity security;
  if (!bearer_token.empty()) RT_RETURN_IF_ERROR(CheckToken(bearer_token, "the token"));
  security.bearer_token = std::move(bearer_token);
  if (files.ca.empty()) {
    if (!files.cert.empty() || !files.key.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert/--tls-key (a client certificate) need TLS: give --tls-ca FILE too");
    }
    return security;
  }
  grpc::SslCredentialsOptions options;
  RT_ASSIGN_OR_RETURN(options.pem_root_certs, ReadCa(files.ca, "--tls-ca"));
  if (!files.cert.empty() || !files.key.empty()) {
    if (files.cert.empty() || files.key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(files.cert.empty() ? "--tls-key" : "--tls-cert", " needs ",
                       files.cert.empty() ? "--tls-cert" : "--tls-key",
                       ": a client certificate takes a certificate and its key"));
    }
    RT_RETURN_IF_ERROR(ReadKeyPair(files.cert, "--tls-cert", files.key, "--tls-key",
                                   &options.pem_cert_chain, &options.pem_private_key));
  }
  security.credentials = grpc::SslCredentials(options);
  return security;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelSecurity& security,
                                           const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      security.tls() ? security.credentials : grpc::InsecureChannelCredentials();
  // A token CheckTokenTransport refuses is left off rather than leaked (see the header).
  if (security.bearer_token.empty() || !CheckTokenTransport(address, security, "").ok()) {
    return grpc::CreateCustomChannel(address, credentials, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerInterceptorFactory>(security.bearer_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

absl::Status CheckToken(absl::string_view token, absl::string_view source) {
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(source, " is empty"));
  for (const char c : token) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          absl::StrCat(source,
                       " holds a space or a character that is not printable ASCII; a token is one "
                       "word, e.g. the output of `openssl rand -hex 32`"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path,
                                                       absl::string_view flag) {
  RT_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path, flag));
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    RT_RETURN_IF_ERROR(CheckToken(line, absl::StrCat(flag, " ", path, " line ", line_number)));
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, " holds no token (one per line; blank lines and # comments are skipped)"));
  }
  return tokens;
}

absl::StatusOr<std::string> ReadSingleToken(const std::string& path, absl::string_view flag) {
  RT_ASSIGN_OR_RETURN(std::vector<std::string> tokens, ReadTokenFile(path, flag));
  if (tokens.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, " holds ", tokens.size(), " tokens; a client sends one"));
  }
  return tokens.front();
}

}  // namespace ringtrain
