// Private to the fused CPU attention kernel (fused_cpu_attention.h): what it runs on — BLAS GEMMs,
// per-thread buffers, and the work items of a plan (fused_cpu_plan.h) spread over LibTorch's
// intra-op threads with flush-to-zero set and MKL kept sequential on each.
//
// A file that instantiates ForEachItem must be compiled with -fopenmp
// (worker/engine/CMakeLists.txt): without it at::parallel_for is a serial loop.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_RUNTIME_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_RUNTIME_H_

#include <cstdint>
#include <vector>

#include <ATen/Parallel.h>

#include "worker/engine/kernels/fused_cpu_attention.h"
#include "worker/engine/kernels/fused_cpu_plan.h"

namespace ringtrain {
namespace fused_cpu_internal {

// Row-major C (m×n, leading dim ldc) = op(A) · op(B) + beta · C, with op(A) m×k and op(B) k×n;
// `trans_a` means A is stored k×m (row-major, leading dim lda). BLAS sgemm (the MKL inside
// LibTorch).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Row-major C (m×n, leading dim ldc) = A · B, plus C when `accumulate`; A m×k (lda), B k×n (ldb),
// neither transposed: oneDNN's BRGeMM micro-kernel inside LibTorch (F32Gemm::kBrgemm, cpu_isa.h),
// one thread, AVX-512.
void GemmBrgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, bool accumulate, float* c, int64_t ldc);

// The same with bfloat16 A and B (their 16 bits) and float32 C = alpha · op(A) · op(B) + beta · C,
// accumulated in float32: MKL's gemm_bf16bf16f32, on AMX tiles or AVX512-BF16 where the CPU has
// them.
void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

// One MKL thread for the GEMMs of this thread while alive: each intra-op thread computes its own
// tiles, and LibTorch leaves MKL free to start a team of its own inside ours (measured: 2 threads
// ran slower than 1 at head dim 32).
class SequentialBlas {
 public:
  SequentialBlas();
  ~SequentialBlas();
  SequentialBlas(const SequentialBlas&) = delete;
  SequentialBlas& operator=(const SequentialBlas&) = delete;

 private:
  int saved_;
};

// Flush-to-zero and denormals-are-zero on this thread while alive; the old mode after. No-op off
// x86.
class DenormalsAreZero {
 public:
  DenormalsAreZero();
  ~DenormalsAreZero();
  DenormalsAreZero(const DenormalsAreZero&) = delete;
  DenormalsAreZero& operator=(const DenormalsAreZero&) = delete;

 private:
  unsigned saved_ = 0;
};

// What a thread's Scratch holds beside the float32 tiles: the bfloat16 operands of the native
// bfloat16 GEMMs, or the transposed row blocks of the BRGeMM float32 backward.
struct ScratchKind {
  bool bf16 = false;
  bool transposed = false;
};

// Per-thread scratch, sized for the largest tiles: `rows` = G·Tq, `cols` = Tk, `dim` = D.
struct Scratch {
  Scratch(int64_t rows, int64_t cols, int64_t dim, ScratchKind kind)
      : q(size_t(rows * dim)),
        s(size_t(rows * cols)),
        p2(size_t(rows * cols)),
        a(size_t(rows * dim)),
        b(size_t(rows * dim)),
        row_max(size_t(rows)),
        row_sum(size_t(rows)),
        lse(size_t(rows)),
        delta(size_t(rows)),
        q16(kind.bf16 ? size_t(rows * dim) : 0),
        a16(kind.bf16 ? size_t(rows * dim) : 0),
        p16(kind.bf16 ? size_t(rows * cols) : 0),
        q_t(kind.transposed ? size_t(rows * dim) : 0),
        a_t(kind.transposed ? size_t(rows * dim) : 0) {}
  std::vector<float> q, s, p2, a, b;
  std::vector<float> row_max, row_sum;  // forward: the online softmax's running max and sum
  std::vector<float> lse, delta;        // backward: the final statistics of the rows
  // bfloat16: Q rows, dO rows, and P (forward and backward) or dS rounded for their GEMMs.
  std::vector<uint16_t> q16, a16, p16;
  // BRGeMM float32 backward: q and a transposed (D × rows), the A operands of dKᵀ and dVᵀ.
  std::vector<float> q_t, a_t;
};

// One work item: batch b, kv head, query tile (item i = ((b · Hk) + kv head) · tiles + tile).
struct Item {
  int64_t b, kv_head, q_tile;
};

// How many parts (threads) `items` work items are cut into: one per intra-op thread, at most one
// per item.
int64_t PartsFor(int64_t items);

// Calls fn(part, item, scratch) for every item, the items of each part in order on one intra-op
// thread, with flush-to-zero set and MKL sequential there, and one Scratch of `kind` per thread.
// `bounds` are SplitByCost's.
template <class Fn>
void ForEachItem(const Plan& plan, const Shape& s, const std::vector<int64_t>& bounds,
                 int64_t parts, const FusedCpuTiling& tiling, ScratchKind kind, const Fn& fn) {
  const int64_t tiles = plan.q_tile_count();
  at::parallel_for(0, parts, 1, [&](int64_t part_begin, int64_t part_end) {
    DenormalsAreZero daz;
    SequentialBlas sequential;
    Scratch scratch(s.group * tiling.q_tile, tiling.kv_tile, s.dim, kind);
    for (int64_t part = part_begin; part < part_end; ++part) {
      for (int64_t i = bounds[size_t(part)]; i < bounds[size_t(part + 1)]; ++i) {
        fn(part, Item{i / (tiles * s.kv_heads), (i / tiles) % s.kv_heads, i % tiles}, scratch);
      }
    }
  });
}

}  // namespace fused_cpu_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_RUNTIME_H_
