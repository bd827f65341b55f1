// Attention as tiles over the key/value side, merged by log-sum-exp (online softmax), with a
// backward that recomputes probabilities from the saved log-sum-exp: no L × L score matrix is ever
// kept. One (query block, key block) pair is the unit the ring attention of context parallelism
// reuses for each ring step; local attention (cp = 1) is the single-block case.
//
// Dimension letters: B batch, H query heads, Hk key/value heads, G = H / Hk query heads per kv
// head, Lq query length, Lk key length, D head dim, Tq / Tk tile lengths. GQA is handled without
// expanding K/V: kv head j serves query heads j·G … j·G + G − 1 (torchtitan's repeat_kv order), and
// the G query heads of a group are stacked as rows of one matrix.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_TILED_ATTENTION_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_TILED_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/Tensor.h>

#include "worker/engine/kernels/document_mask.h"

namespace ringtrain {

// Which keys a query sees. kCausal: key at position p_k is visible to a query at p_q iff p_k <=
// p_q — and, with a DocumentMask on the query side, p_k is in the query's document as well.
enum class MaskKind { kNone, kCausal };

struct AttentionTiling {
  int64_t q_tile = 256;   // Tq
  int64_t kv_tile = 256;  // Tk
};

// The positions of a block's rows (query side) or columns (key side), shared by the whole batch.
// Kept on the host: tile-level mask decisions (skip / full / partial) are made without tensor ops.
struct BlockPositions {
  std::vector<int64_t> positions;  // (L,)
  // Packed documents (document_mask.h), by global position, for every batch row: on the query
  // side, what hides keys of other documents. Null: plain causal.
  std::shared_ptr<const DocumentMask> documents;
  // Under context parallelism, every CP rank's positions for this batch (the document balancer
  // plans them per batch); null when the layout is the fixed one of the load balancer.
  std::shared_ptr<const std::vector<std::vector<int64_t>>> cp_layout;
  at::Tensor AsTensor() const;  // (L,) int64
  const DocumentMask* mask() const { return documents.get(); }
};

struct BlockOutput {
  at::Tensor out;               // (B, H, Lq, D) float32; zero rows where no key is visible
  at::Tensor lse;               // (B, H, Lq) float32; -inf where no key is visible
  int64_t scores_computed = 0;  // q·k score elements computed (B·H·Tq·Tk summed over tiles)
};

struct BlockGrads {
  at::Tensor dq;  // (B, H, Lq, D)
  at::Tensor dk;  // (B, Hk, Lk, D)
  at::Tensor dv;  // (B, Hk, Lk, D)
};

// Forward of one block. q (B, H, Lq, D), k and v (B, Hk, Lk, D), all float32 and contiguous.
BlockOutput AttentionBlockForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const BlockPositions& q_pos, const BlockPositions& k_pos,
                                  MaskKind mask, double scale, const AttentionTiling& tiling);

// Backward of one block, given the FINAL attention output's statistics (after merging all blocks):
// lse (B, H, Lq) and delta = rowsum(dout · out) (B, H, Lq). Block gradients sum to the full ones.
BlockGrads AttentionBlockBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& dout, const at::Tensor& delta,
                                  const at::Tensor& lse, const BlockPositions& q_pos,
                                  const BlockPositions& k_pos, MaskKind mask, double scale,
                                  const AttentionTiling& tiling);

// Folds `block` into the running (out, lse) pair: out = Σ exp(lse_i − lse)·out_i. Rows where both
// are empty (lse = −inf) stay zero. `out`/`lse` start as zeros / −inf or as a block's own output,
// and must be the caller's alone: on the CPU in float32 they are written in place, elsewhere
// replaced by new tensors.
void MergeBlockInto(at::Tensor& out, at::Tensor& lse, const BlockOutput& block);

// delta = rowsum(dout · out): (B, H, Lq, D) → (B, H, Lq), float32.
at::Tensor AttentionDelta(const at::Tensor& dout, const at::Tensor& out);

// Per-rank attention work, accumulated until Reset (written by the one training thread).
struct AttentionStats {
  double compute_seconds = 0;      // wall time in attention block compute, forward and backward
  double compute_cpu_seconds = 0;  // this thread's CPU time in the same
  int64_t scores_computed = 0;     // q·k score elements computed in forward (B·H·rows·cols)
  std::vector<int64_t> scores_per_step;  // forward, per ring step of the last call
  int64_t blocks_skipped = 0;  // ring blocks (forward and backward) no query here could see
  void Reset() { *this = AttentionStats{}; }
};

// Times one block computation (wall and thread CPU) into `stats` (when not null).
class AttentionComputeTimer {
 public:
  explicit AttentionComputeTimer(AttentionStats* stats);
  explicit AttentionComputeTimer(AttentionStats& stats) : AttentionComputeTimer(&stats) {}
  ~AttentionComputeTimer();

 private:
  AttentionStats* stats_;
  double wall_start_;
  double cpu_start_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_TILED_ATTENTION_H_
