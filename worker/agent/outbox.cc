#include "worker/agent/outbox.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace ringtrain {

uint64_t Outbox::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

bool Outbox::Push(uint64_t epoch, v1::AgentMessage message) {
  absl::MutexLock lock(&mu_);
  if (epoch != epoch_) return false;  // from a registration given up: no one would collect it
  return PushLocked(std::move(message));
}

bool Outbox::Push(v1::AgentMessage message) {
  absl::MutexLock lock(&mu_);
  return PushLocked(std::move(message));
}

bool Outbox::PushLocked(v1::AgentMessage message) {
  if (message.has_rank_report() && messages_.size() >= max_buffered_) {
    if (dropped_reports_++ % 10000 == 0) {
      RT_LOG(Warning) << "outbox full (" << messages_.size() << " messages): dropped "
                      << dropped_reports_ << " rank reports so far";
    }
    return false;
  }
  message.set_seq(next_seq_++);
  messages_.push_back(std::move(message));
  return true;
}

bool Outbox::HasRankExit() const {
  absl::MutexLock lock(&mu_);
  return std::any_of(messages_.begin(), messages_.end(),
                     [](const v1::AgentMessage& m) { return m.has_rank_exit(); });
}

size_t Outbox::DropAll() {
  absl::MutexLock lock(&mu_);
  ++epoch_;
  const size_t dropped = messages_.size();
  messages_.clear();
  return dropped;
}

std::optional<v1::AgentMessage> Outbox::NextToWrite() const {
  absl::MutexLock lock(&mu_);
  // Sorted by seq: the first past written_seq_, however many are in flight unacknowledged.
  auto next =
      std::upper_bound(messages_.begin(), messages_.end(), written_seq_,
                       [](uint64_t seq, const v1::AgentMessage& m) { return seq < m.seq(); });
  if (next == messages_.end()) return std::nullopt;
  return *next;
}

void Outbox::MarkWritten(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  written_seq_ = std::max(written_seq_, seq);
}

void Outbox::Rewind() {
  absl::MutexLock lock(&mu_);
  written_seq_ = 0;
}

size_t Outbox::Acknowledge(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  size_t removed = 0;
  while (!messages_.empty() && messages_.front().seq() <= seq) {
    messages_.pop_front();
    ++removed;
  }
  return removed;
}

size_t Outbox::size() const {
  absl::MutexLock lock(&mu_);
  return messages_.size();
}

bool Outbox::HasUnwritten() const {
  absl::MutexLock lock(&mu_);
  return !messages_.empty() && messages_.back().seq() > written_seq_;
}

uint64_t Outbox::dropped_reports() const {
  absl::MutexLock lock(&mu_);
  return dropped_reports_;
}

}  // namespace ringtrain
