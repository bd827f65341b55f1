// `ringctl checkpoints JOB`: the job's checkpoints (GetJob's `checkpoints`) — step, complete or
// not, and the step folder on the workers' --checkpoint-root — as a table, or with
// `--output json` an array of Checkpoint messages. The same lines close `ringctl get`, with the
// checkpoint the job started from (--init-from / --resume-from): client/checkpoint_format.h.
#ifndef RINGTRAIN_CLIENT_CHECKPOINTS_COMMAND_H_
#define RINGTRAIN_CLIENT_CHECKPOINTS_COMMAND_H_

#include <string>

#include "client/command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct CheckpointsFlags : CommonFlags {
  std::string job_id;
};

CLI::App* AddCheckpointsCommand(CLI::App& app, CheckpointsFlags* flags);
int RunCheckpoints(const CheckpointsFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_CHECKPOINTS_COMMAND_H_
