// Which windows of the dataset each step reads. Torch-free.
//
// L = seq_len, B = local_batch_size, G = global batch = dp × B.
// Window j is tokens [j·L, j·L + L] (L + 1 tokens): inputs are the first L, labels the last L.
// Step k (0-based) reads global samples k·G … k·G + G − 1; data-parallel rank r takes the B
// consecutive samples k·G + r·B … k·G + r·B + B − 1. A global sample index g maps to a window:
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
  int64_t seq_len = 0;              // L
  int64_t local_batch_size = 0;     // B
  int64_t dp_degree = 1;
  uint64_t seed = 0;                // random only
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
  int64_t global_batch() const { return spec_.dp_degree * spec_.local_batch_size; }
  // Window index of global sample g >= 0 (see the header comment).
  int64_t WindowOfSample(int64_t global_sample) const;
  // The B window indices of data-parallel rank `dp_rank` at step `step` (both 0-based;
  // 0 <= dp_rank < dp_degree).
  std::vector<int64_t> WindowsForStep(int64_t step, int64_t dp_rank) const;
  // Reads the batch of `dp_rank` at `step`.
  TokenBatch BatchForStep(int64_t step, int64_t dp_rank) const;
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
