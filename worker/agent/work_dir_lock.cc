#include "worker/agent/work_dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "worker/agent/trainer_pid_file.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

constexpr std::chrono::milliseconds kGonePoll{20};

// What the lock file says of its holder: "pid N", or why it says nothing.
std::string Holder(int fd) {
  char buf[64] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  int pid = 0;
  if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &pid)) {
    return absl::StrCat("pid ", pid);
  }
  return "a process that has not written its pid yet";
}

// Waits until `record`'s process is gone (or a zombie), up to `wait`.
bool AwaitGone(const TrainerPidRecord& record, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (StillRuns(record)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kGonePoll);
  }
  return true;
}

// Job and rank from <work_dir>/<job_id>/rank-<rank>/trainer.pid; rank -1 if the name is not one.
LeftoverTrainer Describe(const fs::path& pid_file) {
  LeftoverTrainer t;
  const fs::path rank_dir = pid_file.parent_path();
  t.job_id = rank_dir.parent_path().filename().string();
  absl::string_view rank = rank_dir.filename().native();
  if (!absl::ConsumePrefix(&rank, "rank-") || !absl::SimpleAtoi(rank, &t.rank)) t.rank = -1;
  return t;
}

void Remove(const fs::path& file) {
  std::error_code ec;
  fs::remove(file, ec);
  if (ec) {
    RT_LOG(Warning) << "cannot remove " << file.string() << ": " << ec.message();
  }
}

}  // namespace

absl::StatusOr<WorkDirLock> WorkDirLock::Acquire(const std::string& work_dir) {
  const std::string dir = fs::absolute(work_dir).lexically_normal().string();
  const std::string path = (fs::path(dir) / kAgentLockFileName).string();
  // O_CLOEXEC: a trainer that inherited the descriptor would hold the lock after its agent died.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open the work dir lock '", path, "': ", std::strerror(errno)));
  }
  int locked;
  while ((locked = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (locked != 0) {
    const int flock_errno = errno;
    const std::string holder = Holder(fd);
    close(fd);
    if (flock_errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "work dir '", dir, "' is in use by another ringtrain-worker (", holder, " holds '", path,
          "'); stop that agent first, or give this one its own --work-dir"));
    }
    return absl::InternalError(
        absl::StrCat("cannot lock '", path, "': ", std::strerror(flock_errno)));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("cannot write our pid to '", path, "': ", why));
  }
  return WorkDirLock(fd, path);
}

WorkDirLock::WorkDirLock(WorkDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

WorkDirLock& WorkDirLock::operator=(WorkDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

WorkDirLock::~WorkDirLock() {
  if (fd_ >= 0) close(fd_);  // releases the flock
}

std::vector<LeftoverTrainer> StopLeftoverTrainers(const std::string& work_dir,
                                                  std::chrono::milliseconds wait) {
  std::vector<LeftoverTrainer> leftovers;
  std::vector<fs::path> pid_files;
  std::error_code ec;
  // <work_dir>/<job_id>/rank-<rank>/trainer.pid; nothing deeper, no symlinks followed.
  for (fs::directory_iterator job(work_dir, ec), end; !ec && job != end; job.increment(ec)) {
    std::error_code job_ec;
    if (job->is_symlink(job_ec) || !job->is_directory(job_ec)) continue;
    for (fs::directory_iterator rank(job->path(), job_ec); !job_ec && rank != end;
         rank.increment(job_ec)) {
      if (!absl::StartsWith(rank->path().filename().native(), "rank-")) continue;
      const fs::path file = rank->path() / kTrainerPidFileName;
      if (fs::is_regular_file(fs::symlink_status(file, job_ec))) pid_files.push_back(file);
      job_ec.clear();
    }
  }
  if (ec) {
    RT_LOG(Warning) << "cannot scan " << work_dir << " for leftover trainers: " << ec.message();
  }

  for (const fs::path& file : pid_files) {
    const absl::StatusOr<TrainerPidRecord> record = ReadTrainerPidFile(file.string());
    if (!record.ok()) {
      RT_LOG(Warning) << record.status().message() << "; removing it";
      Remove(file);
      continue;
    }
    if (!StillRuns(*record)) {
      Remove(file);  // that trainer is gone (its pid may run another process now)
      continue;
    }
    LeftoverTrainer t = Describe(file);
    t.pid = record->pid;
    // Its group too, which takes what it started with it, but only while the trainer still leads
    // it: a group is signalled only when this very process (checked above) is its leader.
    const std::optional<ProcessStat> stat = ReadProcessStat(record->pid);
    if (stat && stat->pgid == record->pid && record->pid > 1) kill(-record->pid, SIGKILL);
    kill(record->pid, SIGKILL);
    t.ended = AwaitGone(*record, wait);
    if (t.ended) {
      RT_LOG(Warning) << "killed a trainer a previous agent left running: job " << t.job_id
                      << " rank " << t.rank << ", pid " << t.pid;
      Remove(file);
    } else {
      RT_LOG(Error) << "a trainer a previous agent left running (job " << t.job_id << " rank "
                    << t.rank << ", pid " << t.pid << ") is still there "
                    << std::chrono::duration<double>(wait).count()
                    << " s after SIGKILL (stuck in the kernel?); leaving " << file.string();
    }
    leftovers.push_back(std::move(t));
  }
  return leftovers;
}

}  // namespace ringtrain
