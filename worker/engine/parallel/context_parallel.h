// Context-parallel methods: how the attention of a sequence sharded over the CP group is
// computed. One ContextParallelMethod value (parallelism.context_parallel_method), one file in
// parallel/ that makes its attention plan, and one case in MakeContextParallelPlan
// (parallelize.cc). Today: ring (ring_attention.h), and ulysses and hybrid (ulysses_attention.h:
// the communicator's mesh says how many cp ranks a Ulysses group has).
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_CONTEXT_PARALLEL_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_CONTEXT_PARALLEL_H_

#include <cstdint>
#include <memory>

#include "common/config/choices.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/ulysses_attention.h"

namespace ringtrain {

// What every method's plan is built from.
struct ContextParallelArgs {
  Communicator* comm = nullptr;  // must outlive the plan; its mesh's cp > 1
  int64_t seq_len = 0;           // the global length L
  LoadBalancer load_balancer = LoadBalancer::kHeadTail;
  RotateMethod rotate_method = RotateMethod::kAllToAll;
  AttentionKernelKind block_kernel = AttentionKernelKind::kAuto;
};

// ring_attention.cc.
std::shared_ptr<AttentionPlan> MakeRingAttentionPlan(const ContextParallelArgs& args);
// ulysses_attention.cc (declared in ulysses_attention.h): ulysses and hybrid.

// The registry: `method`'s plan.
std::shared_ptr<AttentionPlan> MakeContextParallelPlan(ContextParallelMethod method,
                                                       const ContextParallelArgs& args);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_CONTEXT_PARALLEL_H_
