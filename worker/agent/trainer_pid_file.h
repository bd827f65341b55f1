// <rank work_dir>/trainer.pid: which process a running trainer is, written by RankSupervisor when
// it starts one and removed when it reaps it, so that an agent restarted on the same work dir can
// find and stop a trainer its predecessor left running (work_dir_lock.h). A pid alone could name a
// later, unrelated process; the record adds the boot and the process's start time, which a reused
// pid never shares.
//
// The file is one line: `pid=<pid> pgid=<pgid> start_time=<ticks> boot_id=<uuid>\n`, start_time
// being field 22 of /proc/<pid>/stat (clock ticks after boot), boot_id
// /proc/sys/kernel/random/boot_id. Written to `<path>.tmp` and renamed, so a reader never sees half
// of it. Thread-compatible functions; no state.
#ifndef RINGTRAIN_WORKER_AGENT_TRAINER_PID_FILE_H_
#define RINGTRAIN_WORKER_AGENT_TRAINER_PID_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

constexpr char kTrainerPidFileName[] = "trainer.pid";

struct TrainerPidRecord {
  pid_t pid = -1;
  pid_t pgid = -1;          // the trainer's process group (its pid: it leads its own group)
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22
  std::string boot_id;
};

// What /proc/<pid>/stat says of a process that matters here.
struct ProcessStat {
  char state = '?';  // 'R', 'S', 'D', 'T', 'Z' (a zombie: dead, not yet reaped), ...
  pid_t pgid = -1;
  uint64_t start_time = 0;
};

// Parses the text of a /proc/<pid>/stat (the command name, in parentheses, may hold spaces and
// parentheses). nullopt when it is not one.
std::optional<ProcessStat> ParseProcessStat(absl::string_view text);
// /proc/<pid>/stat of a process; nullopt when there is no such process.
std::optional<ProcessStat> ReadProcessStat(pid_t pid);
// This boot's id (/proc/sys/kernel/random/boot_id, without its newline); "" when unreadable.
std::string BootId();

// The record of a process that runs now (its start time and group read from /proc, this boot).
// NOT_FOUND when `pid` does not run.
absl::StatusOr<TrainerPidRecord> RecordOf(pid_t pid);

// Whether the process `record` names runs now (and is not a zombie): the same pid, boot and start
// time, so never a later process that got the same pid.
bool StillRuns(const TrainerPidRecord& record);

// Writes `record` to `path` atomically (a temporary file beside it, renamed). INTERNAL naming the
// path when it cannot.
absl::Status WriteTrainerPidFile(const std::string& path, const TrainerPidRecord& record);
// Reads a file WriteTrainerPidFile wrote. NOT_FOUND when it is missing; DATA_LOSS naming the path
// when it does not hold a record.
absl::StatusOr<TrainerPidRecord> ReadTrainerPidFile(const std::string& path);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_TRAINER_PID_FILE_H_
