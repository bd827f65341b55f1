// How many rows the chunked cross-entropy (worker/engine/model/chunked_loss.h) takes at a time —
// shared with the memory plan, which counts its transients. Torch-free, header-only.
#ifndef RINGTRAIN_COMMON_PLAN_LOSS_CHUNKS_H_
#define RINGTRAIN_COMMON_PLAN_LOSS_CHUNKS_H_

#include <algorithm>
#include <cstdint>

namespace ringtrain {

// The rows of a chunk: about 64 MiB of float32 logits on a CPU (a chunk's work stays near the
// caches), between 128 and 4096 rows (a GEMM narrower than 128 rows runs far below the machine's
// rate; wider than 4096 gains nothing); on a GPU about 512 MiB, up to 8192 rows, since each chunk
// also reads and writes the whole float32 dW (V, C) — at 128 rows a chunk those updates, not the
// matmuls, would set the loss's time.
inline int64_t LossChunkRows(int64_t vocab, bool on_gpu = false) {
  const int64_t chunk_logit_bytes = int64_t{on_gpu ? 512 : 64} << 20;
  return std::clamp<int64_t>(chunk_logit_bytes / (std::max<int64_t>(1, vocab) * 4), 128,
                             on_gpu ? 8192 : 4096);
}

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_PLAN_LOSS_CHUNKS_H_
