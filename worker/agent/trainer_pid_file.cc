#include "worker/agent/trainer_pid_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ringtrain {
namespace {

// The fields of /proc/<pid>/stat after the command name, counted from 1 like proc(5): field 3 is
// the first after the name.
constexpr size_t kStateField = 3;
constexpr size_t kPgidField = 5;
constexpr size_t kStartTimeField = 22;

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<ProcessStat> ParseProcessStat(absl::string_view text) {
  const size_t paren = text.rfind(')');
  if (paren == absl::string_view::npos) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(paren + 1), ' ', absl::SkipEmpty());
  if (fields.size() < kStartTimeField - kStateField + 1) return std::nullopt;
  ProcessStat stat;
  const absl::string_view state = fields[0];
  if (state.size() != 1) return std::nullopt;
  stat.state = state[0];
  int pgid = 0;
  if (!absl::SimpleAtoi(fields[kPgidField - kStateField], &pgid) ||
      !absl::SimpleAtoi(absl::StripTrailingAsciiWhitespace(fields[kStartTimeField - kStateField]),
                        &stat.start_time)) {
    return std::nullopt;
  }
  stat.pgid = pgid;
  return stat;
}

std::optional<ProcessStat> ReadProcessStat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string text = ReadWhole(absl::StrCat("/proc/", pid, "/stat"));
  if (text.empty()) return std::nullopt;
  return ParseProcessStat(text);
}

std::string BootId() {
  return std::string(absl::StripAsciiWhitespace(ReadWhole("/proc/sys/kernel/random/boot_id")));
}

absl::StatusOr<TrainerPidRecord> RecordOf(pid_t pid) {
  const std::optional<ProcessStat> stat = ReadProcessStat(pid);
  if (!stat) return absl::NotFoundError(absl::StrCat("no process ", pid, " in /proc"));
  TrainerPidRecord record;
  record.pid = pid;
  record.pgid = stat->pgid;
  record.start_time = stat->start_time;
  record.boot_id = BootId();
  return record;
}

bool StillRuns(const TrainerPidRecord& record) {
  if (record.boot_id != BootId()) return false;  // written before a reboot
  const std::optional<ProcessStat> stat = ReadProcessStat(record.pid);
  return stat && stat->state != 'Z' && stat->start_time == record.start_time;
}

absl::Status WriteTrainerPidFile(const std::string& path, const TrainerPidRecord& record) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "pid=" << record.pid << " pgid=" << record.pgid << " start_time=" << record.start_time
        << " boot_id=" << record.boot_id << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainerPidRecord> ReadTrainerPidFile(const std::string& path) {
  if (access(path.c_str(), F_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no '", path, "'"));
  }
  const std::string text = ReadWhole(path);
  TrainerPidRecord record;
  bool has_pid = false, has_pgid = false, has_start = false, has_boot = false;
  for (absl::string_view field : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    int number = 0;
    if (absl::ConsumePrefix(&field, "pid=")) {
      has_pid = absl::SimpleAtoi(field, &number) && number > 0;
      record.pid = number;
    } else if (absl::ConsumePrefix(&field, "pgid=")) {
      has_pgid = absl::SimpleAtoi(field, &number) && number > 0;
      record.pgid = number;
    } else if (absl::ConsumePrefix(&field, "start_time=")) {
      has_start = absl::SimpleAtoi(field, &record.start_time);
    } else if (absl::ConsumePrefix(&field, "boot_id=")) {
      record.boot_id = std::string(field);
      has_boot = !field.empty();
    }
  }
  if (!has_pid || !has_pgid || !has_start || !has_boot) {
    return absl::DataLossError(absl::StrCat(
        "'", path, "' does not hold a trainer record (pid=, pgid=, start_time=, boot_id=)"));
  }
  return record;
}

}  // namespace ringtrain
