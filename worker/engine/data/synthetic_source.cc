// The synthetic dataset: a first-order Markov chain over V = vocab_size tokens.
//
// Each state s moves to one of K = min(4, V) distinct successor tokens, drawn from (seed, s), with
// probabilities proportional to the weights (4, 2, 1, 1) / 8 — i.e. (1/2, 1/4, 1/8, 1/8) for K = 4,
// renormalised over the first K weights when V < 4. Every state has the same next-token
// distribution up to relabelling, so the entropy rate H(X_{t+1} | X_t) equals that distribution's
// entropy whatever the stationary distribution is: a model that learns the chain reaches exactly
// this loss, which makes the source a convergence check with a known floor.
#include "worker/engine/data/synthetic_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace data_internal {
namespace {

constexpr int kMaxSuccessors = 4;
constexpr uint64_t kSuccessorWeights[kMaxSuccessors] = {4, 2, 1, 1};
constexpr int64_t kMinGeneratedTokens = int64_t{1} << 20;
// Tokens are stored as uint32, 4 bytes each; beyond this a bin file is the better tool.
constexpr int64_t kMaxGeneratedTokens = int64_t{1} << 32;
constexpr int64_t kMaxVocab = int64_t{1} << 32;

// Independent streams derived from the one user seed.
constexpr uint64_t kSuccessorStream = 1;
constexpr uint64_t kSampleStream = 2;

class SyntheticDataset : public TokenDataset {
 public:
  SyntheticDataset(int64_t vocab_size, int num_successors, double entropy_rate_nats,
                   std::vector<uint32_t> tokens)
      : vocab_size_(vocab_size),
        num_successors_(num_successors),
        entropy_rate_nats_(entropy_rate_nats),
        tokens_(std::move(tokens)) {}

  int64_t num_tokens() const override { return static_cast<int64_t>(tokens_.size()); }

  void Read(int64_t begin, int64_t count, int64_t* out) const override {
    std::copy(tokens_.begin() + begin, tokens_.begin() + begin + count, out);
  }

  double entropy_rate_nats() const override { return entropy_rate_nats_; }

  std::string Describe() const override {
    char entropy[32];
    std::snprintf(entropy, sizeof(entropy), "%.4f", entropy_rate_nats_);
    return absl::StrCat("synthetic Markov source: vocab ", vocab_size_, ", ", num_successors_,
                        " successors/state, entropy rate ", entropy, " nats/token, ", num_tokens(),
                        " tokens");
  }

 private:
  int64_t vocab_size_;
  int num_successors_;
  double entropy_rate_nats_;
  std::vector<uint32_t> tokens_;
};

// The transition structure, computed per state on demand rather than tabulated: it costs a few
// generator calls per token and no memory, whatever the vocabulary size.
class MarkovChain {
 public:
  MarkovChain(uint64_t seed, uint64_t vocab_size)
      : successor_seed_(MixSeed(seed, kSuccessorStream)),
        vocab_size_(vocab_size),
        num_successors_(static_cast<int>(std::min<uint64_t>(kMaxSuccessors, vocab_size))) {
    for (int i = 0; i < num_successors_; ++i) total_weight_ += kSuccessorWeights[i];
  }

  int num_successors() const { return num_successors_; }

  // H(X_{t+1} | X_t = s), the same for every s.
  double EntropyNats() const {
    double h = 0.0;
    for (int i = 0; i < num_successors_; ++i) {
      const double p = static_cast<double>(kSuccessorWeights[i]) / total_weight_;
      h -= p * std::log(p);
    }
    return h;
  }

  // Draws the token after `state` using `sampler`.
  uint32_t Step(uint32_t state, PortableRng& sampler) const {
    // Pick which successor first, then draw only as many successors as needed to reach it.
    uint64_t u = sampler.UniformBelow(total_weight_);
    int choice = 0;
    while (u >= kSuccessorWeights[choice]) u -= kSuccessorWeights[choice++];

    PortableRng rng(MixSeed(successor_seed_, state));
    uint32_t successors[kMaxSuccessors];
    for (int i = 0; i <= choice; ++i) {
      uint32_t t;
      do {
        t = static_cast<uint32_t>(rng.UniformBelow(vocab_size_));
      } while (std::find(successors, successors + i, t) != successors + i);
      successors[i] = t;
    }
    return successors[choice];
  }

 private:
  uint64_t successor_seed_;
  uint64_t vocab_size_;
  int num_successors_;
  uint64_t total_weight_ = 0;
};

}  // namespace

uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  // Hash the seed first so that (seed, stream) and (seed ^ x, stream ^ x) do not coincide.
  PortableRng outer(seed);
  PortableRng inner(outer.Next() ^ stream);
  return inner.Next();
}

absl::StatusOr<std::unique_ptr<TokenDataset>> OpenSyntheticDataset(const DatasetSpec& spec) {
  if (spec.vocab_size < 1 || spec.vocab_size > kMaxVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic dataset: vocab_size = ", spec.vocab_size, " is out of range; it must be in [1, ",
        kMaxVocab, "] (normally the model's vocab_size)"));
  }
  if (spec.min_tokens > kMaxGeneratedTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic dataset: min_tokens = ", spec.min_tokens, " exceeds ",
                     kMaxGeneratedTokens, "; use a bin dataset for more tokens"));
  }
  const int64_t n = std::max(spec.min_tokens, kMinGeneratedTokens);
  const MarkovChain chain(spec.seed, static_cast<uint64_t>(spec.vocab_size));

  // Stream 0 is the training data; other streams (validation) are held-out walks on the same chain.
  const uint64_t sample_seed = MixSeed(spec.seed, kSampleStream);
  PortableRng sampler(spec.sample_stream == 0 ? sample_seed
                                              : MixSeed(sample_seed, spec.sample_stream));
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  uint32_t state = static_cast<uint32_t>(sampler.UniformBelow(spec.vocab_size));
  tokens[0] = state;
  for (int64_t i = 1; i < n; ++i) {
    state = chain.Step(state, sampler);
    tokens[i] = state;
  }
  return std::make_unique<SyntheticDataset>(spec.vocab_size, chain.num_successors(),
                                            chain.EntropyNats(), std::move(tokens));
}

}  // namespace data_internal
}  // namespace ringtrain
