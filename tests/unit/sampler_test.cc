// Tests for WindowSampler on a bin file holding tokens 0, 1, …, N−1, so that every window's
// contents are known: window j holds tokens j·L … j·L + L.
#include "worker/engine/data/sampler.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

// A scratch folder holding one bin file of tokens 0 … n−1 (uint32), removed on destruction.
class CountingBin {
 public:
  explicit CountingBin(int64_t n) {
    const std::string path = dir_ / "count.bin";
    {
      std::ofstream out(path, std::ios::binary);
      for (uint32_t t = 0; t < static_cast<uint32_t>(n); ++t) {
        const char bytes[4] = {static_cast<char>(t), static_cast<char>(t >> 8),
                               static_cast<char>(t >> 16), static_cast<char>(t >> 24)};
        out.write(bytes, 4);
      }
    }
    DatasetSpec spec;
    spec.kind = DatasetKind::kBin;
    spec.path = path;
    spec.token_dtype = TokenDtype::kUint32;
    spec.vocab_size = n + 1;
    auto d = OpenDataset(spec);
    EXPECT_TRUE(d.ok()) << d.status();
    if (d.ok()) dataset_ = std::move(*d);
  }
  ~CountingBin() { dataset_.reset(); }  // unmapped before the folder goes
  const TokenDataset* dataset() const { return dataset_.get(); }

 private:
  testing::TempDir dir_;
  std::unique_ptr<TokenDataset> dataset_;
};

SamplerSpec Spec(SamplerKind kind, int64_t seq_len, int64_t batch, int64_t dp, uint64_t seed = 0) {
  SamplerSpec spec;
  spec.kind = kind;
  spec.seq_len = seq_len;
  spec.local_batch_size = batch;
  spec.dp_degree = dp;
  spec.seed = seed;
  return spec;
}

SamplerSpec WithMicroBatches(SamplerSpec spec, int64_t micro_batches) {
  spec.micro_batches = micro_batches;
  return spec;
}

WindowSampler MustCreate(const TokenDataset* d, const SamplerSpec& spec) {
  auto s = WindowSampler::Create(d, spec);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(WindowSamplerTest, NumWindows) {
  // (N − 1) / L: the last window needs one token past its L inputs.
  for (const auto& [n, l, windows] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {101, 10, 10}, {100, 10, 9}, {11, 10, 1}, {2, 1, 1}, {7, 2, 3}}) {
    CountingBin bin(n);
    EXPECT_EQ(MustCreate(bin.dataset(), Spec(SamplerKind::kSequential, l, 1, 1)).num_windows(),
              windows)
        << "N " << n << " L " << l;
  }
}

