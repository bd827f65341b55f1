#include "client/cluster_up.h"

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "common/executable_path.h"
#include "common/subprocess.h"

namespace ringtrain {
namespace fs = std::filesystem;
namespace {

constexpr auto kGrace = std::chrono::seconds(5);
constexpr int kTailLines = 20;

// One child process of the cluster.
struct Child {
  std::string name;  // "coordinator", "worker-0", ...
  std::vector<std::string> argv;
  std::string log_path;
  Subprocess process{};  // none until Start
  int exit_status = -1;  // once reaped: the exit code, or 128 + signal
};

std::string DescribeExit(int status) {
  return status > 128 ? absl::StrCat("killed by signal ", status - 128)
                      : absl::StrCat("exit status ", status);
}

// The last lines of a log file, indented, for error messages.
std::string LogTail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> lines = absl::StrSplit(text.str(), '\n', absl::SkipEmpty());
  if (lines.size() > kTailLines) lines.erase(lines.begin(), lines.end() - kTailLines);
  if (lines.empty()) return "    (the log is empty)\n";
  std::string out;
  for (const std::string& line : lines) absl::StrAppend(&out, "    ", line, "\n");
  return out;
}

// Starts `child` as a Subprocess (its own process group, so a terminal's Ctrl-C reaches only
// ringctl; stdin from /dev/null; default signal state) with stdout and stderr into its log, and
// SIGTERM should ringctl die without stopping it.
absl::Status Start(Child* child) {
  SpawnOptions spawn;
  spawn.argv = child->argv;
  spawn.stdout_to = Redirect::ToFile(child->log_path);
  spawn.stderr_to = Redirect::ToStdout();
  spawn.parent_death_signal = SIGTERM;
  spawn.exec_error_prefix = absl::StrCat("ringctl up: cannot execute ", child->argv[0], ": ");
  absl::StatusOr<Subprocess> process = Subprocess::Start(spawn);
  if (!process.ok()) return process.status();
  child->process = *std::move(process);
  return absl::OkStatus();
}

// Reaps `child` if it has exited; true if it is still running.
bool Poll(Child* child) {
  if (!child->process.running()) return false;
  if (std::optional<int> code = child->process.Poll()) child->exit_status = *code;
  return child->process.running();
}

// SIGTERM to each running child's process group, up to kGrace for all of them to exit, then
// SIGKILL for the rest; every child is reaped on return.
void Stop(std::vector<Child*> children) {
  for (Child* child : children) {
    if (Poll(child)) child->process.Signal(SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + kGrace;
  for (;;) {
    bool any = false;
    for (Child* child : children) any = Poll(child) || any;
    if (!any) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (Child* child : children) {
    if (!Poll(child)) continue;
    std::cerr << "ringctl up: " << child->name << " did not stop within " << kGrace.count()
              << " s; killing it" << std::endl;
    child->process.Signal(SIGKILL);
    child->exit_status = child->process.Wait().value_or(128 + SIGKILL);
  }
}

// The cluster: the coordinator and the workers, started and stopped in order.
class Cluster {
 public:
  explicit Cluster(std::vector<Child> children) : children_(std::move(children)) {}
  Child& coordinator() { return children_.front(); }

  // Workers first (they report their ranks' ends to the coordinator), then the coordinator.
  void StopAll() {
    std::vector<Child*> workers;
    for (size_t i = 1; i < children_.size(); ++i) workers.push_back(&children_[i]);
    Stop(workers);
    Stop({&coordinator()});
  }

  // The first child found dead that had not been reported yet, as an error with its log tail.
  absl::Status CheckAlive() {
    for (Child& child : children_) {
      if (child.process.pid() < 0 || Poll(&child) || reported_.count(child.name)) continue;
      reported_.insert(child.name);
      return absl::AbortedError(absl::StrCat(child.name, " exited (",
                                             DescribeExit(child.exit_status), "); the end of ",
                                             child.log_path, ":\n", LogTail(child.log_path)));
    }
    return absl::OkStatus();
  }

  std::vector<Child>& children() { return children_; }

 private:
  std::vector<Child> children_;
  std::set<std::string> reported_;
};

// A pending SIGINT or SIGTERM, taken without waiting (0 when none); SIGCHLD is consumed too.
int TakeStopSignal(const sigset_t& signals, std::chrono::milliseconds wait) {
  const timespec timeout{static_cast<time_t>(wait.count() / 1000),
                         static_cast<long>(wait.count() % 1000) * 1000000};
  const int signal = sigtimedwait(&signals, nullptr, &timeout);
  return signal == SIGINT || signal == SIGTERM ? signal : 0;
}

}  // namespace

std::string LocalConnectAddress(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return listen;
  const std::string host = listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    return "127.0.0.1" + listen.substr(colon);
  }
  return listen;
}

CLI::App* AddUpCommand(CLI::App& app, UpFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "up",
      "Run a local cluster: a ringtrain-coordinator and N ringtrain-worker agents (logs in "
      "DIR/logs). Waits for the workers to be idle, then runs until Ctrl-C.");
  cmd->add_option("--workers", flags->workers, "Number of worker agents")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--listen,--coordinator", flags->listen, "The coordinator's listen address")
      ->capture_default_str();
  cmd->add_option("--dir", flags->dir, "Folder for the database, work dirs and logs")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "Threads per trainer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option(
      "--data-root", flags->data_root,
      "Every worker's --data-root: the folder job dataset and weight paths resolve under "
      "(default: none, jobs that name a file are refused)");
  cmd->add_option("--bin-dir", flags->bin_dir,
                  "Where ringtrain-coordinator and ringtrain-worker are (default: beside ringctl)");
  cmd->footer(
      "Examples:\n"
      "  ringctl up --workers 4\n"
      "  ringctl up --workers 2 --dir /tmp/cluster --data-root ~/datasets");
  return cmd;
}

