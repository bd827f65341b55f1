// A real local cluster for end-to-end tests: ringtrain-coordinator and N ringtrain-worker
// processes on 127.0.0.1 (ports picked free), a JobService stub with deadlines, and waits on job
// and worker states. Everything is stopped (SIGTERM, then SIGKILL) when the object dies.
// (HttpGet, for the /metrics pages, is in tests/integration/test_util.h.)
#ifndef RINGTRAIN_TESTS_E2E_LOCAL_CLUSTER_H_
#define RINGTRAIN_TESTS_E2E_LOCAL_CLUSTER_H_

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/grpc/credentials.h"
#include "ringtrain/v1/job_service.grpc.pb.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {

// How the cluster's processes reach each other.
enum class Protection {
  kPlaintext,
  // As deployed beyond loopback: TLS (a CA and a server certificate for 127.0.0.1 made with
  // openssl in the cluster's folder), client tokens for the JobService and a join token for the
  // agents. The cluster's own stub and ringctl_flags() carry the CA and a client token.
  kTlsAndTokens,
};

// Which starts first.
enum class StartOrder {
  kCoordinatorFirst,
  // The agents first: the coordinator starts once every agent has logged a failed attempt to
  // reach it (as when a deployment starts its workers before its coordinator).
  kAgentsFirst,
};

class LocalCluster {
 public:
  // Starts the coordinator and `workers` agents, and waits until every agent is IDLE. Every agent
  // gets --work-dir <dir>/worker-<i> (so its checkpoints go to <dir>/worker-<i>/checkpoints/<job>/)
  // and --data-root data_root(), then `worker_flags`.
  explicit LocalCluster(int workers, std::vector<std::string> coordinator_flags = {},
                        std::vector<std::string> worker_flags = {},
                        Protection protection = Protection::kPlaintext,
                        StartOrder order = StartOrder::kCoordinatorFirst);
  ~LocalCluster();

  const std::string& address() const { return address_; }
  // The flags a ringctl command needs to reach this cluster's coordinator: --coordinator, and with
  // kTlsAndTokens --tls-ca and --token-file.
  std::vector<std::string> ringctl_flags() const;
  // HOST:PORT of each process's Prometheus /metrics (ports picked free).
  const std::string& coordinator_metrics() const { return coordinator_metrics_; }
  const std::vector<std::string>& worker_metrics() const { return worker_metrics_; }
  const TempDir& dir() const { return dir_; }
  // <dir>/data, created empty: the agents' --data-root, where a test puts the files its jobs read.
  std::string data_root() const { return dir_ / "data"; }
  // Agent i's --work-dir.
  std::string work_dir(int worker) const { return dir_ / ("worker-" + std::to_string(worker)); }
  v1::JobService::Stub& stub() { return *stub_; }
  // The running coordinator's pid (a new one after RestartCoordinator), e.g. to read its memory
  // from /proc/<pid>/status.
  pid_t coordinator_pid() const { return coordinator_.pid(); }

  // Stops the coordinator with `signo` (SIGTERM: a clean stop; SIGKILL: a crash) and starts it
  // again on the same address and database.
  void RestartCoordinator(int signo = SIGTERM);
  // The two halves of RestartCoordinator, for a coordinator that stays away a while.
  void StopCoordinator(int signo);
  void StartCoordinator();

  // Stops agent `worker` with `signo` (SIGTERM: a clean stop; SIGKILL: a crash) and starts it
  // again with the same flags and work dir.
  void RestartWorker(int worker, int signo = SIGTERM);

  // Sends `signo` to agent `worker` (an index, 0..workers-1; SIGKILL: the agent dies) and, for
  // SIGKILL, reaps it.
  void SignalWorker(int worker, int signo);
  // The index of the agent whose work dir holds process `pid`'s command line (a trainer it
  // started), or -1.
  int WorkerOfProcess(pid_t pid) const;

  // Calls with a 10 s deadline; a failed call fails the test and returns an empty message.
  v1::Job Submit(const std::string& config, const std::vector<std::string>& overrides);
  v1::Job Get(const std::string& job_id);
  std::vector<v1::Worker> Workers();
  int IdleWorkers();

  // Polls every 100 ms until `done(job)` holds; false (after a test failure naming `what`) when
  // `timeout_seconds` pass first.
  bool WaitForJob(const std::string& job_id, const std::function<bool(const v1::Job&)>& done,
                  double timeout_seconds, const std::string& what);
  bool WaitForIdleWorkers(int n, double timeout_seconds);

  // Every event of WatchJob(job_id, from_step) until the stream ends (no deadline beyond
  // `timeout_seconds`); `status` gets the stream's final status.
  std::vector<v1::JobEvent> Watch(const std::string& job_id, int64_t from_step,
                                  double timeout_seconds, grpc::Status* status = nullptr);

  // Runs `ringctl ARGS --coordinator address()` to its end.
  CommandResult Ringctl(std::vector<std::string> args) const;

  // The pid of the trainer running `rank` of `job_id` (found by its config path), or -1.
  pid_t TrainerPid(const std::string& job_id, int rank) const;

  // The coordinator's and the agents' logs, for failure messages.
  std::string Logs() const;

 private:
  void StartWorker(int worker);
  // stub_ on a fresh channel to address_.
  void NewStub();
  // kTlsAndTokens: makes the CA, the server certificate and the token files in <dir>/pki; returns
  // the coordinator's flags and sets pki_.
  std::vector<std::string> MakePki();
  std::string Pki(const std::string& name) const { return dir_ / ("pki/" + name); }

  TempDir dir_;
  std::string address_;
  std::string coordinator_metrics_;
  std::vector<std::string> worker_metrics_;
  std::vector<std::string> coordinator_flags_;
  Subprocess coordinator_;
  int coordinator_starts_ = 0;
  const Protection protection_;
  ChannelSecurity security_;  // the stub's: TLS and a client token with kTlsAndTokens
  std::vector<std::string> worker_flags_;
  std::vector<int> worker_starts_;
  std::vector<Subprocess> workers_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

// Raw JSON text of `key` in a flat JSON object line (so doubles compare bitwise).
std::string RawField(const std::string& json_line, const std::string& key);

// Whether the job is SUCCEEDED, FAILED or CANCELLED.
bool IsFinal(const v1::Job& job);

// Whether process `pid` ignores signal `signo` (the SigIgn mask of /proc/PID/status).
bool IgnoresSignal(pid_t pid, int signo);

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_E2E_LOCAL_CLUSTER_H_