TEST(WindowSamplerTest, TooFewTokens) {
  CountingBin bin(10);
  auto s = WindowSampler::Create(bin.dataset(), Spec(SamplerKind::kSequential, 10, 1, 1));
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(s.status().message());
  EXPECT_NE(message.find("10 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("11"), std::string::npos) << message;
}

TEST(WindowSamplerTest, InvalidSpec) {
  CountingBin bin(100);
  const std::vector<std::pair<SamplerSpec, std::string>> cases = {
      {Spec(SamplerKind::kSequential, 0, 1, 1), "seq_len"},
      {Spec(SamplerKind::kSequential, 4, 0, 1), "local_batch_size"},
      {Spec(SamplerKind::kRandom, 4, -2, 1), "local_batch_size"},
      {Spec(SamplerKind::kSequential, 4, 1, 0), "dp_degree"},
      {WithMicroBatches(Spec(SamplerKind::kSequential, 4, 1, 1), 0), "micro_batches"},
  };
  for (const auto& [spec, key] : cases) {
    auto s = WindowSampler::Create(bin.dataset(), spec);
    ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_NE(std::string(s.status().message()).find(key), std::string::npos) << s.status();
  }
  EXPECT_EQ(WindowSampler::Create(nullptr, Spec(SamplerKind::kSequential, 4, 1, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WindowSamplerTest, SequentialRanksTakeConsecutiveSlicesAndWrap) {
  CountingBin bin(101);  // L = 10: windows 0 … 9
  // dp = 2, B = 3, G = 6.
  const WindowSampler s = MustCreate(bin.dataset(), Spec(SamplerKind::kSequential, 10, 3, 2));
  EXPECT_EQ(s.global_batch(), 6);
  EXPECT_EQ(s.WindowsForStep(0, 0, 0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(s.WindowsForStep(0, 1, 0), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(s.WindowsForStep(1, 0, 0), (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(s.WindowsForStep(1, 1, 0), (std::vector<int64_t>{9, 0, 1}));  // wraps mod 10
  EXPECT_EQ(s.WindowsForStep(2, 0, 0), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(s.WindowsForStep(17, 1, 0), (std::vector<int64_t>{5, 6, 7}));  // samples 105 … 107
  EXPECT_EQ(s.WindowOfSample(1234), 4);
}

TEST(WindowSamplerTest, BatchHoldsWindowTokensAndShiftedLabels) {
  CountingBin bin(101);
  const WindowSampler s = MustCreate(bin.dataset(), Spec(SamplerKind::kSequential, 10, 3, 2));
  const TokenBatch batch = s.BatchForStep(1, 1, 0);  // windows 9, 0, 1
  ASSERT_EQ(batch.batch, 3);
  ASSERT_EQ(batch.seq_len, 10);
  ASSERT_EQ(batch.inputs.size(), 30u);
  ASSERT_EQ(batch.labels.size(), 30u);
  const int64_t windows[3] = {9, 0, 1};
  for (int64_t row = 0; row < 3; ++row) {
    for (int64_t i = 0; i < 10; ++i) {
      EXPECT_EQ(batch.inputs[row * 10 + i], windows[row] * 10 + i);
      EXPECT_EQ(batch.labels[row * 10 + i], windows[row] * 10 + i + 1);
    }
  }
  // Window 9 is the last: its final label is token 100, the last in the file.
  EXPECT_EQ(batch.labels[9], 100);
  // Consecutive windows share one token: the last label of window 0 is the first input of window 1.
  EXPECT_EQ(batch.labels[19], batch.inputs[20]);
}

TEST(WindowSamplerTest, RandomIsAReproduciblePermutationPerEpoch) {
  CountingBin bin(501);  // L = 10: 50 windows
  const WindowSampler a =
      MustCreate(bin.dataset(), Spec(SamplerKind::kRandom, 10, 4, 1, /*seed=*/5));
  const WindowSampler b =
      MustCreate(bin.dataset(), Spec(SamplerKind::kRandom, 10, 4, 1, /*seed=*/5));
  const WindowSampler c =
      MustCreate(bin.dataset(), Spec(SamplerKind::kRandom, 10, 4, 1, /*seed=*/6));
  const int64_t n = a.num_windows();
  ASSERT_EQ(n, 50);
  const auto epoch = [n](const WindowSampler& s, int64_t e) {
    std::vector<int64_t> order;
    for (int64_t i = 0; i < n; ++i) order.push_back(s.WindowOfSample(e * n + i));
    return order;
  };
  std::vector<int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<int64_t> sorted = epoch(a, e);
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e;
  }
  EXPECT_EQ(epoch(a, 0), epoch(b, 0));
  EXPECT_EQ(epoch(a, 3), epoch(b, 3));
  EXPECT_NE(epoch(a, 0), epoch(c, 0));
  EXPECT_NE(epoch(a, 0), epoch(a, 1));
  EXPECT_NE(epoch(a, 0), identity);

  // The cache is per epoch; jumping between epochs gives the same answers.
  const std::vector<int64_t> e2 = epoch(a, 2);
  EXPECT_EQ(a.WindowOfSample(0), epoch(b, 0)[0]);
  EXPECT_EQ(a.WindowOfSample(2 * n + 7), e2[7]);
}

TEST(WindowSamplerTest, RandomOrderIsPinned) {
  // Portable generator and shuffle: the same order on every platform (see dataset_test's pins).
  CountingBin bin(101);
  const WindowSampler s =
      MustCreate(bin.dataset(), Spec(SamplerKind::kRandom, 10, 1, 1, /*seed=*/5));
  std::vector<int64_t> order;
  for (int64_t g = 0; g < 20; ++g) order.push_back(s.WindowOfSample(g));
  EXPECT_EQ(order, (std::vector<int64_t>{2, 3, 6, 0, 9, 8, 4, 5, 1, 7,  // epoch 0
                                         1, 6, 2, 7, 9, 8, 0, 3, 5, 4}));
}

TEST(WindowSamplerTest, RandomFirstPositionIsRoughlyUniform) {
  CountingBin bin(101);  // 10 windows
  const WindowSampler s =
      MustCreate(bin.dataset(), Spec(SamplerKind::kRandom, 10, 1, 1, /*seed=*/9));
  constexpr int64_t kEpochs = 4000;
  std::vector<int64_t> count(10, 0);
  for (int64_t e = 0; e < kEpochs; ++e) ++count[s.WindowOfSample(e * 10)];
  // Expected 400 each, standard deviation 19: 6σ bounds.
  for (int64_t w = 0; w < 10; ++w) EXPECT_NEAR(count[w], 400, 114) << "window " << w;
}

TEST(WindowSamplerTest, MeshIndependence) {
  // The dp ranks' windows at a step, in rank order, are the dp = 1 windows of the same step with
  // the same global batch, for both kinds, across epoch boundaries (38 windows, G = 12).
  CountingBin bin(38 * 8 + 1);
  for (const SamplerKind kind : {SamplerKind::kSequential, SamplerKind::kRandom}) {
    const WindowSampler one = MustCreate(bin.dataset(), Spec(kind, 8, 12, 1, /*seed=*/3));
    ASSERT_EQ(one.num_windows(), 38);
    for (int64_t dp : {2, 3, 4, 6}) {
      const WindowSampler many = MustCreate(bin.dataset(), Spec(kind, 8, 12 / dp, dp, 3));
      ASSERT_EQ(many.global_batch(), 12);
      for (int64_t step = 0; step < 10; ++step) {
        std::vector<int64_t> joined;
        for (int64_t r = 0; r < dp; ++r) {
          const std::vector<int64_t> w = many.WindowsForStep(step, r, 0);
          joined.insert(joined.end(), w.begin(), w.end());
        }
        EXPECT_EQ(joined, one.WindowsForStep(step, 0, 0))
            << ChoiceName(kind) << " dp " << dp << " step " << step;
      }
    }
  }
}

TEST(WindowSamplerTest, MicroBatchesSplitEachRanksSliceInOrder) {
  CountingBin bin(201);  // L = 10: windows 0 … 19
  // dp = 2, A = 2, B = 2: G = 8; rank r reads samples 8k + 4r … 8k + 4r + 3, two at a time.
  const WindowSampler s =
      MustCreate(bin.dataset(), WithMicroBatches(Spec(SamplerKind::kSequential, 10, 2, 2), 2));
  EXPECT_EQ(s.global_batch(), 8);
  EXPECT_EQ(s.WindowsForStep(0, 0, 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.WindowsForStep(0, 0, 1), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s.WindowsForStep(0, 1, 0), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(s.WindowsForStep(0, 1, 1), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(s.WindowsForStep(1, 0, 0), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(s.WindowsForStep(2, 1, 1), (std::vector<int64_t>{2, 3}));  // samples 22, 23: wraps
  const TokenBatch batch = s.BatchForStep(0, 1, 1);                    // windows 6, 7
  ASSERT_EQ(batch.batch, 2);
  EXPECT_EQ(batch.inputs[0], 60);
  EXPECT_EQ(batch.labels[19], 80);
}

TEST(WindowSamplerTest, AccumulationReadsWhatOneBigLocalBatchReads) {
  // Rank r's A micro-batches of B at a step, joined in order, are its one batch of A·B without
  // accumulation: the same samples on the same rank, for both kinds, across epoch boundaries
  // (23 windows, G up to 24).
  CountingBin bin(23 * 8 + 1);
  for (const SamplerKind kind : {SamplerKind::kSequential, SamplerKind::kRandom}) {
    for (int64_t dp : {1, 2, 3}) {
      for (int64_t a : {1, 2, 4}) {
        for (int64_t b : {1, 2}) {
          const WindowSampler big = MustCreate(bin.dataset(), Spec(kind, 8, a * b, dp, /*seed=*/3));
          const WindowSampler accum =
              MustCreate(bin.dataset(), WithMicroBatches(Spec(kind, 8, b, dp, /*seed=*/3), a));
          ASSERT_EQ(accum.global_batch(), big.global_batch());
          for (int64_t step = 0; step < 7; ++step) {
            for (int64_t r = 0; r < dp; ++r) {
              std::vector<int64_t> joined;
              for (int64_t m = 0; m < a; ++m) {
                const std::vector<int64_t> w = accum.WindowsForStep(step, r, m);
                ASSERT_EQ(w.size(), static_cast<size_t>(b));
                joined.insert(joined.end(), w.begin(), w.end());
              }
              EXPECT_EQ(joined, big.WindowsForStep(step, r, 0))
                  << ChoiceName(kind) << " dp " << dp << " A " << a << " B " << b << " step "
                  << step << " rank " << r;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ringtrain
