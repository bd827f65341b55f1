// How long an agent keeps its ranks' folders (<work-dir>/<job_id>/rank-<r>/: config.toml,
// rank.log, metrics.jsonl, progress.json), which `ringctl logs` reads after a job has ended: the
// folders of the last N ranks the agent ran (by their last change), N = --keep-rank-dirs. Before a
// rank starts, older ones are removed, then job folders left empty. Nothing else under the work
// dir is touched (agent.lock, the checkpoint root, files an operator put there). No gRPC.
#ifndef RINGTRAIN_WORKER_AGENT_RANK_DIRS_H_
#define RINGTRAIN_WORKER_AGENT_RANK_DIRS_H_

#include <string>
#include <vector>

namespace ringtrain {

// Removes all but the `keep` most recently changed rank folders under `work_dir`, never `spare`
// (the folder about to be used; it does not count) nor anything under `checkpoint_root`. A rank
// folder is <work_dir>/<job>/rank-<digits>/; its age is the newest modification time of the
// folder and its rank.log. Returns the folders removed (failures to remove are skipped).
std::vector<std::string> PruneRankDirs(const std::string& work_dir, int keep,
                                       const std::string& spare,
                                       const std::string& checkpoint_root);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_RANK_DIRS_H_
