// How ringctl shows a job's checkpoints (GetJob's `checkpoints`) and the checkpoint it started
// from: lines for `ringctl get`, a table for `ringctl checkpoints`. Pure functions of the message;
// every string from the server passes through EscapeForTerminal.
#ifndef RINGTRAIN_CLIENT_CHECKPOINT_FORMAT_H_
#define RINGTRAIN_CLIENT_CHECKPOINT_FORMAT_H_

#include <string>
#include <vector>

#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

// "job-000001@200 (weights only: --init-from)" or "… (the whole training state: --resume-from)";
// "" when the job started from none.
std::string LoadFromText(const v1::Job& job);
// One line per checkpoint: "step 200  complete  /ckpt/job-000001/checkpoints/step-200" (an
// incomplete save has no folder: "-").
std::vector<std::string> CheckpointLines(const v1::Job& job);
// STEP, STATE, PATH; or a line saying the job has none.
std::string FormatCheckpointTable(const v1::Job& job);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_CHECKPOINT_FORMAT_H_
