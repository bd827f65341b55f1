// Routes the agents' LogChunks (worker_service.proto) to the StreamLogs streams that asked for
// them (logs_reactor.h). Each stream registers as a LogSink under one request id and names the
// worker it reads from; a chunk is delivered only when it comes from that worker's session with
// that id, so no agent can write into another worker's log stream. A stream that waits longer
// than kAnswerTimeout for its worker's answer, or whose worker's session ends, is failed with
// UNAVAILABLE naming the worker.
#ifndef RINGTRAIN_COORDINATOR_LOG_ROUTER_H_
#define RINGTRAIN_COORDINATOR_LOG_ROUTER_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

// A StreamLogs stream. The router calls it with the router's lock held (so a sink cannot be
// removed, and destroyed, during a call): implementations never call back into the router from
// these, but may call the Cluster. Lock order: router, then sink, then Cluster.
class LogSink {
 public:
  virtual ~LogSink() = default;
  // Returns true when the sink sent its worker another request at once (its answer is then due).
  virtual bool OnLogChunk(const v1::LogChunk& chunk) = 0;
  // The worker cannot answer (session ended, no answer in time). The sink is no longer routed to.
  virtual void OnLogFailed(const absl::Status& status) = 0;
};

// Thread-safe.
class LogRouter {
 public:
  // Request ids start at a random number, so a late answer to a request of an earlier coordinator
  // process (an agent keeps its queue across sessions) does not match a stream of this one.
  LogRouter();

  // Longer than the agents' follow keep-alive (LogServer::kFollowKeepAlive, 20 s).
  static constexpr absl::Duration kAnswerTimeout = absl::Seconds(45);

  // Routes chunks from `worker_id` with the returned request id to `sink` until Remove.
  uint64_t Add(const std::string& worker_id, LogSink* sink);
  void Remove(uint64_t request_id);
  // The sink sent a request: its answer is due within kAnswerTimeout of `now`.
  void Awaiting(uint64_t request_id, absl::Time now);

  void Deliver(const std::string& worker_id, const v1::LogChunk& chunk);
  // `worker_id`'s session ended: its streams fail (their requests went down that session).
  void SessionEnded(const std::string& worker_id);
  // Fails the streams whose answer is overdue at `now`.
  void Expire(absl::Time now);

 private:
  struct Route {
    std::string worker_id;
    LogSink* sink;
    absl::Time due = absl::InfiniteFuture();
  };

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Route> routes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_LOG_ROUTER_H_
