// Per-rank memory of a training step, by arithmetic on the job config: no LibTorch, so ringctl can
// say whether a config fits a device before anything runs (`ringctl plan`).
//
// Dimension letters: B local batch, Lc = seq_len / cp the local sequence length, C model dim,
// Ck = n_kv_heads · head_dim, Hf the FFN hidden size, H query heads, V vocabulary, P parameters,
// F = shard × cp the FSDP group (1 when the mesh is not sharded), e the compute dtype's bytes (4
// float32, 2 bfloat16).
//
// What is counted is what the trainer's tensors hold (the CPU ranks' counting allocator and the
// CUDA caching allocator's allocated bytes both measure it): float32 master weights, gradients and
// AdamW state (a 1/F shard of each under FSDP); the weights' compute-dtype copies autograd keeps
// for the backward (the bfloat16 casts, or FSDP's gathered units); what the forward saves for the
// backward under the activation-checkpoint mode; the ring attention's K/V blocks and dK/dV
// accumulators in flight, and Ulysses' all-to-all buffers; and the transients of the step (the
// chunked loss's logits and their gradient, a chunk of rows at a time, one block's backward, the
// gradient all-reduce's flat buckets, FSDP's reduce-scatter). The peak (`total`) is the largest of
// the step's phases, each the sum of what is live then.
#ifndef RINGTRAIN_COMMON_PLAN_MEMORY_PLAN_H_
#define RINGTRAIN_COMMON_PLAN_MEMORY_PLAN_H_

#include <cstdint>
#include <string>

#include "common/config/job_config.h"
#include "common/config/mesh.h"

namespace ringtrain {

struct MemoryPlan {
  MeshDegrees mesh;
  int64_t fsdp = 1;             // F: shard × cp when the mesh is sharded (FSDP), else 1
  int64_t parameter_count = 0;  // P, the whole model
  int64_t local_seq_len = 0;    // Lc
  int64_t ac_every = 0;         // ActivationCheckpointEvery

  // Bytes per rank, each at its own largest.
  int64_t parameters = 0;  // float32 master weights (their 1/F shard) and the RoPE tables
  int64_t gradients = 0;   // float32 gradients (their 1/F shard)
  // FSDP with gradient accumulation and parallelism.fsdp_gradient_sync = "step": every unit's
  // unsharded float32 gradient, held from the first micro-batch's backward to the last's.
  int64_t held_gradients = 0;
  int64_t optimizer_state = 0;      // AdamW exp_avg and exp_avg_sq, float32
  int64_t gathered_parameters = 0;  // bf16 weight casts kept for the backward, or FSDP's full units
  int64_t activations = 0;          // saved by the forward for the backward, log-softmax included
  int64_t ring_buffers = 0;         // a ring of > 1: K/V blocks and dK/dV accumulators in flight
  // ulysses or hybrid: the all-to-alls' send, receive and reordered buffers of one attention call
  // (its backward's, the larger): Q, K/V (and output, its gradient, dQ, dK/dV) of the group's
  // whole sequence for this rank's heads.
  int64_t ulysses_buffers = 0;
  int64_t largest_transient = 0;       // the largest short-lived working set of the step
  std::string largest_transient_what;  // which one, in words
  std::string peak_phase;              // the phase the peak is in, in words
  int64_t total = 0;                   // the step's peak: the largest phase

  // Bytes one rank's context-parallel attention sends in a step (every layer, forward, backward
  // and any recompute, every micro-batch): the ring's K/V blocks and dK/dV, the Ulysses
  // all-to-alls. Plain causal attention; a document mask makes the ring send less.
  int64_t attention_bytes_per_step = 0;

  // A checkpoint save (worker/engine/checkpoint), per writing rank — every rank of a replicated
  // mesh, the first replica's shard × cp ranks under FSDP: its part of the parameters and both
  // AdamW moments (float32), written to its own file; and the host memory a save adds — async
  // staging buffers (or a GPU's sync save) hold a copy of that part, reused between saves; a CPU
  // sync save writes from the tensors themselves. No rank gathers the whole model.
  int64_t checkpoint_writers = 0;
  int64_t checkpoint_bytes_written = 0;
  int64_t checkpoint_host_memory = 0;

  bool Fits(int64_t device_bytes) const { return total <= device_bytes; }
};

// Where the ranks run: CUDA ranks run the ATen chains for RMSNorm, RoPE and SwiGLU, CPU ranks the
// fused blocks (worker/engine/model/fused_blocks.h), which save less for the backward.
enum class PlanDevice { kCuda, kCpu };

// The plan of `config` on the mesh ResolveMesh(config, world) gave.
MemoryPlan PlanMemory(const JobConfig& config, const MeshDegrees& mesh,
                      PlanDevice device = PlanDevice::kCuda);

// The largest training.seq_len (a multiple of 2·cp with the headtail load balancer, of cp without)
// whose plan fits `device_bytes`, with model.max_seq_len raised to it; 0 when none does.
// `mesh` is ResolveMesh(config, world)'s.
int64_t LargestFittingSeqLen(const JobConfig& config, const MeshDegrees& mesh, PlanDevice device,
                             int64_t device_bytes);

// Parameters of the Llama 3 model the config describes (torchtitan's shapes; the same count as
// worker/engine/model/model_args.h's ParameterCount).
int64_t PlannedParameterCount(const ModelSection& model);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_PLAN_MEMORY_PLAN_H_
