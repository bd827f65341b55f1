// `ringctl top JOB [--once]` (also `ringctl ranks`): a live table of a job's ranks — step,
// attention compute, communication wait, exposed ring wait, bytes sent, peak memory — with each CP
// group's imbalance (max/min attention time) and the slowest rank flagged (client/rank_table.h).
// The figures are the `ranks` array of the step records the coordinator relays (WatchJob, from the
// job's last step on), nothing estimated. On a terminal the table is redrawn in place at each step
// until the job ends; with --once, or when stdout is not a terminal, one snapshot of the latest
// step is printed. `--output json`: RankTableJson's object (one per step when live).
//
// Exit statuses (client/exit_codes.h): 0; 1 unknown job, or one with no per-rank figures (one
// rank, or no step yet and it has ended); 2 bad flags; 3 the coordinator cannot be reached;
// 4 credentials.
#ifndef RINGTRAIN_CLIENT_TOP_COMMAND_H_
#define RINGTRAIN_CLIENT_TOP_COMMAND_H_

#include <string>

#include "client/command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct TopFlags : CommonFlags {
  std::string job_id;
  bool once = false;
};

// Adds `top` (alias `ranks`) to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddTopCommand(CLI::App& app, TopFlags* flags);

int RunTop(const TopFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_TOP_COMMAND_H_
