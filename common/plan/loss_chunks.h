// How many rows the chunked cross-entropy (worker/engine/model/chunked_loss.h) takes at a time —
// shared with the memory plan, which counts its transients. Torch-free, header-only.
#ifndef RINGTRAIN_COMMON_PLAN_LOSS_CHUNKS_H_
#define RINGTRAIN_COMMON_PLAN_LOSS_CHUNKS_H_

#include <algorithm>
#include <cstdint>

namespace ringtrain {

// About 64 MiB of float32 logits a chunk, between 128 and 4096 rows (a GEMM narrower than 128 rows
// runs far below the machine's rate; wider than 4096 gains nothing).
inline int64_t LossChunkRows(int64_t vocab) {
  constexpr int64_t kChunkLogitBytes = int64_t{64} << 20;
  return std::clamp<int64_t>(kChunkLogitBytes / (std::max<int64_t>(1, vocab) * 4), 128, 4096);
}

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_PLAN_LOSS_CHUNKS_H_
