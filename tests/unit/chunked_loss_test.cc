// The chunked head and loss (model/chunked_loss.h) against F.cross_entropy on the whole logits and
// against float64: loss and the gradients of h and the weight, chunks that do not divide the rows,
// ignored labels, bfloat16 h, bitwise repeatability; and its memory: the bytes allocated at once
// during forward and backward stay within a few chunks of logits, far below one (N, V) tensor
// (counted by LibTorch's CPU allocator statistics).
#include "worker/engine/model/chunked_loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/unit/tensor_compare.h"
#include "worker/trainer/tensor_memory.h"

namespace ringtrain {
namespace {

struct LossGrads {
  at::Tensor loss, dh, dw;
};

LossGrads Whole(const at::Tensor& h0, const at::Tensor& w0, const at::Tensor& labels) {
  const at::Tensor h = Leaf(h0), w = Leaf(w0);
  const at::Tensor logits = at::linear(h, w.to(h.scalar_type())).to(torch::kFloat32);
  const at::Tensor loss = torch::nn::functional::cross_entropy(
      logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

LossGrads Chunked(const at::Tensor& h0, const at::Tensor& w0, const at::Tensor& labels,
                  int64_t chunk) {
  const at::Tensor h = Leaf(h0), w = Leaf(w0);
  const at::Tensor loss = ChunkedCrossEntropySum(h, w, labels, chunk);
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

TEST(ChunkedLoss, MatchesCrossEntropyOnTheWholeLogitsAndFloat64) {
  torch::manual_seed(1);
  const int64_t rows = 150, dim = 24, vocab = 97;
  const at::Tensor h = torch::randn({rows, dim});
  const at::Tensor w = torch::randn({vocab, dim}) * 0.3;
  at::Tensor labels = torch::randint(vocab, {rows}, torch::kLong);
  labels[7] = kIgnoreLabel;
  labels[149] = kIgnoreLabel;
  const LossGrads whole = Whole(h, w, labels);
  const LossGrads f64 = Whole(h.to(torch::kFloat64), w.to(torch::kFloat64), labels);
  for (int64_t chunk : {1, 40, 64, 150, 1000}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const LossGrads got = Chunked(h, w, labels, chunk);
    EXPECT_EQ(got.loss.scalar_type(), torch::kFloat64);
    EXPECT_LE(RelDiff(got.loss, whole.loss), 1e-6);
    EXPECT_LE(RelDiff(got.dh, whole.dh), 1e-6);
    EXPECT_LE(RelDiff(got.dw, whole.dw), 1e-6);
    EXPECT_LE(RelDiff(got.loss, f64.loss), 1e-6);
    EXPECT_LE(RelDiff(got.dh, f64.dh), 1e-6);
    EXPECT_LE(RelDiff(got.dw, f64.dw), 1e-6);
    EXPECT_EQ(got.dh[7].abs().sum().item<double>(), 0.0) << "an ignored row has a gradient";
    const LossGrads again = Chunked(h, w, labels, chunk);
    EXPECT_TRUE(torch::equal(got.loss, again.loss));
    EXPECT_TRUE(torch::equal(got.dh, again.dh));
    EXPECT_TRUE(torch::equal(got.dw, again.dw));
  }
}

TEST(ChunkedLoss, BFloat16HiddenStatesKeepAFloat32WeightGradient) {
  torch::manual_seed(2);
  const at::Tensor h = torch::randn({90, 32}).to(torch::kBFloat16);
  const at::Tensor w = torch::randn({50, 32}) * 0.2;  // the float32 master weight
  const at::Tensor labels = torch::randint(50, {90}, torch::kLong);
  const LossGrads whole = Whole(h, w, labels);
  const LossGrads got = Chunked(h, w, labels, 32);
  EXPECT_EQ(got.dh.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dw.scalar_type(), torch::kFloat32);
  EXPECT_LE(MaxDiff(got.loss, whole.loss) / whole.loss.abs().item<double>(), 1e-5);
  EXPECT_LE(MaxDiff(got.dh, whole.dh), 2e-2 * whole.dh.abs().max().item<double>());
  EXPECT_LE(MaxDiff(got.dw, whole.dw), 2e-2 * whole.dw.abs().max().item<double>());
}

// Peak bytes of live CPU tensors during forward and backward, above what was alive before, with
// the loss chunked (chunk rows) or through the whole logits (chunk 0).
int64_t PeakExtraBytes(const at::Tensor& h0, const at::Tensor& w0, const at::Tensor& labels,
                       int64_t chunk) {
  const at::Tensor h = Leaf(h0), w = Leaf(w0);
  const ScopedCpuTensorPeak peak;
  if (chunk > 0) {
    ChunkedCrossEntropySum(h, w, labels, chunk).backward();
  } else {
    Whole(h, w, labels);
  }
  return peak.extra_bytes();
}

TEST(ChunkedLoss, NeverHoldsTheWholeLogits) {
  InstallCpuTensorCounter();  // tensors made before it are not counted: these are made after
  torch::manual_seed(3);
  const int64_t rows = 4096, dim = 16, vocab = 2048, chunk = 256;
  const at::Tensor h = torch::randn({rows, dim});
  const at::Tensor w = torch::randn({vocab, dim}) * 0.1;
  const at::Tensor labels = torch::randint(vocab, {rows}, torch::kLong);
  const int64_t whole_logits = rows * vocab * 4;   // 32 MiB
  const int64_t chunk_logits = chunk * vocab * 4;  // 2 MiB
  // What must be held besides the logits: h, w and their gradients, the labels and per-row LSE.
  const int64_t inputs = 2 * (rows * dim + vocab * dim) * 4 + rows * (8 + 4 + 8);
  const int64_t chunked = PeakExtraBytes(h, w, labels, chunk);
  const int64_t whole = PeakExtraBytes(h, w, labels, 0);
  std::printf("peak extra bytes: chunked %lld, whole logits %lld (one logits tensor %lld)\n",
              static_cast<long long>(chunked), static_cast<long long>(whole),
              static_cast<long long>(whole_logits));
  ASSERT_TRUE(CpuTensorCounterInstalled());
  EXPECT_GE(whole, 2 * whole_logits) << "the counter misses the unchunked logits and gradient";
  EXPECT_LE(chunked, 4 * chunk_logits + inputs);
}

}  // namespace
}  // namespace ringtrain
