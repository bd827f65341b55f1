#include "tests/integration/test_util.h"

#include <fcntl.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace ringtrain::testing {

std::string BinDir() {
  const char* dir = std::getenv("RINGTRAIN_BIN_DIR");
  return dir ? dir : RINGTRAIN_DEFAULT_BIN_DIR;
}

std::string SourceDir() {
  const char* dir = std::getenv("RINGTRAIN_SOURCE_DIR");
  return dir ? dir : RINGTRAIN_DEFAULT_SOURCE_DIR;
}

std::string PythonPath() { return RINGTRAIN_DEFAULT_PYTHON; }

std::string ConfigPath(const std::string& name) { return SourceDir() + "/configs/" + name; }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/ringtrain-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  CommandResult result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) result.output.append(buffer, n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

pid_t StartCommand(const std::vector<std::string>& argv, const std::string& out_path,
                   const std::string& err_path, const std::vector<std::string>& env) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err =
        err_path.empty() ? out : open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(127);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

int WaitCommand(pid_t pid, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, timeout_seconds < 0 ? 0 : WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) throw std::runtime_error("waitpid failed");
    if (timeout_seconds >= 0 && std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    if (timeout_seconds >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::vector<std::map<std::string, std::string>> ReadJsonl(const std::string& path) {
  std::vector<std::map<std::string, std::string>> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // Raw number text is what bitwise comparisons need: split the flat object by hand, using
    // nlohmann only to check the line is valid JSON.
    if (nlohmann::json::parse(line, nullptr, false).is_discarded()) {
      throw std::runtime_error("invalid JSON line in " + path + ": " + line);
    }
    std::map<std::string, std::string> record;
    size_t pos = 0;
    while ((pos = line.find('"', pos)) != std::string::npos) {
      const size_t key_end = line.find('"', pos + 1);
      const std::string key = line.substr(pos + 1, key_end - pos - 1);
      size_t value_begin = line.find(':', key_end) + 1;
      while (line[value_begin] == ' ') ++value_begin;
      size_t value_end = value_begin;
      if (line[value_begin] == '"') {
        value_end = line.find('"', value_begin + 1) + 1;
      } else if (line[value_begin] == '[' || line[value_begin] == '{') {
        int depth = 0;
        do {
          if (line[value_end] == '[' || line[value_end] == '{') ++depth;
          if (line[value_end] == ']' || line[value_end] == '}') --depth;
          ++value_end;
        } while (depth > 0 && value_end < line.size());
      } else {
        while (value_end < line.size() && line[value_end] != ',' && line[value_end] != '}') {
          ++value_end;
        }
      }
      record[key] = line.substr(value_begin, value_end - value_begin);
      pos = value_end;
    }
    records.push_back(std::move(record));
  }
  return records;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

}  // namespace ringtrain::testing
