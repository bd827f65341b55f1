#include "coordinator/event_hub.h"

namespace ringtrain {

void EventHub::Subscribe(const std::string& job_id, JobEventSink* sink) {
  absl::MutexLock lock(&mu_);
  sinks_[job_id].insert(sink);
}

void EventHub::Unsubscribe(const std::string& job_id, JobEventSink* sink) {
  absl::MutexLock lock(&mu_);
  auto it = sinks_.find(job_id);
  if (it == sinks_.end()) return;
  it->second.erase(sink);
  if (it->second.empty()) sinks_.erase(it);
}

int EventHub::Publish(const std::string& job_id, const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  auto it = sinks_.find(job_id);
  if (it == sinks_.end()) return 0;
  for (JobEventSink* sink : it->second) sink->OnJobEvent(event);
  const int reached = static_cast<int>(it->second.size());
  delivered_ += reached;
  return reached;
}

int EventHub::WatcherCount() {
  absl::MutexLock lock(&mu_);
  int count = 0;
  for (const auto& [job_id, sinks] : sinks_) count += static_cast<int>(sinks.size());
  return count;
}

int64_t EventHub::EventsDelivered() {
  absl::MutexLock lock(&mu_);
  return delivered_;
}

}  // namespace ringtrain
