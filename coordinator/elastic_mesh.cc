#include "coordinator/elastic_mesh.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/config/mesh.h"

namespace ringtrain {
namespace {

// The (replicate, shard) split of `dp` data-parallel ranks, and its overrides, for a job whose own
// split was `own`: a filled shard degree (-1) stays -1 (it fills again); an explicit one is kept
// when dp allows it, else the job shards over all dp ranks; a replicated job stays replicated.
std::vector<std::string> SplitOverrides(const JobConfig& config, const MeshDegrees& own,
                                        int64_t dp) {
  const std::string replicate = "parallelism.data_parallel_replicate_degree=";
  const std::string shard = "parallelism.data_parallel_shard_degree=";
  if (config.parallelism.data_parallel_shard_degree == -1) {
    return {absl::StrCat(replicate, dp % own.replicate == 0 ? own.replicate : 1)};
  }
  if (own.shard == 1) return {absl::StrCat(replicate, dp), absl::StrCat(shard, 1)};
  if (dp % own.shard == 0) {
    return {absl::StrCat(replicate, dp / own.shard), absl::StrCat(shard, own.shard)};
  }
  return {absl::StrCat(replicate, 1), absl::StrCat(shard, dp)};
}

}  // namespace

absl::StatusOr<ElasticMesh> ElasticMeshFor(const std::string& config_toml,
                                           const std::vector<std::string>& overrides,
                                           int64_t workers) {
  absl::StatusOr<JobConfig> config = ParseJobConfig(config_toml, overrides, "job config");
  if (!config.ok()) return config.status();
  const int64_t own_world = RequestedWorldSize(*config);
  absl::StatusOr<MeshDegrees> own_mesh = ResolveMesh(*config, own_world);
  if (!own_mesh.ok()) return own_mesh.status();
  const MeshDegrees& own = *own_mesh;
  const int64_t cp = own.cp;
  if (own_world <= workers) {
    return ElasticMesh{static_cast<int>(own_world), static_cast<int>(own.dp()),
                       static_cast<int>(cp), {}, ""};
  }
  const int64_t local_batch = config->training.local_batch_size;
  const int64_t global_batch = config->training.global_batch_size > 0
                                   ? config->training.global_batch_size
                                   : own.dp() * local_batch;
  for (int64_t dp = own.dp() - 1; dp >= 1; --dp) {
    if (dp * cp > workers || global_batch % (dp * local_batch) != 0) continue;
    std::vector<std::string> mesh = SplitOverrides(*config, own, dp);
    mesh.push_back(absl::StrCat("training.global_batch_size=", global_batch));
    std::vector<std::string> all = overrides;
    all.insert(all.end(), mesh.begin(), mesh.end());
    absl::StatusOr<JobConfig> shrunk = ParseJobConfig(config_toml, all, "job config");
    if (!shrunk.ok() || !ResolveMesh(*shrunk, dp * cp).ok()) continue;
    ElasticMesh out;
    out.world_size = static_cast<int>(dp * cp);
    out.dp = static_cast<int>(dp);
    out.cp = static_cast<int>(cp);
    out.overrides = std::move(mesh);
    out.description = absl::StrCat(
        "elastic: data parallel ", own.dp(), " -> ", dp, " (world ", own_world, " -> ", dp * cp,
        ", cp ", cp, " kept); global batch ", global_batch, " kept as ",
        global_batch / (dp * local_batch), " micro-batches of ", local_batch, " per rank");
    return out;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no smaller mesh fits ", workers, " workers: cp ", cp, " is kept, and every data-parallel "
      "degree below ", own.dp(), " either needs more than ", workers,
      " workers or does not divide the global batch ", global_batch, " into micro-batches of ",
      local_batch));
}

}  // namespace ringtrain
