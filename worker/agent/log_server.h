// The agent's side of `ringctl logs`: answers the coordinator's LogRequests (worker_service.proto)
// from the rank logs under the work dir (<work-dir>/<job_id>/rank-<rank>/rank.log, rank_log.h).
// Each request gets exactly one LogChunk: at once when there are lines to send, an error, or the
// end of the log; a following request while the rank still runs here is held until new lines come
// (checked every kPollInterval) or kFollowKeepAlive passes (then an empty chunk: the coordinator
// asks again if its client is still there). A snapshot of a rank that is being stopped is held
// until it has ended (at most kFollowKeepAlive), so the log of a job that has just failed or been
// cancelled reads whole, ending in the agent's note of how each trainer ended.
//
// Thread-safety: Handle() may be called from any thread. `running` and `reply` run on the server's
// own thread with no lock of the server held; they must not call back into it.
#ifndef RINGTRAIN_WORKER_AGENT_LOG_SERVER_H_
#define RINGTRAIN_WORKER_AGENT_LOG_SERVER_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

class LogServer {
 public:
  // Where the trainer of a rank stands on this agent.
  enum class RankState {
    kNotRunning,  // never ran here, or has ended: its log is complete
    kRunning,
    kStopping,  // still running, but told to stop (its job ended or restarts): its log is not
                // complete until the agent has noted how it ended
  };
  using RankRunning = std::function<RankState(const std::string& job_id, int rank)>;
  // Sends a LogChunk (an AgentMessage with seq 0) up the session.
  using Reply = std::function<void(v1::AgentMessage message)>;

  static constexpr std::chrono::milliseconds kPollInterval{100};
  static constexpr std::chrono::seconds kFollowKeepAlive{20};
  // Log bytes per chunk (whole lines; a chunk holds at least one line).
  static constexpr size_t kChunkBytes = 256 * 1024;

  // `work_dir` is the agent's (absolute) --work-dir.
  LogServer(std::string work_dir, RankRunning running, Reply reply);
  LogServer(const LogServer&) = delete;
  LogServer& operator=(const LogServer&) = delete;
  // Stops the thread; held requests are dropped unanswered.
  ~LogServer();

  void Handle(const v1::LogRequest& request);

 private:
  struct Held {
    v1::LogRequest request;
    std::chrono::steady_clock::time_point since;
  };

  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !incoming_.empty(); }
  // The chunk that answers `request` now, or false when it should be held (following a running
  // rank with nothing new).
  bool Answer(v1::LogRequest& request, bool keepalive_due, v1::LogChunk* chunk);

  const std::string work_dir_;
  const RankRunning running_;
  const Reply reply_;

  mutable absl::Mutex mu_;
  std::vector<v1::LogRequest> incoming_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Held> held_;  // the server's thread only
  std::thread thread_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_LOG_SERVER_H_
