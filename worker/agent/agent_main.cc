// ringtrain-worker: the worker agent process. Flags become AgentOptions; SIGINT and SIGTERM become
// Agent::Shutdown(), delivered by a watcher thread (never work inside a signal handler). The work
// dir is locked for the process's lifetime and cleared of a crashed predecessor's trainers
// (work_dir_lock.h) before anything is served. Agent::Run runs on the main thread: trainers are
// started on the thread that runs it and die with that thread (PR_SET_PDEATHSIG,
// rank_supervisor.h), so it must live as long as they should; main's lives as long as the process.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "common/executable_path.h"
#include "common/grpc/credentials.h"
#include "common/log.h"
#include "common/metrics/metrics_server.h"
#include "common/version/version.h"
#include "worker/agent/agent.h"
#include "worker/agent/work_dir_lock.h"

namespace {

constexpr int kExitError = 1;  // the coordinator refused this agent (a bad request or join token)
// bad flags or credential files, a join token that would go in cleartext to another machine, no
// trainer, work dir not writable or used by another agent
constexpr int kExitUsage = 2;
constexpr char kDefaultMetricsAddress[] = "127.0.0.1:9470";
constexpr int kDefaultMetricsPortScan = 100;

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  // Blocked before any thread starts (gRPC's too), so only the watcher below takes them. The
  // trainers get an empty mask back (RankSupervisor resets it before exec).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ringtrain::AgentOptions options;
  options.host_label = HostName();
  std::string trainer;
  CLI::App app{
      "ringtrain-worker: registers with the coordinator and runs the trainer ranks it "
      "assigns to this machine",
      "ringtrain-worker"};
  app.set_version_flag("--version", ringtrain::VersionLine("ringtrain-worker"));
  app.add_option("--coordinator", options.coordinator, "Coordinator address, HOST:PORT")
      ->capture_default_str();
  app.add_option("--device", options.device, "Device of this agent's trainers: cpu or cuda:N")
      ->capture_default_str();
  app.add_option("--host-label", options.host_label, "Host name the coordinator shows")
      ->capture_default_str();
  app.add_option("--worker-id", options.worker_id,
                 "Id to register as, e.g. the work dir's or pod's name (letters, digits, '-', "
                 "'_', '.'); refused while a live worker holds it (default: the coordinator "
                 "picks worker-N)");
  app.add_option("--advertise-address", options.advertise_address,
                 "Host other ranks reach this agent's trainers at (rendezvous host for rank 0)")
      ->capture_default_str();
  app.add_option("--work-dir", options.work_dir,
                 "Folder for each rank's config, log and metrics (created)")
      ->capture_default_str();
  // Where a job's paths may lead (worker/agent/job_paths.h).
  app.add_option("--data-root", options.data_root,
                 "Folder of datasets and initial weights jobs may read (none: jobs may not name "
                 "files)");
  app.add_option(
      "--checkpoint-root", options.checkpoint_root,
      "Folder of the jobs' checkpoints, one <job_id>/ each (default <work-dir>/checkpoints)");
  app.add_option("--threads", options.threads, "OMP threads per trainer")->capture_default_str();
  app.add_option("--keep-rank-dirs", options.keep_rank_dirs,
                 "Rank folders (with their logs, for ringctl logs) kept; older ones are removed "
                 "when a rank starts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--trainer", trainer,
                 "ringtrain-trainer to run (default: the one beside this executable)");
  std::string metrics_address;
  app.add_option("--metrics-address", metrics_address,
                 "HOST:PORT serving Prometheus /metrics (default: the first free port of "
                 "127.0.0.1:9470-9569)");
  ringtrain::ClientTlsFiles tls;
  app.add_option("--tls-ca", tls.ca, "PEM CA that signed the coordinator's certificate (TLS)");
  app.add_option("--tls-cert", tls.cert,
                 "PEM certificate this agent presents (mutual TLS), with --tls-key");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  std::string join_token_file;
  app.add_option("--join-token-file", join_token_file,
                 "File holding the join token the coordinator's --worker-token-file lists");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error
    return code == 0 ? 0 : kExitUsage;
  }
  std::string join_token;
  if (!join_token_file.empty()) {
    absl::StatusOr<std::string> token =
        ringtrain::ReadSingleToken(join_token_file, "--join-token-file");
    if (!token.ok()) {
      std::cerr << "ringtrain-worker: " << token.status().message() << "\n";
      return kExitUsage;
    }
    join_token = *std::move(token);
  }
  absl::StatusOr<ringtrain::ChannelSecurity> security =
      ringtrain::LoadChannelSecurity(tls, std::move(join_token));
  if (!security.ok()) {
    std::cerr << "ringtrain-worker: " << security.status().message() << "\n";
    return kExitUsage;
  }
  // The join token goes over TLS, or in cleartext only to this machine (with a warning).
  const std::string token_source = "--join-token-file " + join_token_file;
  if (absl::Status transport =
          ringtrain::CheckTokenTransport(options.coordinator, *security, token_source);
      !transport.ok()) {
    std::cerr << "ringtrain-worker: " << transport.message() << "\n";
    return kExitUsage;
  }
  const std::string warning =
      ringtrain::CleartextTokenWarning(options.coordinator, *security, token_source);
  if (!warning.empty()) std::cerr << "ringtrain-worker: " << warning << "\n";
  options.security = *std::move(security);
  options.trainer_path =
      trainer.empty() ? ringtrain::BesideThisExecutable("ringtrain-trainer") : trainer;

  absl::StatusOr<std::unique_ptr<ringtrain::Agent>> agent = ringtrain::Agent::Create(options);
  if (!agent.ok()) {
    std::cerr << "ringtrain-worker: " << agent.status().message() << "\n";
    return kExitUsage;
  }
  // Create made the work dir. Held until the process ends; before the metrics port is taken, so a
  // second agent on this folder leaves nothing behind.
  absl::StatusOr<ringtrain::WorkDirLock> work_dir_lock =
      ringtrain::WorkDirLock::Acquire(options.work_dir);
  if (!work_dir_lock.ok()) {
    std::cerr << "ringtrain-worker: " << work_dir_lock.status().message() << "\n";
    return kExitUsage;
  }
  ringtrain::StopLeftoverTrainers(options.work_dir);

  // Without the flag, agents sharing a machine take the next free port each.
  auto metrics_server = ringtrain::MetricsServer::Start(
      metrics_address.empty() ? kDefaultMetricsAddress : metrics_address,
      metrics_address.empty() ? kDefaultMetricsPortScan : 1);
  if (!metrics_server.ok()) {
    std::cerr << "ringtrain-worker: " << metrics_server.status().message() << "\n";
    return kExitUsage;
  }
  (*metrics_server)->Register((*agent)->metrics());
  RT_LOG(Info) << "metrics at http://" << (*metrics_server)->address() << "/metrics";

  std::atomic<bool> done{false};
  std::thread watcher([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done.load()) {
      const int signo = sigtimedwait(&stop_signals, nullptr, &tick);
      if (signo <= 0) continue;
      RT_LOG(Info) << "received " << strsignal(signo);
      (*agent)->Shutdown();
    }
  });
  const absl::Status status = (*agent)->Run();
  done.store(true);
  watcher.join();
  if (!status.ok()) {
    RT_LOG(Error) << status.message();
    return kExitError;
  }
  return 0;
}
