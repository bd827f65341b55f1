#include "worker/agent/log_server.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "worker/agent/job_paths.h"
#include "worker/agent/rank_log.h"

namespace ringtrain {
namespace {

void SetError(const absl::Status& status, v1::LogChunk* chunk) {
  chunk->set_error_code(static_cast<int>(status.code()));
  chunk->set_error(std::string(status.message()));
  chunk->set_end(true);
}

}  // namespace

LogServer::LogServer(std::string work_dir, RankRunning running, Reply reply)
    : work_dir_(std::move(work_dir)), running_(std::move(running)), reply_(std::move(reply)) {
  thread_ = std::thread([this] { Loop(); });
}

LogServer::~LogServer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void LogServer::Handle(const v1::LogRequest& request) {
  absl::MutexLock lock(&mu_);
  incoming_.push_back(request);
}

bool LogServer::Answer(v1::LogRequest& request, bool keepalive_due, v1::LogChunk* chunk) {
  chunk->set_request_id(request.request_id());
  const std::string what = absl::StrCat("job ", request.job_id(), " rank ", request.rank());
  if (!CheckJobId(request.job_id()).ok() || request.rank() < 0) {
    SetError(absl::InvalidArgumentError(absl::StrCat("no such rank log: ", what)), chunk);
    return true;
  }
  const std::string path = absl::StrCat(work_dir_, "/", request.job_id(), "/rank-", request.rank(),
                                        "/", kRankLogFileName);
  // Asked before the read: a rank that has ended has written everything the read below sees.
  const RankState state = running_(request.job_id(), request.rank());
  // The job is over but this trainer is still being stopped: its last lines and the agent's note
  // are still to come (SIGTERM, then SIGKILL after the grace), so wait for them.
  if (state == RankState::kStopping && !request.follow() && !keepalive_due) return false;
  const bool running = state != RankState::kNotRunning;
  if (request.offset() < 0) {
    absl::StatusOr<int64_t> start = int64_t{0};
    if (request.tail_lines() > 0) start = RankLogTailOffset(path, request.tail_lines());
    if (!start.ok()) {
      SetError(start.status(), chunk);
      return true;
    }
    request.set_offset(*start);
  }
  absl::StatusOr<RankLogRead> read = ReadRankLog(path, request.offset(), kChunkBytes);
  if (!read.ok()) {
    absl::Status status = read.status();
    if (absl::IsNotFound(status)) {
      status = absl::NotFoundError(
          absl::StrCat("no log of ", what,
                       " here (it never ran here, or its folder was pruned: agents keep "
                       "the folders of their last --keep-rank-dirs ranks)"));
    }
    SetError(status, chunk);
    return true;
  }
  for (RankLogLine& line : read->lines) {
    v1::AgentLogLine* out = chunk->add_lines();
    out->set_time_unix_micros(line.time_unix_micros);
    out->set_stream(std::move(line.stream));
    out->set_text(std::move(line.text));
    out->set_offset(line.offset);
  }
  chunk->set_next_offset(read->next_offset);
  chunk->set_running(running);
  if (!request.follow()) {
    // Nothing whole left (a record still being written counts as the end for a snapshot).
    chunk->set_end(read->at_end || read->lines.empty());
    return true;
  }
  chunk->set_end(read->at_end && !running);
  return chunk->lines_size() > 0 || chunk->end() || keepalive_due;
}

void LogServer::Loop() {
  for (;;) {
    std::vector<v1::LogRequest> incoming;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &LogServer::HasWork),
                           absl::FromChrono(kPollInterval));
      if (stop_) return;
      incoming.swap(incoming_);
    }
    const auto now = std::chrono::steady_clock::now();
    for (v1::LogRequest& request : incoming) held_.push_back(Held{std::move(request), now});
    std::vector<Held> still_held;
    for (Held& held : held_) {
      v1::LogChunk chunk;
      if (!Answer(held.request, now - held.since >= kFollowKeepAlive, &chunk)) {
        still_held.push_back(std::move(held));
        continue;
      }
      v1::AgentMessage message;
      *message.mutable_log_chunk() = std::move(chunk);
      reply_(std::move(message));
    }
    held_.swap(still_held);
  }
}

}  // namespace ringtrain
