// Fan-out of job events to the clients watching a job. The coordinator publishes each event once,
// after it is in the job store; the hub hands it to every watcher of that job. Publishing never
// waits for a watcher: a sink must take the event in O(1) (each WatchJob stream keeps a bounded
// buffer and, when it falls behind, drops it and catches up from the store instead).
#ifndef RINGTRAIN_COORDINATOR_EVENT_HUB_H_
#define RINGTRAIN_COORDINATOR_EVENT_HUB_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

// Receives the events of the jobs it is subscribed to. Called with the hub's lock held: must not
// block, and must not call back into the hub.
class JobEventSink {
 public:
  virtual ~JobEventSink() = default;
  virtual void OnJobEvent(const v1::JobEvent& event) = 0;
};

// Thread-safe.
class EventHub {
 public:
  // `sink` must stay valid until Unsubscribe returns; after that it gets no more events.
  void Subscribe(const std::string& job_id, JobEventSink* sink);
  void Unsubscribe(const std::string& job_id, JobEventSink* sink);

  // Hands `event` to every sink of `job_id`; returns how many got it.
  int Publish(const std::string& job_id, const v1::JobEvent& event);

  int WatcherCount();
  int64_t EventsDelivered();  // sum over Publish calls of the sinks reached

 private:
  absl::Mutex mu_;
  std::map<std::string, std::set<JobEventSink*>> sinks_ ABSL_GUARDED_BY(mu_);
  int64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_EVENT_HUB_H_
