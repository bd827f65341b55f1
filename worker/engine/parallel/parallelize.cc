#include "worker/engine/parallel/parallelize.h"

#include <optional>
#include <string>
#include <utility>

#include "common/log.h"
#include "worker/engine/parallel/context_parallel.h"
#include "worker/engine/parallel/gradient_paths.h"

namespace ringtrain {

std::shared_ptr<AttentionPlan> MakeContextParallelPlan(ContextParallelMethod method,
                                                       const ContextParallelArgs& args) {
  switch (method) {
    case ContextParallelMethod::kRing: return MakeRingAttentionPlan(args);
    case ContextParallelMethod::kUlysses:
    case ContextParallelMethod::kHybrid:
      return MakeUlyssesAttentionPlan(args.comm, args.seq_len, args.load_balancer,
                                      args.rotate_method, args.block_kernel);
  }
  return MakeRingAttentionPlan(args);
}

ShardedBatch DataSharding::Shard(const at::Tensor& inputs, const at::Tensor& labels) const {
  ShardedBatch shard = CpShard(inputs, labels, spec_);
  shard.inputs = shard.inputs.to(device_);
  shard.labels = shard.labels.to(device_);
  return shard;
}

namespace {

c10::ScalarType DtypeOf(MixedPrecision precision) {
  return precision == MixedPrecision::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

// The attention plan, chosen once: local attention, or the CP method's plan across the CP group;
// each with the block kernel training.attention_kernel picks for the device.
std::shared_ptr<AttentionPlan> ApplyAttentionPlan(const JobConfig& config, const Mesh& mesh,
                                                  Communicator* comm, c10::Device device,
                                                  TransformerImpl& model) {
  const ParallelismSection& p = config.parallelism;
  std::shared_ptr<AttentionPlan> plan =
      mesh.cp > 1 ? MakeContextParallelPlan(p.context_parallel_method,
                                            ContextParallelArgs{comm, config.training.seq_len,
                                                                p.context_parallel_load_balancer,
                                                                p.context_parallel_rotate_method,
                                                                config.training.attention_kernel})
                  : std::make_shared<LocalAttentionPlan>(
                        MakeBlockKernel(config.training.attention_kernel, device));
  RT_LOG(Info) << "attention: " << plan->Describe();
  model.SetAttentionPlan(plan);
  return plan;
}

void ApplyPrecision(const JobConfig& config, const Communicator* comm, TransformerImpl& model) {
  if (config.training.mixed_precision_param == MixedPrecision::kBFloat16) {
    model.SetComputeDtype(at::kBFloat16);
    RT_LOG(Info) << "mixed precision: bfloat16 compute, float32 master weights and optimizer "
                    "state, float32 softmax statistics and merges";
  }
  if (config.training.mixed_precision_reduce == MixedPrecision::kBFloat16 && comm != nullptr) {
    RT_LOG(Info) << "mixed precision: gradients reduced in bfloat16, widened back to float32";
  }
}

void ApplyActivationCheckpoint(const JobConfig& config, TransformerImpl& model) {
  const ActivationCheckpointSection& ac = config.activation_checkpoint;
  model.SetActivationCheckpoint(ActivationCheckpointEvery(config));
  RT_LOG(Info) << "activation checkpointing: " << ChoiceName(ac.mode)
               << (ac.mode == AcMode::kSelective ? " " + ac.selective_ac_option : "");
}

std::unique_ptr<GradientPath> MakeGradientPath(const JobConfig& config, const Mesh& mesh,
                                               Communicator* comm, TransformerImpl& model) {
  const OptimizerSection& o = config.optimizer;
  const AdamWOptions adam{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
  if (!mesh.sharded) {
    TORCH_CHECK(model.materialized(), "a replicated mesh needs a materialized model");
    return MakeReplicatedGradients(model, comm, DtypeOf(config.training.mixed_precision_reduce),
                                   adam);
  }
  FsdpOptions fsdp;
  fsdp.param_dtype = DtypeOf(config.training.mixed_precision_param);
  fsdp.reduce_dtype = DtypeOf(config.training.mixed_precision_reduce);
  fsdp.reshard = config.parallelism.fsdp_reshard_after_forward;
  // Initial weights to be loaded replace every element: drawing the seed's values first would be
  // a wasted pass over the rank's shards.
  std::optional<uint64_t> seed;
  if (config.checkpoint.initial_load_path.empty()) {
    seed = static_cast<uint64_t>(config.training.seed);
  }
  return MakeShardedGradients(model, *comm, fsdp, adam, seed);
}

}  // namespace

Parallelized Parallelize(const JobConfig& config, const Mesh& mesh, Communicator* comm,
                         c10::Device device, TransformerImpl& model,
                         std::optional<int64_t> eos_id) {
  std::shared_ptr<AttentionPlan> attention = ApplyAttentionPlan(config, mesh, comm, device, model);
  ApplyPrecision(config, comm, model);
  ApplyActivationCheckpoint(config, model);
  model.to(device);  // initialised on the CPU (or not materialized: FSDP makes the shards)
  return Parallelized{
      std::move(attention),
      DataSharding(mesh, config.parallelism.context_parallel_load_balancer, eos_id, device),
      MakeGradientPath(config, mesh, comm, model)};
}

}  // namespace ringtrain
