#include "common/config/mesh.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/config_limits.h"
#include "common/config/config_validate.h"

namespace ringtrain {
namespace {

// Fills one -1 degree from the world: shard when it is -1 (an unset replicate then means 1), else
// replicate. Degrees that do not multiply to the world are reported, not resolved.
void CheckDegrees(const JobConfig& config, int64_t world_size, std::vector<std::string>* problems) {
  const ParallelismSection& p = config.parallelism;
  const int64_t cp = p.context_parallel_degree;
  const int64_t shard = p.data_parallel_shard_degree;
  const int64_t replicate = p.data_parallel_replicate_degree;
  if (cp <= 0) {
    problems->push_back(
        absl::StrCat("parallelism.context_parallel_degree = ", cp, ": must be > 0"));
    return;
  }
  if (replicate != -1 && replicate <= 0) {
    problems->push_back(absl::StrCat("parallelism.data_parallel_replicate_degree = ", replicate,
                                     ": must be -1 (fill the world) or > 0"));
    return;
  }
  if (shard != -1 && shard <= 0) {
    problems->push_back(absl::StrCat("parallelism.data_parallel_shard_degree = ", shard,
                                     ": must be -1 (fill the world) or > 0"));
    return;
  }
  // The fixed degrees' product, and the key that fills the rest (empty when none does).
  const bool shard_fills = shard == -1;
  const bool replicate_fills = !shard_fills && replicate == -1;
  const int64_t fixed_replicate = shard_fills && replicate == -1 ? 1 : replicate;
  if (shard_fills || replicate_fills) {
    const int64_t fixed = cp * (shard_fills ? fixed_replicate : shard);
    if (world_size % fixed != 0) {
      const std::string others =
          shard_fills ? absl::StrCat("data_parallel_replicate_degree (", fixed_replicate, ")")
                      : absl::StrCat("data_parallel_shard_degree (", shard, ")");
      problems->push_back(absl::StrCat(
          "parallelism: ",
          shard_fills ? "data_parallel_shard_degree" : "data_parallel_replicate_degree",
          " = -1 cannot fill the world size ", world_size, ": it is not divisible by ", others,
          " × context_parallel_degree (", cp, ") = ", fixed, " (divisors of ", world_size, ": ",
          absl::StrJoin(config_internal::Divisors(world_size), ", "), ")"));
    }
    return;
  }
  const int64_t fixed = cp * shard * replicate;
  const std::string product = absl::StrCat("data_parallel_replicate_degree (", replicate,
                                           ") × data_parallel_shard_degree (", shard,
                                           ") × context_parallel_degree (", cp, ")");
  if (fixed != world_size) {
    problems->push_back(absl::StrCat("parallelism: ", product, " = ", fixed,
                                     " but the world size is ", world_size,
                                     " (set data_parallel_shard_degree or ",
                                     "data_parallel_replicate_degree = -1 to fill the world)"));
  }
}

// The degrees with -1 filled; assumes CheckDegrees found no problem.
MeshDegrees Fill(const ParallelismSection& p, int64_t world_size) {
  MeshDegrees mesh;
  mesh.world = world_size;
  mesh.cp = std::max<int64_t>(1, p.context_parallel_degree);
  mesh.ulysses = UlyssesDegree(p);
  if (p.data_parallel_shard_degree == -1) {
    mesh.replicate = std::max<int64_t>(1, p.data_parallel_replicate_degree);
    mesh.shard = std::max<int64_t>(1, world_size / (mesh.cp * mesh.replicate));
  } else {
    mesh.shard = std::max<int64_t>(1, p.data_parallel_shard_degree);
    mesh.replicate = p.data_parallel_replicate_degree == -1
                         ? std::max<int64_t>(1, world_size / (mesh.cp * mesh.shard))
                         : p.data_parallel_replicate_degree;
  }
  mesh.sharded = mesh.shard > 1 || (p.data_parallel_shard_degree == -1 && mesh.fsdp() > 1);
  return mesh;
}

}  // namespace

absl::StatusOr<MeshDegrees> ResolveMesh(const JobConfig& config, int64_t world_size) {
  std::vector<std::string> problems;
  if (world_size <= 0) {
    problems.push_back(absl::StrCat("world size = ", world_size, ": must be > 0"));
  } else if (world_size > kMaxWorldSize) {
    problems.push_back(absl::StrCat("world size = ", world_size, ": at most ", kMaxWorldSize,
                                    " ranks are allowed"));
  } else if (config.parallelism.data_parallel_replicate_degree <= kMaxWorldSize &&
             config.parallelism.data_parallel_shard_degree <= kMaxWorldSize &&
             config.parallelism.context_parallel_degree <= kMaxWorldSize) {
    CheckDegrees(config, world_size, &problems);
  } else {
    problems.push_back(absl::StrCat("parallelism: every degree must be <= ", kMaxWorldSize));
  }
  config_internal::CheckSeqLenSharding(config, &problems);
  MeshDegrees mesh;
  if (problems.empty()) {
    mesh = Fill(config.parallelism, world_size);
    const int64_t global = config.training.global_batch_size;
    const int64_t per_step = mesh.dp() * config.training.local_batch_size;
    if (global > 0 && per_step > 0 && global % per_step != 0) {
      problems.push_back(absl::StrCat("training.global_batch_size = ", global,
                                      " must be a multiple of the data-parallel degree (",
                                      mesh.dp(), ") × training.local_batch_size (",
                                      config.training.local_batch_size, ") = ", per_step,
                                      " (gradient accumulation runs whole micro-batches)"));
    } else if (global > 0 && per_step > 0) {
      mesh.accumulation = std::max<int64_t>(1, global / per_step);
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        JoinProblems(absl::StrCat("invalid mesh for world size ", world_size), problems));
  }
  return mesh;
}

int64_t RequestedWorldSize(const JobConfig& config) {
  const ParallelismSection& p = config.parallelism;
  return std::max<int64_t>(1, p.data_parallel_replicate_degree) *
         std::max<int64_t>(1, p.data_parallel_shard_degree) *
         std::max<int64_t>(1, p.context_parallel_degree);
}

}  // namespace ringtrain
