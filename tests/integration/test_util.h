// Helpers for tests that run the project's binaries: paths, temporary folders, subprocesses,
// JSONL reports and the losses in them.
#ifndef RINGTRAIN_TESTS_INTEGRATION_TEST_UTIL_H_
#define RINGTRAIN_TESTS_INTEGRATION_TEST_UTIL_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace ringtrain::testing {

std::string BinDir();     // $RINGTRAIN_BIN_DIR, default: the build's bin folder
std::string SourceDir();  // $RINGTRAIN_SOURCE_DIR, default: the source tree
std::string ConfigPath(const std::string& name);  // SourceDir()/configs/name
// The Python whose torch is the one the build links (the project's .venv, scripts/setup.sh):
// the parity reference and every Python helper run on it.
std::string PythonPath();

// A fresh folder under $TMPDIR (default /tmp), removed with its contents when the object dies.
// Every test that needs a scratch folder makes it with this.
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

// Runs argv (argv[0] is a path) with output captured; blocks until it ends. Like every command
// here it runs as a Subprocess: its own process group, stdin from /dev/null.
CommandResult RunCommand(const std::vector<std::string>& argv);

// Starts argv in the background with stdout written to out_path and stderr to err_path (or to
// out_path too when err_path is empty), `env` ("NAME=value") added to this process's environment.
// Throws std::runtime_error when it cannot start (a failing exec is exit status 127). The child
// gets SIGTERM should the test process die, and SIGKILL (with its group) should the returned
// object be destroyed while it runs, so that a failed assertion leaves nothing running.
Subprocess StartCommand(const std::vector<std::string>& argv, const std::string& out_path,
                        const std::string& err_path = "", const std::vector<std::string>& env = {});
// Waits for `child` to end: its exit status, or 128 + signal. With timeout_seconds >= 0, a child
// still running then is SIGKILLed (with its group) and reaped, and the result is -1.
int WaitCommand(Subprocess& child, double timeout_seconds = -1);

// Polls `done` every 10 ms until it holds or `timeout_seconds` have passed; returns its last value
// (so a condition that comes true at the deadline still counts).
bool WaitFor(const std::function<bool()>& done, double timeout_seconds = 10);

// Whether `pid` is alive: it exists and is not a zombie (a dead process nobody has reaped yet, as
// an orphan reparented to a PID 1 that never waits may stay).
bool IsRunning(pid_t pid);

// A free TCP port on 127.0.0.1 (bound and released), below the ephemeral range (PickFreePort).
int FreePort();

// The body of http://host_port/path (HTTP/1.0 GET, 10 s timeout); "" when it cannot be fetched.
std::string HttpGet(const std::string& host_port, const std::string& path);

// Parses a JSONL file into one map per line, each value kept as its raw JSON text, so floats can be
// compared bitwise ("loss" → "6.7041950225830078"). A last line without its newline is still being
// written (or its writer was killed) and is left out; so does ReadLosses.
std::vector<std::map<std::string, std::string>> ReadJsonl(const std::string& path);

// The argv of `ringtrain-run --nproc <nproc> <args…>` and of `ringtrain-trainer <args…>` from this
// build, for the tests that train the same config several ways and compare the losses.
std::vector<std::string> LauncherCommand(int nproc, const std::vector<std::string>& args);
std::vector<std::string> TrainerCommand(const std::vector<std::string>& args);

// Each step record's loss in a metrics JSONL file, in file order, read with the product's own
// parser (common/record/step_record.h); lines that are not step records are skipped. A loss
// written as null reads NaN. Throws std::runtime_error for a line that is not a record.
std::vector<double> ReadLosses(const std::string& path);

// The raw JSON text of `key` on each line of a JSONL file, for bitwise comparisons ("loss" →
// "6.7041950225830078"). Throws std::out_of_range when a line lacks the key.
std::vector<std::string> ReadJsonlColumn(const std::string& path, const std::string& key);

// The largest |a[i] − b[i]| over the steps both hold; a failed EXPECT when their lengths differ.
double MaxDiff(const std::vector<double>& a, const std::vector<double>& b);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_INTEGRATION_TEST_UTIL_H_
