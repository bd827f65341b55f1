// `ringctl logs JOB [--rank R] [--follow] [--tail N]`: what one rank of a job printed — its
// trainer's stdout and stderr, a timestamp per line, and the agent's notes on when it started and
// how it ended — read through the coordinator (JobService.StreamLogs) from the worker that ran the
// rank in the job's latest run, while the job runs and after it ended (until the worker prunes the
// rank's folder, worker/agent/rank_dirs.h). `--follow` keeps printing new lines until the rank's
// trainer ends; a stream broken by a worker's or the coordinator's hiccup is resumed where it
// stopped (5 tries with backoff), and a job not yet placed is waited for.
//
// Output: `2026-12-02 11:25:56.123456  stderr  TEXT` per line (control characters escaped), or with
// `--output json` one object per line: {"job_id","rank","worker_id","time","stream","text",
// "offset"}. Exit statuses (client/exit_codes.h): 0; 1 unknown job or rank log (e.g. pruned), or a
// job never placed; 2 bad flags; 3 the coordinator or the worker cannot be reached; 4 credentials.
#ifndef RINGTRAIN_CLIENT_LOGS_COMMAND_H_
#define RINGTRAIN_CLIENT_LOGS_COMMAND_H_

#include <cstdint>
#include <string>

#include "client/command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct LogsFlags : CommonFlags {
  std::string job_id;
  int rank = 0;
  bool follow = false;
  int64_t tail = 0;  // 0: the whole log
};

// Adds the `logs` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddLogsCommand(CLI::App& app, LogsFlags* flags);

// Streams the log and prints it. Returns the exit status.
int RunLogs(const LogsFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_LOGS_COMMAND_H_