int RunUp(const UpFlags& flags) {
  std::error_code error;
  const fs::path bin_dir = flags.bin_dir.empty()
                               ? fs::path(BesideThisExecutable("ringtrain-worker")).parent_path()
                               : fs::path(flags.bin_dir);
  std::vector<std::string> problems;
  for (const char* binary : {"ringtrain-coordinator", "ringtrain-worker"}) {
    const fs::path path = bin_dir / binary;
    if (access(path.c_str(), X_OK) != 0) {
      problems.push_back(absl::StrCat(binary, " not found at ", path.string(), " (",
                                      std::strerror(errno), "): build the ", binary,
                                      " target, or pass --bin-dir DIR"));
    }
  }
  const fs::path dir = fs::absolute(flags.dir, error);
  fs::create_directories(dir / "logs", error);
  if (error)
    problems.push_back(
        absl::StrCat("cannot create ", (dir / "logs").string(), ": ", error.message()));
  if (!problems.empty()) {
    std::cerr << "ringctl up: " << absl::StrJoin(problems, "\nringctl up: ") << std::endl;
    return kExitUsage;
  }
  const fs::path data_root = flags.data_root.empty() ? fs::path() : fs::absolute(flags.data_root);
  const std::string address = LocalConnectAddress(flags.listen);
  std::vector<Child> children;
  children.push_back({"coordinator",
                      {(bin_dir / "ringtrain-coordinator").string(), "--listen", flags.listen,
                       "--db", (dir / "ringtrain.db").string()},
                      (dir / "logs" / "coordinator.log").string()});
  for (int i = 0; i < flags.workers; ++i) {
    const std::string name = absl::StrCat("worker-", i);
    fs::create_directories(dir / name, error);
    // One checkpoint root for every worker (the shared storage of a real cluster): a restarted
    // job resumes from its latest checkpoint on whichever workers are free.
    std::vector<std::string> argv = {(bin_dir / "ringtrain-worker").string(),
                                     "--coordinator",
                                     address,
                                     "--worker-id",  // the folder's name, so ids and folders agree
                                     name,
                                     "--host-label",
                                     "local",
                                     "--advertise-address",
                                     "127.0.0.1",
                                     "--work-dir",
                                     (dir / name).string(),
                                     "--threads",
                                     std::to_string(flags.threads),
                                     "--checkpoint-root",
                                     (dir / "checkpoints").string()};
    if (!data_root.empty()) {
      argv.push_back("--data-root");
      argv.push_back(data_root.string());
    }
    children.push_back({name, std::move(argv), (dir / "logs" / (name + ".log")).string()});
  }
  Cluster cluster(std::move(children));

  // Take SIGINT/SIGTERM/SIGCHLD synchronously (sigtimedwait) from here on; threads started later
  // (gRPC's) inherit the mask, so no thread is interrupted by them. The children start with an
  // empty mask (Subprocess).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  int stop_signal = 0;
  // Start-up checks, before every poll: a stop request, a dead child.
  auto check = [&]() -> absl::Status {
    if ((stop_signal = TakeStopSignal(signals, std::chrono::milliseconds(0))) != 0) {
      return absl::CancelledError(absl::StrCat("stopping (", strsignal(stop_signal), ")"));
    }
    return cluster.CheckAlive();
  };
  auto fail = [&](const absl::Status& status) {
    std::cerr << "ringctl up: " << absl::StripTrailingAsciiWhitespace(status.message())
              << std::endl;
    cluster.StopAll();
    if (status.code() == absl::StatusCode::kCancelled) return kExitOk;
    return status.code() == absl::StatusCode::kDeadlineExceeded ? kExitUnreachable : kExitFailed;
  };

  // The local coordinator listens in plaintext without tokens, whatever RINGTRAIN_TLS_CA or
  // RINGTRAIN_TOKEN say for remote ones.
  CoordinatorClient client(address, ChannelSecurity());
  // A coordinator already answering there would take our workers and hide our own one's failure.
  CallOptions probe;
  probe.timeout = std::chrono::seconds(1);
  if (client.ListWorkers(probe).ok()) {
    std::cerr << "ringctl up: a coordinator already answers at " << address
              << ": stop it (or its `ringctl up`), or pick another --listen address" << std::endl;
    return kExitUsage;
  }
  std::cout << "starting the coordinator on " << flags.listen
            << " (log: " << cluster.coordinator().log_path << ")" << std::endl;
  if (absl::Status s = Start(&cluster.coordinator()); !s.ok()) return fail(s);
  // Zero idle workers: returns as soon as the coordinator answers.
  absl::StatusOr<std::vector<v1::Worker>> ready =
      WaitForIdleWorkers(client, 0, std::chrono::seconds(30), check);
  if (!ready.ok() && ready.status().code() == absl::StatusCode::kDeadlineExceeded) {
    ready = absl::DeadlineExceededError(absl::StrCat(
        "the coordinator did not answer at ", address, " within 30 s; see ",
        cluster.coordinator().log_path, ":\n", LogTail(cluster.coordinator().log_path)));
  }
  if (!ready.ok()) return fail(ready.status());

  std::cout << "starting " << flags.workers << " worker" << (flags.workers == 1 ? "" : "s")
            << std::endl;
  for (size_t i = 1; i < cluster.children().size(); ++i) {
    if (absl::Status s = Start(&cluster.children()[i]); !s.ok()) return fail(s);
  }
  ready = WaitForIdleWorkers(
      client, flags.workers,
      std::chrono::milliseconds(static_cast<int64_t>(flags.ready_timeout_seconds * 1000)), check);
  if (!ready.ok()) return fail(ready.status());
  std::cout << "cluster up: coordinator at " << address << ", " << flags.workers << " worker"
            << (flags.workers == 1 ? "" : "s") << " (logs in " << (dir / "logs").string()
            << "); Ctrl-C stops it" << std::endl;

  for (;;) {
    stop_signal = TakeStopSignal(signals, std::chrono::milliseconds(1000));
    if (stop_signal != 0) {
      std::cout << "\nstopping the cluster (" << strsignal(stop_signal) << ")" << std::endl;
      cluster.StopAll();
      std::cout << "cluster stopped" << std::endl;
      return kExitOk;
    }
    const absl::Status alive = cluster.CheckAlive();
    if (alive.ok()) continue;
    if (!cluster.coordinator().process.running()) return fail(alive);
    // A worker died: the cluster goes on without it (the coordinator marks it LOST).
    std::cerr << "ringctl up: " << absl::StripTrailingAsciiWhitespace(alive.message()) << std::endl;
  }
}

}  // namespace ringtrain
