// `ringctl tensorboard JOB --out DIR`: a job's stored steps (all of a finished job, those so far of
// a running one) as TensorBoard event files in DIR/JOB/, written by the trainer's own writer
// (common/tensorboard) with the same scalars, so a job run without [metrics] enable_tensorboard,
// or whose worker's files are out of reach, can still be opened with `tensorboard --logdir DIR`.
#ifndef RINGTRAIN_CLIENT_TENSORBOARD_COMMAND_H_
#define RINGTRAIN_CLIENT_TENSORBOARD_COMMAND_H_

#include <string>

#include "client/command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct TensorboardFlags : CommonFlags {
  std::string job_id;
  std::string out;  // the log folder; the run folder DIR/JOB is made in it
};

// Adds the `tensorboard` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddTensorboardCommand(CLI::App& app, TensorboardFlags* flags);

// Fetches the steps and writes one new event file into DIR/JOB (each step's wall time: the job's
// start plus the step's elapsed_seconds), then "wrote FILE (N steps of JOB, STATE)". Exit
// statuses (client/exit_codes.h): 0; 1 for an unknown job; 2 when DIR cannot be written; 3 when
// the coordinator cannot be reached.
int RunTensorboard(const TensorboardFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_TENSORBOARD_COMMAND_H_
