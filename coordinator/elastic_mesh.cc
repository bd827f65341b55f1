#include "coordinator/elastic_mesh.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/mesh.h"

namespace ringtrain {
namespace {

constexpr char kReplicate[] = "parallelism.data_parallel_replicate_degree";
constexpr char kShard[] = "parallelism.data_parallel_shard_degree";

// The (replicate, shard) split of `dp` data-parallel ranks for a job whose own split was `own`: a
// filled shard degree (-1) stays -1 (it fills again); an explicit one is kept when dp allows it,
// else the job shards over all dp ranks; a replicated job stays replicated. Set in `config` (as
// the overrides returned, which say the same to the trainer).
std::vector<std::string> SetSplit(const MeshDegrees& own, int64_t dp, ParallelismSection* p) {
  std::vector<std::pair<const char*, int64_t>> set;
  if (p->data_parallel_shard_degree == -1) {
    set = {{kReplicate, dp % own.replicate == 0 ? own.replicate : 1}};
  } else if (own.shard == 1) {
    set = {{kReplicate, dp}, {kShard, 1}};
  } else if (dp % own.shard == 0) {
    set = {{kReplicate, dp / own.shard}, {kShard, own.shard}};
  } else {
    set = {{kReplicate, 1}, {kShard, dp}};
  }
  std::vector<std::string> overrides;
  for (const auto& [key, value] : set) {
    (key == kReplicate ? p->data_parallel_replicate_degree : p->data_parallel_shard_degree) = value;
    overrides.push_back(absl::StrCat(key, "=", value));
  }
  return overrides;
}

RunMesh RunMeshOf(const MeshDegrees& mesh) {
  return {static_cast<int>(mesh.world), static_cast<int>(mesh.dp()), static_cast<int>(mesh.cp),
          static_cast<int>(mesh.ulysses)};
}

}  // namespace

absl::StatusOr<ElasticMesh> ElasticMeshFor(const JobConfig& config, int64_t workers) {
  const int64_t own_world = RequestedWorldSize(config);
  absl::StatusOr<MeshDegrees> own_mesh = ResolveMesh(config, own_world);
  if (!own_mesh.ok()) return own_mesh.status();
  const MeshDegrees& own = *own_mesh;
  const int64_t cp = own.cp;
  if (own_world <= workers) return ElasticMesh{RunMeshOf(own), {}, ""};
  const int64_t local_batch = config.training.local_batch_size;
  const int64_t global_batch = config.training.global_batch_size > 0
                                   ? config.training.global_batch_size
                                   : own.dp() * local_batch;
  for (int64_t dp = own.dp() - 1; dp >= 1; --dp) {
    if (dp * cp > workers || global_batch % (dp * local_batch) != 0) continue;
    JobConfig shrunk = config;
    std::vector<std::string> overrides = SetSplit(own, dp, &shrunk.parallelism);
    shrunk.training.global_batch_size = global_batch;
    overrides.push_back(absl::StrCat("training.global_batch_size=", global_batch));
    absl::StatusOr<MeshDegrees> mesh = ResolveMesh(shrunk, dp * cp);
    if (!mesh.ok()) continue;
    ElasticMesh out;
    out.degrees = RunMeshOf(*mesh);
    out.overrides = std::move(overrides);
    out.description = absl::StrCat("elastic: data parallel ", own.dp(), " -> ", dp, " (world ",
                                   own_world, " -> ", dp * cp, ", cp ", cp, " kept); global batch ",
                                   global_batch, " kept as ", global_batch / (dp * local_batch),
                                   " micro-batches of ", local_batch, " per rank");
    return out;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no smaller mesh fits ", workers, " workers: cp ", cp,
                   " is kept, and every data-parallel "
                   "degree below ",
                   own.dp(), " either needs more than ", workers,
                   " workers or does not divide the global batch ", global_batch,
                   " into micro-batches of ", local_batch));
}

absl::StatusOr<ElasticMesh> ElasticMeshFor(const std::string& config_toml,
                                           const std::vector<std::string>& overrides,
                                           int64_t workers) {
  absl::StatusOr<JobConfig> config = ParseJobConfig(config_toml, overrides, "job config");
  if (!config.ok()) return config.status();
  return ElasticMeshFor(*config, workers);
}

}  // namespace ringtrain
