#include "common/plan/fitting_degrees.h"

namespace ringtrain {
namespace {

// The first degree above `from` for which `with(degree)` gives a config whose mesh resolves and
// whose plan fits.
template <typename With>
FittingDegree Smallest(const JobConfig& config, const MeshDegrees& mesh, int64_t from,
                       PlanDevice device, int64_t device_bytes, With with) {
  for (int64_t degree = from + 1; degree <= kMaxSuggestedDegree; ++degree) {
    JobConfig c = config;
    // The resolved degrees, so no -1 fills the world differently.
    c.parallelism.data_parallel_replicate_degree = mesh.replicate;
    c.parallelism.data_parallel_shard_degree = mesh.sharded ? mesh.shard : 1;
    c.parallelism.context_parallel_degree = mesh.cp;
    with(c.parallelism, degree);
    const int64_t world = c.parallelism.data_parallel_replicate_degree *
                          c.parallelism.data_parallel_shard_degree *
                          c.parallelism.context_parallel_degree;
    const absl::StatusOr<MeshDegrees> m = ResolveMesh(c, world);
    if (m.ok() && PlanMemory(c, *m, device).Fits(device_bytes)) return {degree, world};
  }
  return {};
}

}  // namespace

FittingDegrees SmallestFittingDegrees(const JobConfig& config, const MeshDegrees& mesh,
                                      PlanDevice device, int64_t device_bytes) {
  FittingDegrees out;
  out.cp = Smallest(config, mesh, mesh.cp, device, device_bytes,
                    [](ParallelismSection& p, int64_t d) { p.context_parallel_degree = d; });
  out.shard = Smallest(config, mesh, mesh.sharded ? mesh.shard : 1, device, device_bytes,
                       [](ParallelismSection& p, int64_t d) { p.data_parallel_shard_degree = d; });
  return out;
}

}  // namespace ringtrain
