// Helpers for tests that run the project's binaries: paths, temporary folders, subprocesses,
// JSONL reports.
#ifndef RINGTRAIN_TESTS_INTEGRATION_TEST_UTIL_H_
#define RINGTRAIN_TESTS_INTEGRATION_TEST_UTIL_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ringtrain::testing {

std::string BinDir();     // $RINGTRAIN_BIN_DIR, default: the build's bin folder
std::string SourceDir();  // $RINGTRAIN_SOURCE_DIR, default: the source tree
std::string ConfigPath(const std::string& name);  // SourceDir()/configs/name
// The Python whose torch is the one the build links (the project's .venv, scripts/setup.sh):
// the parity reference and every Python helper run on it.
std::string PythonPath();

// A fresh folder under $TMPDIR, removed with its contents when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string output;  // stdout and stderr together
};

// Runs argv (argv[0] is a path) with output captured; blocks until it ends.
CommandResult RunCommand(const std::vector<std::string>& argv);

// Starts argv in the background with stdout written to out_path and stderr to err_path (or to
// out_path too when err_path is empty), `env` ("NAME=value") added to this process's environment;
// returns its pid. Reap it with WaitCommand.
pid_t StartCommand(const std::vector<std::string>& argv, const std::string& out_path,
                   const std::string& err_path = "", const std::vector<std::string>& env = {});
// Waits for `pid` to end: its exit status, or 128 + signal. With timeout_seconds >= 0, a child
// still running then is SIGKILLed and reaped, and the result is -1.
int WaitCommand(pid_t pid, double timeout_seconds = -1);

// A free TCP port on 127.0.0.1 (bound and released).
int FreePort();

// Parses a JSONL file into one map per line, each value kept as its raw JSON text, so floats can be
// compared bitwise ("loss" → "6.7041950225830078").
std::vector<std::map<std::string, std::string>> ReadJsonl(const std::string& path);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_INTEGRATION_TEST_UTIL_H_
