// What a worker agent is started with (ringtrain-worker's flags, agent_main.cc), and the check that
// turns them into what Agent::Create uses: paths made absolute and canonical, the trainer found.
// No gRPC calls.
#ifndef RINGTRAIN_WORKER_AGENT_AGENT_OPTIONS_H_
#define RINGTRAIN_WORKER_AGENT_AGENT_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/grpc/credentials.h"

namespace ringtrain {

struct AgentOptions {
  std::string coordinator = "127.0.0.1:50051";  // host:port of the WorkerService
  std::string device = "cpu";                   // "cpu" or "cuda:N"; every trainer gets it
  std::string host_label;                       // display only
  std::string worker_id;  // the id to ask for (common/worker_id.h); empty: the coordinator's pick
  std::string advertise_address = "127.0.0.1";  // rendezvous host other ranks reach us at
  std::string work_dir = "ringtrain-worker";    // created; <job_id>/rank-<rank>/ below it
  // Where jobs' paths may lead (job_paths.h). CheckAgentOptions makes both absolute and canonical.
  std::string data_root;  // datasets, initial weights (read-only); empty = jobs may not name files
  std::string checkpoint_root;  // created; <job_id>/ per job; empty = <work_dir>/checkpoints
  int threads = 1;              // OMP threads per trainer
  // Rank folders (<work_dir>/<job_id>/rank-<r>/, with the rank's log) kept: before a rank starts,
  // the oldest beyond this many are removed (rank_dirs.h). At least 1.
  int keep_rank_dirs = 50;
  std::string trainer_path;  // an executable file
  ChannelSecurity security;  // TLS and join token (default: plaintext, none)

  // The deadline of each Register call.
  std::chrono::milliseconds register_timeout{5000};
  // Reconnect delays: initial, doubled after each failure up to max, each +-20% jitter.
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
  // SIGTERM-to-SIGKILL grace for Cancel, shutdown and orphaned ranks.
  std::chrono::milliseconds cancel_grace{2000};
  // Messages the outbox keeps while disconnected: once it holds this many, RankReports are
  // dropped (RankStarted/RankExit never are).
  size_t max_buffered = 100000;
};

// "cpu" for "cpu", "cuda" for "cuda:N"; INVALID_ARGUMENT naming --device and the valid forms.
absl::StatusOr<std::string> DeviceKind(absl::string_view device);

// `options` checked (threads, coordinator, advertise address, worker id (CheckWorkerId), the
// trainer an executable file; the device is DeviceKind's) with work_dir made absolute and created,
// data_root (must exist) and checkpoint_root (created; empty means <work_dir>/checkpoints) made
// absolute and canonical. INVALID_ARGUMENT or FAILED_PRECONDITION naming the flag and what would
// work.
absl::StatusOr<AgentOptions> CheckAgentOptions(AgentOptions options);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_AGENT_OPTIONS_H_
