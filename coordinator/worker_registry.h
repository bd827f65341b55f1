// The coordinator's workers: who registered (with which device and credential), their sessions,
// heartbeats and liveness, which rank each runs now, and the ids of an earlier coordinator's
// workers that have not come back. No job rules here: the Cluster decides what a lost worker means
// for its job (coordinator/cluster.h).
//
// Not thread-safe: the Cluster holds its registry under its own lock.
#ifndef RINGTRAIN_COORDINATOR_WORKER_REGISTRY_H_
#define RINGTRAIN_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/scheduler.h"
#include "ringtrain/v1/job_service.pb.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

// The downstream half of one agent's Session stream. Implementations never block and never call
// back into the Cluster (the Cluster calls them with its lock held).
class AgentChannel {
 public:
  virtual ~AgentChannel() = default;
  virtual void Send(const v1::CoordinatorMessage& message) = 0;
  // Ends the stream with `status` (after what was already sent).
  virtual void Close(const absl::Status& status) = 0;
};

enum class WorkerState { kIdle, kBusy, kLost };

struct Worker {
  WorkerInfo info;
  std::string device;                // "cpu" | "cuda:N"
  std::string device_name;           // as registered, e.g. "NVIDIA H200" ("" from older agents)
  uint64_t device_memory_bytes = 0;  // as registered; 0 = unknown
  std::string checkpoint_root;       // its --checkpoint-root, as registered ("" from older agents)
  WorkerState state = WorkerState::kIdle;
  std::string job_id;  // set while busy
  int rank = -1;
  int attempt = 0;        // the run (JobRecord::restart_count) of the rank it runs
  uint64_t last_seq = 0;  // the highest AgentMessage.seq taken from it
  absl::Time last_heartbeat;
  AgentChannel* channel = nullptr;        // null while the session is down
  std::string credential_digest;          // CredentialDigest of the credential Register gave
  absl::Time lost_at;                     // when it turned kLost (purged purge_lost_after later)
  std::set<std::string> refusals_logged;  // reasons already logged for this worker

  // Whether it runs `rank` of `job_id`'s run `attempt` now: the only rank whose messages it may
  // send.
  bool OwnsRank(const std::string& job_id, int rank, int attempt) const;
  // Busy with `rank` of `job_id`'s run `attempt`.
  void Assign(const std::string& job_id, int rank, int attempt);
  // Its rank is gone (exited, or its worker lost): it holds no job.
  void Release();
  // kLost at `now`: its session is closed with UNAVAILABLE saying `why`; it holds no job.
  void MarkLost(absl::Time now, const std::string& why);
  // Its state as ListWorkers and /metrics report it: "idle" | "busy" | "disconnected" | "lost".
  const char* StateName() const;
};

class WorkerRegistry {
 public:
  // nullptr when `id` is not registered (never, or purged).
  Worker* Find(const std::string& id);
  const Worker* Find(const std::string& id) const;
  // A fresh entry for `id` (replacing a lost worker's); `id` is no longer expected back
  // (ExpectBack) and NewId never hands it out. The caller has checked that no live worker holds it
  // (CheckFree).
  Worker& Register(const std::string& id);
  // "worker-N", never handed out before and above every id Reserve or Register saw (so never an
  // id an agent asked for).
  std::string NewId();
  // OK when a Register may take `id` (an agent's requested_worker_id): no worker holds it, or only
  // a lost one. ALREADY_EXISTS naming the id, the holder's host and address and what to do
  // otherwise (a disconnected holder's id is free once it is declared lost).
  absl::Status CheckFree(const std::string& id) const;
  // An id an earlier coordinator handed out (the store's, a job mesh's): NewId never repeats it.
  void Reserve(const std::string& id);
  // A worker of an earlier coordinator that has not registered again: purged at `purge_at`.
  void ExpectBack(const std::string& id, absl::Time purge_at);
  // Drops workers lost for `lost_for` at `now` that hold no job, and the ids expected back whose
  // time has passed; returns the ids dropped (the caller deletes their stored credentials).
  std::vector<std::string> Purge(absl::Time now, absl::Duration lost_for);

  // The workers not lost, as the scheduler sees them: idle only when connected and running nothing.
  std::vector<WorkerInfo> Schedulable() const;
  // The workers not lost, by device kind (busy or idle, connected or not).
  std::map<std::string, int64_t> LiveByKind() const;
  // The workers not lost whose last heartbeat is more than `timeout` before `now`.
  std::vector<Worker*> Silent(absl::Time now, absl::Duration timeout);
  std::vector<v1::Worker> List() const;  // ListWorkers, in id order
  // Every worker by StateName, each state present (0 or not).
  std::map<std::string, int> CountByState() const;

  const std::map<std::string, Worker>& workers() const { return workers_; }

 private:
  std::map<std::string, Worker> workers_;
  int64_t next_number_ = 1;
  // Ids an earlier coordinator knew that have not registered again, and when they are purged.
  std::map<std::string, absl::Time> expected_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_WORKER_REGISTRY_H_
