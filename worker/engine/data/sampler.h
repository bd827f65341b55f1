// Which windows of the dataset each step reads. Torch-free.
//
// L = seq_len, B = local_batch_size (one micro-batch), A = micro-batches per step (gradient
// accumulation), G = global batch = dp × A × B.
// Window j is tokens [j·L, j·L + L] (L + 1 tokens): inputs are the first L, labels the last L.
// Step k (0-based) reads global samples k·G … k·G + G − 1; data-parallel rank r takes the A·B
// consecutive samples k·G + r·A·B … k·G + r·A·B + A·B − 1, and its micro-batch m (0-based) is the
// m-th B of those, samples k·G + r·A·B + m·B … + B − 1. So the samples of a step, and which rank
// reads them, are those of local batch A·B without accumulation: A splits a rank's batch in time,
// never the data order. A global sample index g maps to a window:
//   sequential  window = g mod num_windows
//   random      epoch e = g / num_windows, window = perm_e[g mod num_windows], where perm_e is a
//               permutation drawn from (seed, e) — reproducible, and independent of the mesh.
#ifndef RINGTRAIN_WORKER_ENGINE_DATA_SAMPLER_H_
#define RINGTRAIN_WORKER_ENGINE_DATA_SAMPLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/data/dataset.h"

namespace ringtrain {

struct SamplerSpec {
  SamplerKind kind = SamplerKind::kSequential;
  int64_t seq_len = 0;           // L
  int64_t local_batch_size = 0;  // B
  int64_t micro_batches = 1;     // A
  int64_t dp_degree = 1;
  uint64_t seed = 0;  // random only
};

// One rank's batch: row-major (B, L) token ids.
struct TokenBatch {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> inputs;  // (B, L)
  std::vector<int64_t> labels;  // (B, L): inputs shifted left by one
};

// Not thread-safe: the random sampler caches the current epoch's permutation, so give each thread
// its own sampler (they are cheap; the permutation is rebuilt on first use).
class WindowSampler {
 public:
  // INVALID_ARGUMENT if the dataset holds fewer than L + 1 tokens (names both numbers) or the spec
  // is invalid. `dataset` must outlive the sampler.
  static absl::StatusOr<WindowSampler> Create(const TokenDataset* dataset, const SamplerSpec& spec);

  int64_t num_windows() const { return num_windows_; }
  int64_t micro_batches() const { return spec_.micro_batches; }  // A
  // G = dp × A × B: the samples one step reads over all data-parallel ranks.
  int64_t global_batch() const {
    return spec_.dp_degree * spec_.micro_batches * spec_.local_batch_size;
  }
  // Window index of global sample g >= 0 (see the header comment).
  int64_t WindowOfSample(int64_t global_sample) const;
  // The B window indices of micro-batch `micro_batch` of data-parallel rank `dp_rank` at step
  // `step` (all 0-based; 0 <= dp_rank < dp_degree, 0 <= micro_batch < micro_batches).
  std::vector<int64_t> WindowsForStep(int64_t step, int64_t dp_rank, int64_t micro_batch) const;
  // Reads micro-batch `micro_batch` of `dp_rank` at `step`.
  TokenBatch BatchForStep(int64_t step, int64_t dp_rank, int64_t micro_batch) const;
  // Reads the given windows as one batch.
  TokenBatch ReadWindows(const std::vector<int64_t>& windows) const;

 private:
  WindowSampler(const TokenDataset* dataset, const SamplerSpec& spec, int64_t num_windows);

  const TokenDataset* dataset_;
  SamplerSpec spec_;
  int64_t num_windows_;
  // Random sampler: the permutation of the epoch last used, cached.
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_perm_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_DATA_SAMPLER_H_
