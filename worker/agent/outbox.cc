#include "worker/agent/outbox.h"

#include <algorithm>
#include <iterator>
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
  messages_.push_back(std::move(message));
  return true;
}

void Outbox::PushFront(std::vector<v1::AgentMessage> messages) {
  absl::MutexLock lock(&mu_);
  messages_.insert(messages_.begin(), std::make_move_iterator(messages.begin()),
                   std::make_move_iterator(messages.end()));
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

std::optional<v1::AgentMessage> Outbox::Front() const {
  absl::MutexLock lock(&mu_);
  if (messages_.empty()) return std::nullopt;
  return messages_.front();
}

void Outbox::PopFront() {
  absl::MutexLock lock(&mu_);
  if (!messages_.empty()) messages_.pop_front();
}

size_t Outbox::size() const {
  absl::MutexLock lock(&mu_);
  return messages_.size();
}

uint64_t Outbox::dropped_reports() const {
  absl::MutexLock lock(&mu_);
  return dropped_reports_;
}

}  // namespace ringtrain
