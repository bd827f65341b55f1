// The coordinator's scheduling core as pure logic: where a job's ranks go (PlaceRanks), which
// queued jobs start now and why the others wait (Schedule), and whether a job can ever run on the
// registered pool (CheckCanEverRun). No gRPC, no SQLite, no threads, no clocks: the service holds
// its own lock, takes a snapshot of the queue and the workers, calls in, and applies the decision.
// Every function is deterministic: the same inputs give the same placements and reasons.
//
// Mesh letters: DP = data-parallel degree (dp), CP = context-parallel degree (cp),
// world_size = dp × cp; rank = dp_index × cp + cp_rank (CP innermost).
#ifndef RINGTRAIN_COORDINATOR_SCHEDULER_H_
#define RINGTRAIN_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/job.h"

namespace ringtrain {

struct WorkerInfo {
  std::string worker_id;
  std::string device_kind;  // "cpu" | "cuda"
  std::string host_label;   // workers with the same label share a machine (fast CP traffic)
  std::string address;      // host[:port] the worker's trainers can be reached at
  bool idle = false;        // registered, connected, and running no rank
};

struct PendingJob {
  std::string job_id;
  RunMesh degrees;  // world = dp × cp
  std::string device_kind;
  // Not to be started yet (a restarting job still stopping its failed run, or in its backoff):
  // it keeps its place, blocking later jobs of its kind as a job waiting for workers does, but
  // gets no wait reason from Schedule (the caller has one).
  bool hold = false;
};

// Places the job's world_size ranks on `idle_workers_of_kind` (the caller filters by kind and
// idleness; every worker given is taken as usable). CP traffic is the heavy one, so each CP group
// (the cp ranks of one dp_index) goes onto one host when some host still has cp free workers: the
// host with the most free workers, ties broken by host_label; within a host, workers are taken in
// worker_id order. Only when no host has cp free workers is a group spread, taking workers from
// the hosts with the most free workers first — with Ulysses groups (degrees.ulysses > 1) one
// Ulysses group at a time, each onto the host with the most free workers then, so that a Ulysses
// group shares a host whenever one can hold it. Rank 0's worker serves the rendezvous.
// Returns world_size placements ordered by rank, {rank, worker_id, cp_group = dp_index, dp_index};
// returns an empty vector when the mesh is invalid (world_size <= 0 or != dp × cp) or there are
// fewer than world_size workers.
std::vector<RankPlacement> PlaceRanks(const PendingJob& job,
                                      std::vector<WorkerInfo> idle_workers_of_kind);

struct ScheduleDecision {
  // Jobs to start now, in queue order, each with its placement (disjoint workers across jobs).
  std::vector<std::pair<std::string /*job_id*/, std::vector<RankPlacement>>> start;
  // Every other job of the queue, with why it waits, e.g.
  // "waiting for 4 idle cpu workers, 2 free" or "waiting behind job-000003 (FIFO) for cpu workers".
  std::map<std::string /*job_id*/, std::string /*wait reason*/> waiting;
  // The waiting jobs that the pool cannot hold at all (world_size above every worker of the kind,
  // busy or idle): they block nobody (see Schedule), and the caller fails them if that lasts.
  std::set<std::string> unfit;
};

// FIFO gang scheduling over one snapshot. `workers` is the pool: every worker that is not lost,
// busy or idle. Walks `queue` (oldest first); a job starts only when world_size idle workers of its
// device kind are free, all at once, and those workers are then taken for the rest of the walk.
// Strict FIFO per device kind: the first job of a kind that cannot start blocks every later job of
// that kind (so a big job is not starved by small ones), but not jobs of other kinds — except a job
// the pool cannot hold at all (more ranks than workers of its kind, after workers were lost): it
// could not start however long the others waited, so it is marked `unfit` and the jobs behind it
// may start. A held job (PendingJob::hold) is never started and blocks like a waiting one. A job
// with an invalid mesh (world_size <= 0 or != dp × cp) waits with a reason saying
// so and blocks nobody; CheckCanEverRun is the place to reject it.
ScheduleDecision Schedule(const std::vector<PendingJob>& queue,
                          const std::vector<WorkerInfo>& workers);

// Whether `job` could ever start on the pool: INVALID_ARGUMENT for an invalid mesh,
// FAILED_PRECONDITION when world_size exceeds the registered workers of its kind, e.g.
// "job needs 8 cuda workers but the pool has 2 (registered: 4 cpu, 2 cuda)". A
// max_pool_size_hint > 0 is the number of workers of that kind the caller expects to register
// eventually; the check then fails only past the larger of that and the registered count. Idleness
// is ignored. The caller decides when to apply this (e.g. at submit, or after a grace period).
absl::Status CheckCanEverRun(const PendingJob& job,
                             const std::vector<WorkerInfo>& all_registered_workers,
                             int64_t max_pool_size_hint = 0);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_SCHEDULER_H_
