// The agent's side of a StepRecordsRequest (worker_service.proto): the step records of a rank
// this agent ran, read back from <work-dir>/<job_id>/rank-<rank>/metrics.jsonl — the file the
// trainer itself wrote, which outlives the agent process — and from metrics.jsonl.1, .2, …, the
// files of the rank's earlier runs here (rank_supervisor.cc moves them aside), so records an
// agent could not deliver before it died (or dropped for room) still reach the store. No gRPC
// calls.
#ifndef RINGTRAIN_WORKER_AGENT_STEP_RECORDS_H_
#define RINGTRAIN_WORKER_AGENT_STEP_RECORDS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

// Record bytes per StepRecords message (a message holds at least one record).
inline constexpr size_t kStepRecordsChunkBytes = 1 << 20;

// The StepRecords messages (AgentMessages, seq 0) that answer `request` from `work_dir`: every
// whole line that ParseStepRecord (common/record/step_record.h) takes as a step record and whose
// step lies in [first_step, last_step], sent as written; the first line of each step (a resumed
// run writes the steps it recomputed again, with the same figures), the current run's file first,
// each in file order, in messages of about kStepRecordsChunkBytes, all but the last with `more`
// set. One message with no records when no such file exists or can be read, or none holds them;
// also for a job id that could not name a folder of the work dir.
std::vector<v1::AgentMessage> AnswerStepRecords(const std::string& work_dir,
                                                const v1::StepRecordsRequest& request);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_STEP_RECORDS_H_
