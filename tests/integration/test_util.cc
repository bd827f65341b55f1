#include "tests/integration/test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "common/record/step_record.h"
#include "worker/launcher/launch_port.h"

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
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  SpawnOptions options;
  options.argv = argv;
  options.stdout_to = Redirect::ToFd(pipe_fds[1]);
  options.stderr_to = Redirect::ToStdout();
  options.parent_death_signal = SIGTERM;
  absl::StatusOr<Subprocess> child = Subprocess::Start(options);
  close(pipe_fds[1]);  // EOF comes once the child's copies close
  if (!child.ok()) {
    close(pipe_fds[0]);
    throw std::runtime_error(std::string(child.status().message()));
  }
  CommandResult result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) result.output.append(buffer, n);
  }
  close(pipe_fds[0]);
  result.exit_code = *child->Wait();
  return result;
}

Subprocess StartCommand(const std::vector<std::string>& argv, const std::string& out_path,
                        const std::string& err_path, const std::vector<std::string>& env) {
  SpawnOptions options;
  options.argv = argv;
  options.env = env;
  options.stdout_to = Redirect::ToFile(out_path);
  options.stderr_to = err_path.empty() ? Redirect::ToStdout() : Redirect::ToFile(err_path);
  options.parent_death_signal = SIGTERM;
  absl::StatusOr<Subprocess> child = Subprocess::Start(options);
  if (!child.ok()) throw std::runtime_error(std::string(child.status().message()));
  return *std::move(child);
}

int WaitCommand(Subprocess& child, double timeout_seconds) {
  if (timeout_seconds < 0) return child.Wait().value_or(-1);
  const std::optional<int> code =
      child.Wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  if (code) return *code;
  child.Signal(SIGKILL);
  child.Wait();
  return -1;
}

bool WaitFor(const std::function<bool()>& done, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

bool IsRunning(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  // The state is the field after the command name, which is in parentheses and may hold spaces.
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

int FreePort() {
  // Below the kernel's ephemeral range, as ringtrain-run picks MASTER_PORT: a port from the range
  // can be taken by any outgoing connection before the server binds it — even by a client of that
  // very server connecting to itself (TCP simultaneous open), which then holds the port.
  absl::StatusOr<int> port = PickFreePort("127.0.0.1");
  if (!port.ok()) ADD_FAILURE() << port.status();
  return port.ok() ? *port : 0;
}

std::string HttpGet(const std::string& host_port, const std::string& path) {
  const size_t colon = host_port.rfind(':');
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
  inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: " + host_port + "\r\nConnection: close\r\n\r\n";
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buffer[65536];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.compare(0, 12, "HTTP/1.1 200") != 0 &&
      response.compare(0, 12, "HTTP/1.0 200") != 0) {
    return "";
  }
  return body == std::string::npos ? "" : response.substr(body + 4);
}

namespace {

// The lines of a JSONL file that a writer has finished: a last line without its newline is one
// the trainer is still writing (a write that crosses a page boundary becomes visible page by page)
// or was killed writing, so it is left out.
std::vector<std::string> FinishedLines(const std::string& path) {
  std::vector<std::string> lines;
  const std::string text = ReadFile(path);
  for (size_t begin = 0, end; (end = text.find('\n', begin)) != std::string::npos;
       begin = end + 1) {
    if (end > begin) lines.push_back(text.substr(begin, end - begin));
  }
  return lines;
}

}  // namespace

std::vector<std::map<std::string, std::string>> ReadJsonl(const std::string& path) {
  std::vector<std::map<std::string, std::string>> records;
  for (const std::string& line : FinishedLines(path)) {
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

std::vector<std::string> LauncherCommand(int nproc, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinDir() + "/ringtrain-run", "--nproc", std::to_string(nproc)};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<std::string> TrainerCommand(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinDir() + "/ringtrain-trainer"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<double> ReadLosses(const std::string& path) {
  std::vector<double> losses;
  for (const std::string& line : FinishedLines(path)) {
    absl::StatusOr<std::optional<StepRecord>> record = ParseStepRecord(line, MissingFigure::kNaN);
    if (!record.ok()) {
      throw std::runtime_error("not a step record in " + path + ": " +
                               std::string(record.status().message()) + ": " + line);
    }
    if (record->has_value()) losses.push_back((*record)->loss);
  }
  return losses;
}

std::vector<std::string> ReadJsonlColumn(const std::string& path, const std::string& key) {
  std::vector<std::string> values;
  for (const auto& record : ReadJsonl(path)) values.push_back(record.at(key));
  return values;
}

double MaxDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
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
