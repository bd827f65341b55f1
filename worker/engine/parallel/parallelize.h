// Parallelize: the one place a job's parallelism is applied to the model (torchtitan's
// parallelize_llama). From the config, the mesh, the communicator and the device it
//   - applies the attention plan: local attention for cp = 1, the context-parallel method's plan
//     (context_parallel.h) for cp > 1, each with training.attention_kernel's block kernel;
//   - applies precision (training.mixed_precision_param) and activation checkpointing;
//   - moves the model to the device;
//   - returns the data sharding (cp_shard) and the gradient path (gradient_path.h: replicated, or
//     sharded with FSDP, which shards the weights the model holds now).
// The model holds its initial weights — or, built on the meta device for a sharded mesh, each
// rank's shards get them here (the seed's values, or zeros when initial_load_path will overwrite
// them); loading (initial_load_path, a checkpoint) comes after, through the gradient path, so
// that each rank reads only what it holds.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_PARALLELIZE_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_PARALLELIZE_H_

#include <cstdint>
#include <memory>
#include <optional>

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include "common/config/job_config.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/cp_shard.h"
#include "worker/engine/parallel/gradient_path.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {

// How a batch is split over the CP group: this rank's part, on the device. With an EOS token
// (model.attn_mask_type = "block_causal") the batch's document mask comes along.
class DataSharding {
 public:
  DataSharding(const Mesh& mesh, LoadBalancer load_balancer, std::optional<int64_t> eos_id,
               c10::Device device)
      : spec_{mesh.cp, mesh.cp_rank(), load_balancer, eos_id}, device_(device) {}
  // inputs, labels (B, L) on the host → (B, L / cp) each on the device, with their positions.
  ShardedBatch Shard(const at::Tensor& inputs, const at::Tensor& labels) const;
  const ShardSpec& spec() const { return spec_; }

 private:
  ShardSpec spec_;
  c10::Device device_;
};

struct Parallelized {
  std::shared_ptr<AttentionPlan> attention;  // also applied to the model
  DataSharding data;
  std::unique_ptr<GradientPath> gradients;
};

// `comm` is null when the world is one rank; it and `model` must outlive the result. `eos_id`:
// the token that ends a document under block-causal attention (training.eos_id, or the dataset's
// when that is -1); nullopt for causal attention. LibTorch and c10d errors are thrown (the
// caller's boundary turns them into a Status).
Parallelized Parallelize(const JobConfig& config, const Mesh& mesh, Communicator* comm,
                         c10::Device device, TransformerImpl& model,
                         std::optional<int64_t> eos_id = std::nullopt);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_PARALLELIZE_H_
