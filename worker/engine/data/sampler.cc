// Window sampling: global sample index -> window -> tokens. L = seq_len, B = local batch size,
// A = micro-batches per step, G = dp × A × B, as in sampler.h.
#include "worker/engine/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/data/synthetic_source.h"

namespace ringtrain {
namespace {

absl::Status CheckPositive(const char* key, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sampler: ", key, " = ", value, " must be a positive integer"));
}

// perm_e of sampler.h: a Fisher–Yates shuffle of 0 … n−1 driven by the stream (seed, epoch). Only
// (seed, epoch, n) enter, never the mesh, so any dp layout reads the same sample order.
std::vector<int64_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  data_internal::PortableRng rng(data_internal::MixSeed(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.UniformBelow(static_cast<uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

}  // namespace

absl::StatusOr<WindowSampler> WindowSampler::Create(const TokenDataset* dataset,
                                                    const SamplerSpec& spec) {
  if (dataset == nullptr) return absl::InvalidArgumentError("sampler: dataset is null");
  RT_RETURN_IF_ERROR(CheckPositive("seq_len", spec.seq_len));
  RT_RETURN_IF_ERROR(CheckPositive("local_batch_size", spec.local_batch_size));
  RT_RETURN_IF_ERROR(CheckPositive("micro_batches", spec.micro_batches));
  RT_RETURN_IF_ERROR(CheckPositive("dp_degree", spec.dp_degree));
  const int64_t n = dataset->num_tokens();
  if (n < spec.seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: the dataset has ", n, " tokens, fewer than seq_len + 1 = ", spec.seq_len + 1,
        " needed for one window (", dataset->Describe(), "); use more data or a shorter seq_len"));
  }
  return WindowSampler(dataset, spec, (n - 1) / spec.seq_len);
}

WindowSampler::WindowSampler(const TokenDataset* dataset, const SamplerSpec& spec,
                             int64_t num_windows)
    : dataset_(dataset), spec_(spec), num_windows_(num_windows) {}

int64_t WindowSampler::WindowOfSample(int64_t global_sample) const {
  const int64_t index = global_sample % num_windows_;
  if (spec_.kind == SamplerKind::kSequential) return index;
  const int64_t epoch = global_sample / num_windows_;
  if (epoch != cached_epoch_) {
    cached_perm_ = EpochPermutation(spec_.seed, epoch, num_windows_);
    cached_epoch_ = epoch;
  }
  return cached_perm_[index];
}

std::vector<int64_t> WindowSampler::WindowsForStep(int64_t step, int64_t dp_rank,
                                                   int64_t micro_batch) const {
  const int64_t b = spec_.local_batch_size;
  const int64_t first = step * global_batch() + dp_rank * spec_.micro_batches * b + micro_batch * b;
  std::vector<int64_t> windows(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) windows[i] = WindowOfSample(first + i);
  return windows;
}

TokenBatch WindowSampler::BatchForStep(int64_t step, int64_t dp_rank, int64_t micro_batch) const {
  return ReadWindows(WindowsForStep(step, dp_rank, micro_batch));
}

TokenBatch WindowSampler::ReadWindows(const std::vector<int64_t>& windows) const {
  const int64_t l = spec_.seq_len;
  TokenBatch batch;
  batch.batch = static_cast<int64_t>(windows.size());
  batch.seq_len = l;
  batch.inputs.resize(static_cast<size_t>(batch.batch * l));
  batch.labels.resize(static_cast<size_t>(batch.batch * l));
  std::vector<int64_t> window(static_cast<size_t>(l + 1));  // (L + 1)
  for (int64_t row = 0; row < batch.batch; ++row) {
    dataset_->Read(windows[row] * l, l + 1, window.data());
    std::copy(window.begin(), window.end() - 1, batch.inputs.begin() + row * l);
    std::copy(window.begin() + 1, window.end(), batch.labels.begin() + row * l);
  }
  return batch;
}

}  // namespace ringtrain
