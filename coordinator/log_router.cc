#include "coordinator/log_router.h"

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringtrain {

LogRouter::LogRouter() {
  std::random_device random;
  absl::MutexLock lock(&mu_);
  next_id_ = (uint64_t{random()} << 32 | random()) | 1;
}

uint64_t LogRouter::Add(const std::string& worker_id, LogSink* sink) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  routes_[id] = Route{worker_id, sink};
  return id;
}

void LogRouter::Remove(uint64_t request_id) {
  absl::MutexLock lock(&mu_);
  routes_.erase(request_id);
}

void LogRouter::Awaiting(uint64_t request_id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (auto it = routes_.find(request_id); it != routes_.end())
    it->second.due = now + kAnswerTimeout;
}

void LogRouter::Deliver(const std::string& worker_id, const v1::LogChunk& chunk) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(chunk.request_id());
  // Not ours (a stream that has ended, or another worker's id): dropped.
  if (it == routes_.end() || it->second.worker_id != worker_id) return;
  it->second.due =
      it->second.sink->OnLogChunk(chunk) ? absl::Now() + kAnswerTimeout : absl::InfiniteFuture();
}

void LogRouter::SessionEnded(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  for (auto it = routes_.begin(); it != routes_.end();) {
    if (it->second.worker_id != worker_id) {
      ++it;
      continue;
    }
    it->second.sink->OnLogFailed(absl::UnavailableError(
        absl::StrCat("the session of ", worker_id,
                     " (the worker holding the log) ended; it reconnects on its own: try again")));
    it = routes_.erase(it);
  }
}

void LogRouter::Expire(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto it = routes_.begin(); it != routes_.end();) {
    if (now < it->second.due) {
      ++it;
      continue;
    }
    it->second.sink->OnLogFailed(absl::UnavailableError(
        absl::StrCat(it->second.worker_id, " did not answer a log request for ",
                     absl::FormatDuration(kAnswerTimeout),
                     " (an agent too old to serve logs, or one that is overloaded)")));
    it = routes_.erase(it);
  }
}

}  // namespace ringtrain
