// Private to worker/engine/data: the synthetic Markov source and the portable random generator it
// shares with the random sampler.
//
// Both must give the same numbers on every platform and standard library, so neither uses
// std::uniform_int_distribution or std::shuffle (whose outputs are implementation-defined).
#ifndef RINGTRAIN_WORKER_ENGINE_DATA_SYNTHETIC_SOURCE_H_
#define RINGTRAIN_WORKER_ENGINE_DATA_SYNTHETIC_SOURCE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/data/dataset.h"

namespace ringtrain {
namespace data_internal {

// SplitMix64 (Steele, Lea & Flood 2014): a 64-bit state, full period, and statistics good enough
// for data generation and shuffling. Not thread-safe; cheap to construct, so make one per use.
class PortableRng {
 public:
  explicit PortableRng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n) for n > 0. Rejects the lowest 2^64 mod n values so that every residue is
  // equally likely (plain Next() % n is biased for n that do not divide 2^64).
  uint64_t UniformBelow(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // == 2^64 mod n
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  uint64_t state_;
};

// A seed for the stream named by (seed, stream): nearby inputs give unrelated seeds.
uint64_t MixSeed(uint64_t seed, uint64_t stream);

// Generates the synthetic dataset described in dataset.h. INVALID_ARGUMENT if vocab_size is not in
// [1, 2^32].
absl::StatusOr<std::unique_ptr<TokenDataset>> OpenSyntheticDataset(const DatasetSpec& spec);

}  // namespace data_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_DATA_SYNTHETIC_SOURCE_H_
