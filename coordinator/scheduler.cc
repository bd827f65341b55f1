#include "coordinator/scheduler.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringtrain {
namespace {

bool MeshIsValid(const PendingJob& job) {
  const RunMesh& m = job.degrees;
  return m.world > 0 && m.dp > 0 && m.cp > 0 && static_cast<int64_t>(m.dp) * m.cp == m.world;
}

std::string InvalidMeshReason(const PendingJob& job) {
  const RunMesh& m = job.degrees;
  return absl::StrCat("invalid mesh: world_size ", m.world, " must equal dp ", m.dp, " x cp ", m.cp,
                      " and be positive");
}

std::string Workers(int64_t n) { return n == 1 ? "worker" : "workers"; }

// Hosts that still have free workers: most free first, ties by host_label (the map's order).
std::vector<std::string> HostsByFreeDesc(
    const std::map<std::string, std::deque<std::string>>& free_by_host) {
  std::vector<std::string> hosts;
  for (const auto& [host, free] : free_by_host) {
    if (!free.empty()) hosts.push_back(host);
  }
  std::stable_sort(hosts.begin(), hosts.end(), [&](const std::string& a, const std::string& b) {
    return free_by_host.at(a).size() > free_by_host.at(b).size();
  });
  return hosts;
}

}  // namespace

std::vector<RankPlacement> PlaceRanks(const PendingJob& job,
                                      std::vector<WorkerInfo> idle_workers_of_kind) {
  const RunMesh& mesh = job.degrees;
  if (!MeshIsValid(job) || idle_workers_of_kind.size() < static_cast<size_t>(mesh.world)) {
    return {};
  }
  std::sort(idle_workers_of_kind.begin(), idle_workers_of_kind.end(),
            [](const WorkerInfo& a, const WorkerInfo& b) { return a.worker_id < b.worker_id; });
  // host_label → its free worker ids in ascending order, taken from the front.
  std::map<std::string, std::deque<std::string>> free_by_host;
  for (const WorkerInfo& w : idle_workers_of_kind) {
    free_by_host[w.host_label].push_back(w.worker_id);
  }

  const size_t cp = static_cast<size_t>(mesh.cp);
  std::vector<RankPlacement> placements;
  placements.reserve(mesh.world);
  for (int dp_index = 0; dp_index < mesh.dp; ++dp_index) {
    std::vector<std::string> group;  // worker ids of this CP group, by cp_rank
    // The first host has the most free workers: if it cannot hold the whole group none can, and
    // the group is spread — by Ulysses groups, each onto the host with the most free workers then,
    // so that their all-to-alls stay inside a host; a unit no host holds is spread in turn.
    const size_t ulysses = static_cast<size_t>(std::max(1, mesh.ulysses));
    const std::vector<std::string> first = HostsByFreeDesc(free_by_host);
    const size_t unit =
        ulysses > 1 && cp % ulysses == 0 && free_by_host[first.front()].size() < cp ? ulysses : cp;
    while (group.size() < cp) {
      const size_t want = group.size() + unit;
      for (const std::string& host : HostsByFreeDesc(free_by_host)) {
        std::deque<std::string>& free = free_by_host[host];
        while (!free.empty() && group.size() < want) {
          group.push_back(free.front());
          free.pop_front();
        }
        if (group.size() == want) break;
      }
    }
    for (int cp_rank = 0; cp_rank < mesh.cp; ++cp_rank) {
      placements.push_back({dp_index * mesh.cp + cp_rank, group[cp_rank], dp_index, dp_index});
    }
  }
  return placements;
}

ScheduleDecision Schedule(const std::vector<PendingJob>& queue,
                          const std::vector<WorkerInfo>& workers) {
  std::map<std::string, std::vector<WorkerInfo>> free_by_kind;
  std::map<std::string, int64_t> pool_by_kind;
  for (const WorkerInfo& w : workers) {
    ++pool_by_kind[w.device_kind];
    if (w.idle) free_by_kind[w.device_kind].push_back(w);
  }
  // device kind → the first job of that kind that could not start; later ones queue behind it.
  std::map<std::string, std::string> blocker_by_kind;

  ScheduleDecision decision;
  for (const PendingJob& job : queue) {
    if (!MeshIsValid(job)) {
      decision.waiting[job.job_id] = InvalidMeshReason(job);
      continue;
    }
    const int64_t pool = pool_by_kind[job.device_kind];
    const int world = job.degrees.world;
    if (world > pool) {
      decision.waiting[job.job_id] = absl::StrCat(
          "the pool cannot hold it: needs ", world, " ", job.device_kind, " ", Workers(world),
          ", the pool has ", pool, "; later ", job.device_kind, " jobs may start meanwhile");
      decision.unfit.insert(job.job_id);
      continue;
    }
    if (job.hold) {
      blocker_by_kind.emplace(job.device_kind, job.job_id);
      continue;
    }
    auto blocker = blocker_by_kind.find(job.device_kind);
    if (blocker != blocker_by_kind.end()) {
      decision.waiting[job.job_id] = absl::StrCat("waiting behind ", blocker->second,
                                                  " (FIFO) for ", job.device_kind, " workers");
      continue;
    }
    std::vector<WorkerInfo>& free = free_by_kind[job.device_kind];
    if (free.size() < static_cast<size_t>(world)) {
      decision.waiting[job.job_id] = absl::StrCat("waiting for ", world, " idle ", job.device_kind,
                                                  " ", Workers(world), ", ", free.size(), " free");
      blocker_by_kind[job.device_kind] = job.job_id;
      continue;
    }
    std::vector<RankPlacement> placement = PlaceRanks(job, free);
    std::set<std::string> taken;
    for (const RankPlacement& p : placement) taken.insert(p.worker_id);
    free.erase(std::remove_if(free.begin(), free.end(),
                              [&](const WorkerInfo& w) { return taken.count(w.worker_id) > 0; }),
               free.end());
    decision.start.emplace_back(job.job_id, std::move(placement));
  }
  return decision;
}

absl::Status CheckCanEverRun(const PendingJob& job,
                             const std::vector<WorkerInfo>& all_registered_workers,
                             int64_t max_pool_size_hint) {
  if (!MeshIsValid(job)) return absl::InvalidArgumentError(InvalidMeshReason(job));
  std::map<std::string, int64_t> count_by_kind;
  for (const WorkerInfo& w : all_registered_workers) ++count_by_kind[w.device_kind];
  const int64_t have = count_by_kind[job.device_kind];
  const int world = job.degrees.world;
  if (world <= std::max(have, max_pool_size_hint)) return absl::OkStatus();

  std::vector<std::string> registered;
  for (const auto& [kind, n] : count_by_kind) {
    if (n > 0) registered.push_back(absl::StrCat(n, " ", kind));
  }
  std::string message = absl::StrCat(
      "job needs ", world, " ", job.device_kind, " ", Workers(world), " but the pool has ", have,
      " (registered: ", registered.empty() ? "none" : absl::StrJoin(registered, ", "), ")");
  if (max_pool_size_hint > have) {
    absl::StrAppend(&message, " and expects at most ", max_pool_size_hint);
  }
  absl::StrAppend(&message, "; lower world_size (dp x cp) to at most ",
                  std::max(have, max_pool_size_hint), " or register more ", job.device_kind,
                  " workers");
  return absl::FailedPreconditionError(message);
}

}  // namespace ringtrain
