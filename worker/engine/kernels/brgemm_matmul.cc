#include "worker/engine/kernels/brgemm_matmul.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "worker/engine/kernels/fused_cpu_runtime.h"

namespace ringtrain {
namespace {

constexpr int64_t kBlockCols = 256, kChunk = 256;

}  // namespace

void BrgemmMatmul(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  // 128-row blocks; 64 where that leaves a thread idle (a weight gradient of 128 rows).
  const int64_t col_blocks = (n + kBlockCols - 1) / kBlockCols;
  const int64_t kBlockRows = (m + 127) / 128 * col_blocks < at::get_num_threads() ? 64 : 128;
  const int64_t row_blocks = (m + kBlockRows - 1) / kBlockRows;
  // Blocks in row-major order, so a thread's consecutive blocks share their rows of A.
  at::parallel_for(0, row_blocks * col_blocks, 1, [&](int64_t begin, int64_t end) {
    fused_cpu_internal::DenormalsAreZero daz;
    for (int64_t block = begin; block < end; ++block) {
      const int64_t i = block / col_blocks * kBlockRows, j = block % col_blocks * kBlockCols;
      const int64_t rows = std::min(kBlockRows, m - i), cols = std::min(kBlockCols, n - j);
      float* cb = c + i * ldc + j;
      if (k <= 0) {
        if (!accumulate) {
          for (int64_t r = 0; r < rows; ++r) std::fill_n(cb + r * ldc, cols, 0.0f);
        }
        continue;
      }
      for (int64_t p = 0; p < k; p += kChunk) {
        fused_cpu_internal::GemmBrgemm(rows, cols, std::min(kChunk, k - p), a + i * lda + p, lda,
                                       b + p * ldb + j, ldb, accumulate || p > 0, cb, ldc);
      }
    }
  });
}

}  // namespace ringtrain
