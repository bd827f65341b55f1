// How ringctl shows jobs, workers and watch events: tables and lines for people, JSON for scripts.
// Pure functions of the messages (and of `now`, in Unix seconds, for ages), so tests can pin them.
// Every string from the server that reaches text output is passed through EscapeForTerminal
// (common/printable.h): control characters print as \x1b, never raw. JSON escapes its own.
#ifndef RINGTRAIN_CLIENT_JOB_FORMAT_H_
#define RINGTRAIN_CLIENT_JOB_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <google/protobuf/timestamp.pb.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

enum class OutputFormat { kTable, kJson };

// "QUEUED", "RUNNING", ... (the enum name without its prefix); "UNSPECIFIED" for 0.
std::string JobStateName(v1::JobState state);
// "IDLE", "BUSY", "LOST".
std::string WorkerStateName(v1::WorkerState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(v1::JobState state);

// "world 4 = dp 1 × cp 4, cpu" (device kind "cpu" when the job leaves it empty): the mesh as
// submit, get and top print it.
std::string MeshSummary(const v1::Job& job);
// Where `rank` sits in its CP group of `cp` ranks (cp innermost): "1/2" is the group's rank 1 of
// ranks 0..1. As top's CP column and get's rank lines print it.
std::string CpPlace(int64_t rank, int cp);
// "0:12", "1:28", "1:02:03".
std::string FormatDuration(double seconds);
// "5s", "3m", "2h", "4d" since `then`; "-" when `then` is unset (zero).
std::string FormatAge(const google::protobuf::Timestamp& then, double now);
// "12:00:01" in local time; "--:--:--" when unset.
std::string FormatClock(const google::protobuf::Timestamp& time);
// RFC 3339 UTC ("2024-05-01T12:00:01Z"); "" when unset.
std::string FormatRfc3339(const google::protobuf::Timestamp& time);

// Columns separated by two spaces, padded to the widest cell (by UTF-8 characters).
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);
// ID, NAME, STATE, MESH "dp×cp", STEP "12/100", LOSS, AGE, WAIT REASON / ERROR.
std::string FormatJobTable(const std::vector<v1::Job>& jobs, double now);
// One job, one field a line: state, mesh and per-rank placement, wait reason, error, times,
// progress.
// `validation`, when not empty, is shown after the step (ValidationText of the job's newest).
std::string FormatJobDetail(const v1::Job& job, double now, const std::string& validation = "");
// Why a job failed: the summary, the rank, worker and exit status, the stderr tail; or that it was
// cancelled. Empty for a job that has not failed or been cancelled.
std::string FormatJobError(const v1::Job& job);
// "512 B", "1.5 KiB", "139.8 GiB" (binary units, one decimal above bytes).
std::string FormatBytes(uint64_t bytes);
// "cuda:0 NVIDIA H200": the worker's device (its kind when the coordinator sends no device) and
// the name its agent registered, if any.
std::string WorkerDevice(const v1::Worker& worker);
// ID, DEVICE (WorkerDevice), MEMORY (FormatBytes of the device's total; "-" when unknown), HOST,
// ADDRESS, STATE, JOB/RANK, LAST HEARTBEAT (age).
std::string FormatWorkerTable(const std::vector<v1::Worker>& workers, double now);

// One line of JSON with the proto field names (job_id, not jobId); proto3's mapping otherwise
// (enums by name, int64 as strings, Timestamps as RFC 3339). Every field is printed, even defaults.
std::string MessageJson(const google::protobuf::Message& message);
// A JSON array of MessageJson objects, on one line.
std::string MessageJsonArray(const std::vector<const google::protobuf::Message*>& messages);

// Watch output, table mode: "[12:00:01] job-000001 QUEUED → ASSIGNED: message".
std::string StateChangeLine(const v1::StateChange& change);
// Watch output, json mode:
// {"event":"state","job_id":..,"from":"QUEUED","to":"ASSIGNED","message":..,"time":"RFC3339"}.
std::string StateChangeJson(const v1::StateChange& change);
// Watch output, json mode: {"event":"step","job_id":..,"step":N,"loss":..,"grad_norm":..,"lr":..,
// "tokens_per_second":..,"step_seconds":..,"record":<record_json verbatim, or null>}. Each number
// is the record's own text when the record has that top-level field (so losses stay bitwise what
// the trainer wrote), else the event's field printed to round-trip exactly; NaN is null. When the
// record's device_memory_peak_bytes is nonzero (a CUDA job), "device_memory_peak_bytes":N comes
// before "record", and so does the record's "mfu_percent" when it has one.
std::string StepEventJson(const v1::StepEvent& event);
// The "device_memory_peak_bytes" of the event's step record (StepRecord; the CUDA caching
// allocator's peak during the step, the largest over the ranks); 0 when absent (CPU jobs, older
// trainers), not a positive number, or the record is not a step record.
uint64_t DeviceMemoryPeakBytes(const v1::StepEvent& event);
// The record's "mfu_percent" (model FLOPs utilization, README "Metrics"); nullopt when the record
// has none (no peak known, older trainers) or is not a step record.
std::optional<double> MfuPercentOf(const v1::StepEvent& event);

// The rank the trainer named a straggler after the event's step (the record's straggler_rank and
// straggler_ratio: consistently slower at computing than the other ranks), or none (rank -1).
struct StragglerNote {
  int64_t rank = -1;
  double ratio = 0;  // its compute / the median of the others'; 0 when none
};
StragglerNote StragglerOf(const v1::StepEvent& event);
// Watch output when the named straggler changes at `step` (`before`: the one named until then).
// Table: "step 9: rank 1 is a straggler: its compute took 1.83x the median of the other ranks'"
// or "step 20: rank 1 is no longer a straggler". Json: {"event":"straggler","job_id":..,"step":N,
// "rank":R,"ratio":X} with rank -1 and ratio 0 when none is named any more.
std::string StragglerLine(int64_t step, const StragglerNote& now, const StragglerNote& before);
std::string StragglerEventJson(const std::string& job_id, int64_t step, const StragglerNote& now);

// A failed coordinator call as a command shows it on stderr (no newline): "ringctl COMMAND:
// MESSAGE". For NOT_FOUND with a job id: "no job JOB: " before the message (unless it names the
// job) and the hint "; `ringctl list` shows the jobs" after it.
std::string CommandErrorLine(absl::string_view command, const absl::Status& status,
                             absl::string_view job_id = "");

// Where a job stands, for the progress line.
struct Progress {
  int64_t step = 0;
  int64_t total_steps = 0;  // 0: unknown (no "/total", no ETA)
  double loss = 0;
  double tokens_per_second = 0;
  double mean_step_seconds = 0;           // over the steps seen
  uint64_t device_memory_peak_bytes = 0;  // 0: not shown (CPU jobs)
  std::optional<double> mfu_percent;      // shown after tok/s when set
};
// "step 12/100  loss 4.2143  1234 tok/s  MFU 41.3%  elapsed 0:12  ETA 1:28" (no MFU when unknown);
// elapsed and ETA are estimated
// from the mean step time (elapsed = mean × step, ETA = mean × steps left). With a device peak,
// "  device peak 61.2 GiB" follows.
std::string ProgressLine(const Progress& progress);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_JOB_FORMAT_H_
