// When a config's plan does not fit a device: the smallest context-parallel or shard degree that
// would (`ringctl plan`'s suggestion). Pure arithmetic on the config, like memory_plan.h.
#ifndef RINGTRAIN_COMMON_PLAN_FITTING_DEGREES_H_
#define RINGTRAIN_COMMON_PLAN_FITTING_DEGREES_H_

#include <cstdint>

#include "common/config/job_config.h"
#include "common/config/mesh.h"
#include "common/plan/memory_plan.h"

namespace ringtrain {

// Degrees above this are not tried.
inline constexpr int64_t kMaxSuggestedDegree = 4096;

// A degree that fits, and the world it needs (the rest of the mesh kept); 0 and 0 when none does.
struct FittingDegree {
  int64_t degree = 0;
  int64_t world = 0;
};

struct FittingDegrees {
  FittingDegree cp;     // parallelism.context_parallel_degree: the sequence split further
  FittingDegree shard;  // parallelism.data_parallel_shard_degree: the weights and state (FSDP)
};

// For `config` on `mesh` (ResolveMesh's): the smallest context_parallel_degree above mesh.cp, and
// the smallest data_parallel_shard_degree above mesh.shard, whose mesh ResolveMesh accepts (seq_len
// divisible, heads split, the global batch a multiple) and whose plan fits `device_bytes`; each
// with the other degrees as they are, so the world grows with it.
FittingDegrees SmallestFittingDegrees(const JobConfig& config, const MeshDegrees& mesh,
                                      PlanDevice device, int64_t device_bytes);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_PLAN_FITTING_DEGREES_H_
