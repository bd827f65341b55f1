#include "worker/launcher/launch_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {

namespace {

// Binds a TCP socket on `a` at `port` (0: the kernel's choice) and returns the port bound, or -1
// with `error` set.
int BindAndRelease(const addrinfo& a, int port, std::string* error) {
  const int fd = socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC, a.ai_protocol);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  sockaddr_storage address{};
  std::memcpy(&address, a.ai_addr, a.ai_addrlen);
  if (address.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in*>(&address)->sin_port = htons(static_cast<uint16_t>(port));
  }
  int bound_port = -1;
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), a.ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
    bound_port = bound.ss_family == AF_INET6
                     ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  } else {
    *error = std::strerror(errno);
  }
  close(fd);
  return bound_port;
}

}  // namespace

int EphemeralPortsStart() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  if (in >> first && first > 1024 && first <= 65535) return first;
  return 32768;
}

absl::StatusOr<int> PickFreePort(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master-addr '", addr, "' does not resolve: ", gai_strerror(rc)));
  }
  std::string error = "no address";
  int port = -1;
  constexpr int kLowest = 10000;
  const int end = EphemeralPortsStart();
  std::mt19937 random(std::random_device{}());
  for (addrinfo* a = found; a != nullptr && port < 0; a = a->ai_next) {
    for (int attempt = 0; attempt < 64 && port < 0 && end > kLowest; ++attempt) {
      port =
          BindAndRelease(*a, std::uniform_int_distribution<int>(kLowest, end - 1)(random), &error);
    }
    if (port < 0) port = BindAndRelease(*a, 0, &error);
  }
  freeaddrinfo(found);
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind a TCP port on --master-addr '", addr,
                                               "': ", error, "; use an address of this machine"));
  }
  return port;
}

}  // namespace ringtrain
