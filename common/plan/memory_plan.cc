#include "common/plan/memory_plan.h"

#include <algorithm>
#include <vector>

#include "common/config/model_shape.h"
#include "common/plan/loss_chunks.h"

namespace ringtrain {
namespace {

// C the model width, Cq = H·D the queries' (and the attention output's) width, Ck = Hk·D.
struct Shape {
  int64_t C, Cq, Ck, Hf, H, V, n_layers, head_dim;
  bool tied;
};

Shape ShapeOf(const ModelSection& m) {
  const int64_t head_dim = HeadDim(m);
  return {m.dim,
          m.n_heads * head_dim,
          m.n_kv_heads * head_dim,
          FfnHiddenDim(m),
          m.n_heads,
          m.vocab_size,
          m.n_layers,
          head_dim,
          m.tie_word_embeddings};
}

// Elements of each FSDP unit, in forward order: the embedding, the blocks, the final norm + output
// (no output matrix when it is the embedding's).
std::vector<int64_t> UnitSizes(const Shape& s) {
  const int64_t attention = s.Cq * s.C * 2 + s.Ck * s.C * 2;   // wq, wo, wk, wv
  const int64_t block = attention + 3 * s.Hf * s.C + 2 * s.C;  // w1 w2 w3, two norms
  std::vector<int64_t> units = {s.V * s.C};
  for (int64_t i = 0; i < s.n_layers; ++i) units.push_back(block);
  units.push_back(s.C + (s.tied ? 0 : s.V * s.C));
  return units;
}

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

int64_t DtypeBytes(MixedPrecision p) { return p == MixedPrecision::kBFloat16 ? 2 : 4; }

// Is block `i` (0-based) recomputed in its backward? torchtitan's selective "N" checkpoints the
// blocks whose index is a multiple of N; full checkpoints all; op checkpoints all but keeps the
// attention outputs.
bool Checkpointed(int64_t ac_every, int64_t i) {
  if (ac_every == 0) return false;
  if (ac_every < 0) return true;
  return i % ac_every == 0;
}

struct Live {
  int64_t bytes;
  const char* what;
};

}  // namespace

int64_t PlannedParameterCount(const ModelSection& model) {
  int64_t total = 0;
  for (int64_t u : UnitSizes(ShapeOf(model))) total += u;
  return total;
}

MemoryPlan PlanMemory(const JobConfig& config, const MeshDegrees& mesh, PlanDevice device) {
  MemoryPlan plan;
  plan.mesh = mesh;
  const Shape s = ShapeOf(config.model);
  const std::vector<int64_t> units = UnitSizes(s);
  const int64_t F = plan.mesh.sharded ? plan.mesh.fsdp() : 1;
  plan.fsdp = F;
  const int64_t P = PlannedParameterCount(config.model);
  plan.parameter_count = P;
  plan.ac_every = ActivationCheckpointEvery(config);
  const int64_t B = config.training.local_batch_size;
  const int64_t Lc = config.training.seq_len / plan.mesh.cp;
  plan.local_seq_len = Lc;
  const int64_t e = DtypeBytes(config.training.mixed_precision_param);
  const int64_t reduce = DtypeBytes(config.training.mixed_precision_reduce);
  const bool bf16 = e == 2;
  const int64_t BL = B * Lc;

  // ---- weights, gradients, optimizer state ----
  int64_t held = 0;  // elements of this rank's master weights
  for (int64_t u : units) held += F > 1 ? RoundUp(u, F) / F : u;
  const int64_t rope = 2 * 4 * config.model.max_seq_len * (s.head_dim / 2);  // cos, sin float32
  plan.parameters = 4 * held + rope;
  plan.gradients = 4 * held;
  plan.optimizer_state = 8 * held;
  // Sharded: each of the F ranks writes its shards' real elements; replicated: each of the world's
  // ranks an equal run of every tensor.
  plan.checkpoint_writers = F > 1 ? F : plan.mesh.replicate * plan.mesh.shard * plan.mesh.cp;
  plan.checkpoint_bytes_written =
      12 * ((P + plan.checkpoint_writers - 1) / plan.checkpoint_writers);
  plan.checkpoint_host_memory = plan.checkpoint_bytes_written;
  const int64_t block_params = units[1 % units.size()];
  const int64_t largest_unit = *std::max_element(units.begin(), units.end());
  int64_t gathered_fwd = 0;  // compute-dtype weights live in the forward and the backward
  if (F > 1) {
    // Two units at a time (current + prefetched), or every unit with reshard never.
    int64_t pair = 0;
    for (size_t i = 0; i + 1 < units.size(); ++i) pair = std::max(pair, units[i] + units[i + 1]);
    int64_t all = 0;
    for (int64_t u : units) all += u;
    const bool never = config.parallelism.fsdp_reshard_after_forward == ReshardAfterForward::kNever;
    gathered_fwd = e * (never ? all : pair);
  } else if (bf16) {
    // Each projection's and norm's bf16 cast is saved by autograd until its backward; the
    // embedding is looked up in float32 and then cast.
    gathered_fwd = e * (P - units.front());
  }
  plan.gathered_parameters = gathered_fwd;

  // ---- activations ----
  // What one block's forward saves for its backward, its output (the next block's input) included:
  // two RMSNorms (float32 normalised rows and the normed output: 8·BLC each, whatever e is), RoPE's
  // float32 q and k, then in e: the attention's q and stacked k/v, its output twice (the kernel's,
  // and the (B, Lc, Cq) copy wo reads), the residual h, the block output, and the FFN's w1/w3
  // outputs, silu and the product; the log-sum-exp in float32.
  // On CPU ranks the fused blocks save less: each RMSNorm its normed output (in e) and a float32
  // statistic per row, RoPE nothing (its output is the attention's q and k), SwiGLU its two inputs
  // and the product w2 reads.
  const bool fused = device == PlanDevice::kCpu;
  const int64_t norms = fused ? 2 * (e * BL * s.C + 4 * BL) : 16 * BL * s.C;
  const int64_t rope_saved = fused ? 0 : 4 * BL * (s.Cq + s.Ck);
  const int64_t ffn = (fused ? 3 : 4) * e * BL * s.Hf;
  const int64_t a_block = norms + rope_saved + e * (3 * BL * s.Cq + 2 * BL * s.C + 2 * BL * s.Ck) +
                          ffn + 4 * B * s.H * Lc;
  const int64_t block_input = e * BL * s.C;
  const int64_t op_kept = e * BL * s.Cq + 4 * B * s.H * Lc;  // attention output + lse
  int64_t blocks_kept = 0;
  for (int64_t i = 0; i < s.n_layers; ++i) {
    if (!Checkpointed(plan.ac_every, i)) {
      blocks_kept += a_block;
    } else {
      blocks_kept += block_input + (plan.ac_every < 0 ? op_kept : 0);
    }
  }
  const bool recomputes = plan.ac_every != 0;
  const int64_t recompute = recomputes ? a_block : 0;  // one block's, during its backward
  const int64_t embedding_out = e * BL * s.C;
  const int64_t final_norm = fused ? e * BL * s.C + 4 * BL : 8 * BL * s.C;
  // The chunked loss (loss_chunks.h): the logits exist a chunk of R rows at a time (a chunk's
  // float32 logits and logsumexp's exp of them at once), and the forward makes the gradients while
  // they do: dh (B, Lc, C) in e and the output projection's float32 dW, held into the backward,
  // which hands them on.
  const int64_t R = std::min(BL, LossChunkRows(s.V, device == PlanDevice::kCuda));
  const int64_t loss_fwd = 2 * 4 * R * s.V + 4 * s.V * s.C;
  const int64_t loss_dh = e * BL * s.C;
  const int64_t saved_blocks = embedding_out + blocks_kept;
  const int64_t saved_at_loss = saved_blocks + final_norm + loss_dh;
  plan.activations = std::max(saved_at_loss, saved_blocks + recompute);

  // ---- context-parallel attention: the Ulysses all-to-alls, then the ring ----
  // With Ulysses groups of u ranks a rank attends over the group's u·Lc positions for H/u query
  // heads, and Ck/u of the K/V width (or one head's, replicated, when u exceeds the K/V heads);
  // the ring then runs across cp/u groups with blocks of that size. Ring alone is u = 1.
  const int64_t u = std::max<int64_t>(1, plan.mesh.ulysses);
  const int64_t ring = plan.mesh.cp / u;
  const int64_t kv_heads = s.head_dim > 0 ? s.Ck / s.head_dim : 1;
  const int64_t Cku = u == 1 || kv_heads % u == 0 ? s.Ck / u : s.head_dim;
  const int64_t kv_block = e * 2 * B * Cku * u * Lc;  // (2, B, Hk/u, u·Lc, D)
  if (ring > 1) {
    // Backward: the current and the next K/V block, the dK/dV accumulator arriving and the one
    // leaving.
    plan.ring_buffers = 4 * kv_block;
  }
  int64_t ulysses_fwd = 0, ulysses_bwd = 0;  // the all-to-alls' buffers, live during attention
  int64_t attention_fwd_sent = 0, attention_bwd_sent = 0;  // per layer
  if (u > 1) {
    // Each tensor three times: sent, received, and put in ascending positions (or back).
    const int64_t qkv = e * BL * (s.Cq + 2 * u * Cku);  // Q and K/V as sent, replicas included
    const int64_t out_back = e * BL * s.Cq + 4 * B * s.H * Lc;  // the output and log-sum-exp
    const int64_t bwd_in = qkv + 2 * e * BL * s.Cq + 4 * B * s.H * Lc;  // + output, its gradient
    const int64_t grads_back = 4 * BL * (s.Cq + 2 * u * Cku);           // dQ, dK/dV in float32
    ulysses_fwd = 3 * qkv + 3 * out_back;
    ulysses_bwd = 3 * bwd_in + 2 * grads_back;
    plan.ulysses_buffers = std::max(ulysses_fwd, ulysses_bwd);
    // A rank keeps its own row of each all-to-all.
    attention_fwd_sent += (qkv + out_back) / u * (u - 1);
    attention_bwd_sent += (bwd_in + grads_back) / u * (u - 1);
  }
  if (ring > 1) {
    // Every block visits every other rank of the ring (the causal upper bound: blocks a mask hides
    // are not sent), and in backward each block's float32 dK/dV goes home as well: from each of
    // the other ranks (allgather), or as one accumulator round the whole ring (alltoall).
    const bool alltoall =
        config.parallelism.context_parallel_rotate_method == RotateMethod::kAllToAll;
    attention_fwd_sent += (ring - 1) * kv_block;
    attention_bwd_sent += (ring - 1) * kv_block + (alltoall ? ring : ring - 1) * (kv_block / e * 4);
  }
  // Full or per-N checkpointing recomputes a block's forward, attention and its transfers too;
  // op mode keeps the attention output and does not.
  int64_t recomputed = 0;
  for (int64_t i = 0; i < s.n_layers; ++i)
    recomputed += plan.ac_every > 0 && Checkpointed(plan.ac_every, i);
  plan.attention_bytes_per_step =
      mesh.accumulation *
      (s.n_layers * (attention_fwd_sent + attention_bwd_sent) + recomputed * attention_fwd_sent);

  // ---- transients ----
  // One block's backward: the FFN's (grad of the product, then of silu's input and output), or
  // the attention's (dq, dk, dv, the stacked dK/dV, the contiguous dout; under bf16 the widened
  // out and dout for the softmax statistics).
  const int64_t ffn_bwd = e * (3 * BL * s.Hf + BL * s.C);
  const int64_t attn_bwd = e * (3 * BL * s.Cq + 4 * BL * s.Ck) + (bf16 ? 8 * BL * s.Cq : 0) +
                           4 * B * s.H * Lc + (plan.mesh.cp > 1 ? 4 * BL * s.Cq : 0);
  const int64_t block_bwd = std::max(ffn_bwd, attn_bwd);
  // The attention forward of one block: the float32 merged output and the merge's temporaries
  // under ring attention, the output and the log-sum-exp locally.
  const int64_t attn_fwd = plan.mesh.cp > 1
                               ? 4 * 4 * BL * s.Cq + e * BL * s.Cq + 8 * B * s.H * Lc + 2 * kv_block
                               : e * BL * s.Cq + 4 * B * s.H * Lc;
  // FSDP's backward of one unit: its full gradient in the param dtype and the reduce-scatter's
  // input and output in the reduce dtype.
  const int64_t fsdp_rs =
      F > 1 ? largest_unit * e + largest_unit * reduce + RoundUp(largest_unit, F) / F * reduce : 0;
  // Replicated weights, world > 1: the all-reduce's flat buckets, every bucket at once.
  const int64_t flats = F == 1 && mesh.world > 1 ? plan.gradients : 0;

  // ---- the step's phases ----
  const int64_t fixed = plan.parameters + plan.optimizer_state;
  // Gradients (or their shards) are set to none at the step's start and come back unit by unit in
  // the first micro-batch's backward; with gradient accumulation the later micro-batches' forward
  // and backward run with all of them.
  const bool accumulates = mesh.accumulation > 1;
  if (F > 1 && accumulates && config.parallelism.fsdp_gradient_sync == FsdpGradientSync::kStep) {
    int64_t padded = 0;
    for (int64_t u : units) padded += RoundUp(u, F);
    plan.held_gradients = 4 * padded;
  }
  const int64_t grads_fwd = accumulates ? plan.gradients + plan.held_gradients : 0;
  // The first block of the backward: the output projection's and the last block's gradients (their
  // shards under FSDP, whose full-size gradient is in fsdp_rs).
  const int64_t grads_first_block =
      F > 1 ? 4 * (RoundUp(units.back(), F) + RoundUp(block_params, F)) / F
            : 4 * (units.back() + block_params) + (bf16 ? e * block_params : 0);
  const std::vector<Live> phases = {
      {fixed + grads_fwd + gathered_fwd + saved_blocks + attn_fwd + plan.ring_buffers / 2 +
           ulysses_fwd,
       "forward (last block's attention)"},
      {fixed + grads_fwd + gathered_fwd + saved_at_loss + loss_fwd, "forward (loss)"},
      {fixed + std::max(grads_fwd, grads_first_block) + gathered_fwd + saved_blocks + recompute +
           std::max(block_bwd, fsdp_rs) + plan.ring_buffers + ulysses_bwd,
       "backward (last block)"},
      {fixed + plan.gradients + flats, "gradient all-reduce"},
  };
  const Live* peak = &phases[0];
  for (const Live& p : phases) {
    if (p.bytes > peak->bytes) peak = &p;
  }
  plan.total = peak->bytes;
  plan.peak_phase = peak->what;

  const std::vector<Live> transients = {
      {loss_fwd, "loss (a chunk's float32 logits twice, and the head's dW)"},
      {block_bwd, "one block's backward"},
      {attn_fwd, plan.mesh.cp > 1 ? "ring attention merge" : "attention forward"},
      {plan.ulysses_buffers,
       "Ulysses all-to-all buffers (the group's sequence, this rank's heads)"},
      {fsdp_rs, "FSDP unit gradient and reduce-scatter"},
      {flats, "gradient all-reduce buckets"},
  };
  const Live* largest = &transients[0];
  for (const Live& t : transients) {
    if (t.bytes > largest->bytes) largest = &t;
  }
  plan.largest_transient = largest->bytes;
  plan.largest_transient_what = largest->what;
  return plan;
}

int64_t LargestFittingSeqLen(const JobConfig& config, const MeshDegrees& mesh, PlanDevice device,
                             int64_t device_bytes) {
  const int64_t step = config.parallelism.context_parallel_load_balancer == LoadBalancer::kHeadTail
                           ? 2 * mesh.cp
                           : mesh.cp;
  auto fits = [&](int64_t multiples) {
    JobConfig c = config;
    c.training.seq_len = multiples * step;
    c.model.max_seq_len = std::max(c.model.max_seq_len, c.training.seq_len);
    return PlanMemory(c, mesh, device).Fits(device_bytes);
  };
  if (!fits(1)) return 0;
  // Memory grows with the length: double until it does not fit, then bisect.
  int64_t lo = 1, hi = 2;
  while (fits(hi)) {
    lo = hi;
    if (hi > (int64_t{1} << 40) / step) return lo * step;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * step;
}

}  // namespace ringtrain
