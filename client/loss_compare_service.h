// `ringctl loss-compare --coordinator ADDR`: one side of the comparison run as a job on the
// cluster. The losses come from the job's step events — the trainer's own JSONL records, relayed
// verbatim — so they compare bitwise exactly as in local mode.
#ifndef RINGTRAIN_CLIENT_LOSS_COMPARE_SERVICE_H_
#define RINGTRAIN_CLIENT_LOSS_COMPARE_SERVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "client/jsonl.h"
#include "client/loss_compare.h"

namespace ringtrain {

// Submits side->config (the file's text) with side->argv as its overrides (BuildJobOverrides),
// named "loss-compare-<side>", and follows the job to its end (FollowJob). Writes each step's
// record to side->jsonl_path and the state changes and steps to side->log_path, then reads the
// losses back (ReadSideLosses). Sets job_id, exit_code (0, or the failed rank's exit status) and
// seconds. Errors, each naming the side: NOT_FOUND for an unreadable config; the coordinator's
// INVALID_ARGUMENT for a rejected config; UNAVAILABLE "cannot reach coordinator at ..."; ABORTED
// when the job FAILED or was CANCELLED (its error is printed to stderr); FAILED_PRECONDITION or
// DATA_LOSS when the records do not hold steps 1..steps.
absl::StatusOr<StepLosses> RunSideAsJob(CoordinatorClient& client, LossCompareSide* side, int steps,
                                        const std::string& device_kind);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_LOSS_COMPARE_SERVICE_H_
