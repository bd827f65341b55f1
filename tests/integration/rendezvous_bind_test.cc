// The trainer's rendezvous listens only where it is advertised: rank 0's c10d TCPStore on
// MASTER_ADDR, every rank's Gloo transport on RINGTRAIN_HOST_ADDRESS — never on every interface.
// Two real trainers meet on 127.0.0.2 (an address of its own: Linux gives all of 127/8 to lo); the
// test reads their listening sockets from /proc/net/tcp{,6} and finds the store's port closed on
// 127.0.0.1.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

constexpr char kAddress[] = "127.0.0.2";

struct Listener {
  std::string address;  // "127.0.0.2", "0.0.0.0", or an IPv6 address in hex
  int port = 0;
};

// The inodes of the sockets `pid` holds open.
std::set<std::string> SocketInodes(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = opendir(fd_dir.c_str());
  if (dir == nullptr) return inodes;
  while (dirent* entry = readdir(dir)) {
    char target[256] = {};
    const std::string link = fd_dir + "/" + entry->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    const std::string text(target, n > 0 ? static_cast<size_t>(n) : 0);
    if (text.rfind("socket:[", 0) == 0) inodes.insert(text.substr(8, text.size() - 9));
  }
  closedir(dir);
  return inodes;
}

// The TCP sockets of `pid` in state LISTEN, from /proc/net/tcp and /proc/net/tcp6.
std::vector<Listener> ListeningSockets(pid_t pid) {
  const std::set<std::string> inodes = SocketInodes(pid);
  std::vector<Listener> listeners;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: TCP_LISTEN
      const size_t colon = local.find(':');
      Listener l;
      l.port = std::stoi(local.substr(colon + 1), nullptr, 16);
      const std::string hex = local.substr(0, colon);
      if (hex.size() == 8) {  // IPv4, in the kernel's (host) byte order
        in_addr addr{};
        addr.s_addr = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
        char text[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &addr, text, sizeof(text));
        l.address = text;
      } else {
        l.address = hex;
      }
      listeners.push_back(l);
    }
  }
  return listeners;
}

std::string Describe(const std::vector<Listener>& listeners) {
  std::string text;
  for (const Listener& l : listeners) text += l.address + ":" + std::to_string(l.port) + " ";
  return text;
}

// Whether a TCP connection to address:port is accepted.
bool Connects(const std::string& address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

bool CanBind(const std::string& address) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

Subprocess StartRank(const TempDir& dir, int rank, int port) {
  const std::string name = "rank" + std::to_string(rank);
  return StartCommand(
      {BinDir() + "/ringtrain-trainer", ConfigPath("debug_model.toml"), "--training.steps=100000",
       "--training.seq_len=32", "--training.local_batch_size=2",
       "--metrics.jsonl=" + (dir / (name + ".jsonl"))},
      dir / (name + ".log"), "",
      {"RANK=" + std::to_string(rank), "WORLD_SIZE=2", std::string("MASTER_ADDR=") + kAddress,
       "MASTER_PORT=" + std::to_string(port), std::string("RINGTRAIN_HOST_ADDRESS=") + kAddress,
       "OMP_NUM_THREADS=1"});
}

TEST(RendezvousBindTest, StoreAndGlooListenOnTheAdvertisedAddressOnly) {
  if (!CanBind(kAddress)) GTEST_SKIP() << kAddress << " is not a local address here";
  TempDir dir;
  const int port = FreePort();
  Subprocess rank0 = StartRank(dir, 0, port);
  // Rank 0 alone: its store listens and waits for rank 1.
  ASSERT_TRUE(WaitFor([&] { return !ListeningSockets(rank0.pid()).empty(); }, 60))
      << ReadFile(dir / "rank0.log");
  const std::vector<Listener> store = ListeningSockets(rank0.pid());
  ASSERT_EQ(store.size(), 1u) << Describe(store);
  EXPECT_EQ(store[0].address, kAddress) << "the store listens on " << Describe(store);
  EXPECT_EQ(store[0].port, port);
  EXPECT_FALSE(Connects("127.0.0.1", port)) << "the store is reachable on another address";

  // Both ranks: once they train, Gloo listens too, on the advertised address of each.
  Subprocess rank1 = StartRank(dir, 1, port);
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(dir / "rank0.jsonl").empty(); }, 120))
      << ReadFile(dir / "rank0.log") << ReadFile(dir / "rank1.log");
  const std::vector<Listener> listeners0 = ListeningSockets(rank0.pid());
  const std::vector<Listener> listeners1 = ListeningSockets(rank1.pid());
  EXPECT_GE(listeners0.size(), 2u) << "store and Gloo: " << Describe(listeners0);
  EXPECT_GE(listeners1.size(), 1u) << "Gloo: " << Describe(listeners1);
  for (const auto* listeners : {&listeners0, &listeners1}) {
    for (const Listener& l : *listeners) {
      EXPECT_EQ(l.address, kAddress) << "a rendezvous socket listens on " << Describe(*listeners);
      if (l.port != port) {
        EXPECT_FALSE(Connects("127.0.0.1", l.port)) << "Gloo port " << l.port;
      }
    }
  }
  rank1.Signal(SIGTERM);
  rank0.Signal(SIGTERM);
  WaitCommand(rank1, 10);
  WaitCommand(rank0, 10);
}

}  // namespace
}  // namespace ringtrain::testing
