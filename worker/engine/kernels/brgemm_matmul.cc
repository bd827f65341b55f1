#include "worker/engine/kernels/brgemm_matmul.h"

#include <ATen/Parallel.h>

#if defined(__x86_64__)
// GCC 12's unmasked AVX-512 intrinsics start from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports inside the header wherever they are inlined: a false positive,
// silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include <algorithm>
#include <vector>

#include "worker/engine/kernels/fused_cpu_runtime.h"

namespace ringtrain {
namespace {

constexpr int64_t kBlockCols = 256, kChunk = 256;

#if defined(__x86_64__)
// dst (cols × rows, leading dim ldd) = src (rows × cols, lds)ᵀ: 16 × 16 tiles in AVX-512 registers
// (two unpack stages within 128-bit lanes, two shuffle stages across them), the ragged edges one
// element at a time. (BRGeMM, and so its callers, need AVX-512.)
__attribute__((target("avx512f"))) void TransposeBlock(const float* src, int64_t lds, int64_t rows,
                                                       int64_t cols, float* dst, int64_t ldd) {
  const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
  for (int64_t r0 = 0; r0 < full_rows; r0 += 16) {
    for (int64_t c0 = 0; c0 < full_cols; c0 += 16) {
      __m512 r[16], t[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + (r0 + i) * lds + c0);
      for (int i = 0; i < 16; i += 2) {  // pairs of rows, 32-bit interleave
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      // Fours of rows, 64-bit interleave: r[4g + j] then holds rows 4g..4g+3 of column 4L + j in
      // its 128-bit lane L.
      for (int i = 0; i < 16; i += 4) {
        const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
      }
      // Column 4L + j is lane L of r[j], r[4 + j], r[8 + j] and r[12 + j], side by side.
      for (int j = 0; j < 4; ++j) {
        const __m512 lo01 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44);
        const __m512 hi01 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
        const __m512 lo23 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
        const __m512 hi23 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
        float* out = dst + (c0 + j) * ldd + r0;
        _mm512_storeu_ps(out, _mm512_shuffle_f32x4(lo01, lo23, 0x88));
        _mm512_storeu_ps(out + 4 * ldd, _mm512_shuffle_f32x4(lo01, lo23, 0xDD));
        _mm512_storeu_ps(out + 8 * ldd, _mm512_shuffle_f32x4(hi01, hi23, 0x88));
        _mm512_storeu_ps(out + 12 * ldd, _mm512_shuffle_f32x4(hi01, hi23, 0xDD));
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c_begin = r < full_rows ? full_cols : 0;
    for (int64_t c = c_begin; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}
#else
void TransposeBlock(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst,
                    int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}
#endif

// C's blocks of 128 rows (64 where 128 would leave a thread idle) × 256 columns over the intra-op
// threads, each summed over K in chunks of 256, in order, by one thread. `a_chunk(i, rows, p, kc,
// scratch)` gives rows [i, i + rows) × columns [p, p + kc) of A and its leading dim.
template <typename AChunk>
void Blocked(int64_t m, int64_t n, int64_t k, const float* b, int64_t ldb, float* c, int64_t ldc,
             bool accumulate, const AChunk& a_chunk) {
  if (m <= 0 || n <= 0) return;
  const int64_t col_blocks = (n + kBlockCols - 1) / kBlockCols;
  const int64_t block_rows = (m + 127) / 128 * col_blocks < at::get_num_threads() ? 64 : 128;
  const int64_t row_blocks = (m + block_rows - 1) / block_rows;
  // Blocks in row-major order, so a thread's consecutive blocks share their rows of A.
  at::parallel_for(0, row_blocks * col_blocks, 1, [&](int64_t begin, int64_t end) {
    fused_cpu_internal::DenormalsAreZero daz;
    std::vector<float> scratch;
    for (int64_t block = begin; block < end; ++block) {
      const int64_t i = block / col_blocks * block_rows, j = block % col_blocks * kBlockCols;
      const int64_t rows = std::min(block_rows, m - i), cols = std::min(kBlockCols, n - j);
      float* cb = c + i * ldc + j;
      if (k <= 0) {
        if (!accumulate) {
          for (int64_t r = 0; r < rows; ++r) std::fill_n(cb + r * ldc, cols, 0.0f);
        }
        continue;
      }
      for (int64_t p = 0; p < k; p += kChunk) {
        const int64_t kc = std::min(kChunk, k - p);
        const auto [a, lda] = a_chunk(i, rows, p, kc, scratch);
        fused_cpu_internal::GemmBrgemm(rows, cols, kc, a, lda, b + p * ldb + j, ldb,
                                       accumulate || p > 0, cb, ldc);
      }
    }
  });
}

}  // namespace

void BrgemmMatmul(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  Blocked(m, n, k, b, ldb, c, ldc, accumulate,
          [&](int64_t i, int64_t, int64_t p, int64_t, std::vector<float>&) {
            return std::pair<const float*, int64_t>(a + i * lda + p, lda);
          });
}

void BrgemmMatmulTransposedA(int64_t m, int64_t n, int64_t k, const float* a_t, int64_t lda_t,
                             const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  Blocked(m, n, k, b, ldb, c, ldc, accumulate,
          [&](int64_t i, int64_t rows, int64_t p, int64_t kc, std::vector<float>& scratch) {
            scratch.resize(size_t(rows * kc));
            TransposeBlock(a_t + p * lda_t + i, lda_t, kc, rows, scratch.data(), kc);
            return std::pair<const float*, int64_t>(scratch.data(), kc);
          });
}

}  // namespace ringtrain
