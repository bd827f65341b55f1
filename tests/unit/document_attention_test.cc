// Block-causal attention over packed documents (document_mask.h) in every block kernel and in ring
// attention, against plain softmax attention in float64 with a per-row document mask (PyTorch
// autograd): forward, log-sum-exp and dQ/dK/dV, for documents of 1 token, documents longer than a
// shard's chunk, and a window that starts mid-document; query and key blocks in head-tail, shuffled
// and document-balancer layouts. Also: the fused kernel computes exactly the tiles some query
// sees (a count), and the ring sends exactly the K/V blocks a later rank needs (a count).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "tests/unit/packed_documents.h"
#include "tests/unit/tensor_compare.h"
#include "tests/unit/thread_world.h"
#include "worker/engine/kernels/block_kernel.h"
#include "worker/engine/kernels/document_mask.h"
#include "worker/engine/kernels/fused_cpu_attention.h"
#include "worker/engine/parallel/cp_shard.h"
#include "worker/engine/parallel/document_balancer.h"
#include "worker/engine/parallel/ring_attention.h"

namespace ringtrain {
namespace {

constexpr int64_t kEos = 3;

std::vector<int64_t> Iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), from);
  return p;
}

// Which (query, key) pairs of each row are hidden, from the EOS tokens directly: same document iff
// no EOS lies in [k, q) — an independent formulation of the mask. (B, 1, Lq, Lk) bool.
at::Tensor HiddenPairs(const at::Tensor& tokens, const std::vector<int64_t>& qp,
                       const std::vector<int64_t>& kp) {
  const int64_t batch = tokens.size(0);
  auto hidden = torch::ones({batch, 1, int64_t(qp.size()), int64_t(kp.size())}, torch::kBool);
  auto acc = hidden.accessor<bool, 4>();
  const auto t = tokens.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    for (size_t i = 0; i < qp.size(); ++i) {
      for (size_t j = 0; j < kp.size(); ++j) {
        if (kp[j] > qp[i]) continue;
        bool same = true;
        for (int64_t p = kp[j]; p < qp[i]; ++p) same = same && t[b][p] != kEos;
        acc[b][0][int64_t(i)][int64_t(j)] = !same;
      }
    }
  }
  return hidden;
}

struct Result {
  at::Tensor out, lse, dq, dk, dv;
};

// Plain attention in float64 under `hidden`; rows that see no key give 0 and no gradient.
Result Reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& dout, const at::Tensor& hidden, double scale) {
  auto q64 = q.to(torch::kFloat64).requires_grad_(), k64 = k.to(torch::kFloat64).requires_grad_(),
       v64 = v.to(torch::kFloat64).requires_grad_();
  const int64_t group = q.size(1) / k.size(1);
  auto scores = torch::matmul(q64, k64.repeat_interleave(group, 1).transpose(-1, -2)) * scale;
  scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  const auto lse = torch::logsumexp(scores, -1);
  const auto seen = torch::isfinite(lse).unsqueeze(-1);
  const auto safe_lse = torch::where(seen, lse.unsqueeze(-1), torch::zeros_like(lse.unsqueeze(-1)));
  const auto probs = torch::where(seen, torch::exp(scores - safe_lse), torch::zeros_like(scores));
  const auto out = torch::matmul(probs, v64.repeat_interleave(group, 1));
  const auto g = torch::autograd::grad({out}, {q64, k64, v64}, {dout.to(torch::kFloat64)});
  return {out.detach(), lse.detach(), g[0], g[1], g[2]};
}

Result RunKernel(BlockKernel& kernel, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& dout, const BlockPositions& q_pos, const BlockPositions& k_pos,
                 double scale) {
  const BlockOutput fwd = kernel.Forward(q, k, v, q_pos, k_pos, scale);
  const FinalStats final = MakeFinalStats(fwd.out, fwd.lse, dout);
  const BlockGrads g = kernel.Backward(q, k, v, dout, final, q_pos, k_pos, scale);
  return {fwd.out, fwd.lse, g.dq, g.dk, g.dv};
}

void ExpectClose(const Result& got, const Result& want, double tol) {
  EXPECT_LE(MaxDiff(got.out, want.out), tol);
  EXPECT_LE(MaxDiff(got.dq, want.dq), tol);
  EXPECT_LE(MaxDiff(got.dk, want.dk), tol);
  EXPECT_LE(MaxDiff(got.dv, want.dv), tol);
  const auto finite = torch::isfinite(want.lse);
  EXPECT_TRUE(torch::equal(torch::isfinite(got.lse), finite));
  EXPECT_LE(MaxDiff(got.lse.masked_select(finite), want.lse.masked_select(finite)), tol);
}

enum class Kernel { kTiled, kCpuFlash, kTorchFlash };
enum class Layout { kWhole, kHeadTail, kShuffledKeys, kDocumentBalancer };

struct Case {
  const char* name;
  Kernel kernel;
  Layout layout;
  std::vector<int64_t> doc_lengths;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class DocumentKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(DocumentKernelTest, MatchesPlainAttentionWithADocumentMaskInFloat64) {
  const Case c = GetParam();
  const int64_t batch = 2, heads = 4, kv_heads = 2, length = 96, dim = 16;
  const at::Tensor tokens = PackedTokens(batch, length, c.doc_lengths, kEos);
  BlockPositions q_pos{Iota(length)}, k_pos{Iota(length)};
  switch (c.layout) {
    case Layout::kWhole: break;
    case Layout::kHeadTail:  // queries: rank 2's shard of 4; keys: rank 0's
      q_pos.positions = ShardPositions(length, 4, 2, LoadBalancer::kHeadTail);
      k_pos.positions = ShardPositions(length, 4, 0, LoadBalancer::kHeadTail);
      break;
    case Layout::kShuffledKeys: {
      std::mt19937 rng(5);
      std::shuffle(k_pos.positions.begin(), k_pos.positions.end(), rng);
      break;
    }
    case Layout::kDocumentBalancer: {
      const auto mask = MaskOf(tokens, kEos);
      const CpLayout layout = MakeCpLayout(length, 3, LoadBalancer::kDocument, mask.get());
      q_pos.positions = layout.positions[1];
      k_pos.positions = layout.positions[2];
      break;
    }
  }
  q_pos.documents = MaskOf(tokens, kEos);
  const int64_t lq = int64_t(q_pos.positions.size()), lk = int64_t(k_pos.positions.size());
  torch::manual_seed(11);
  const auto q = torch::randn({batch, heads, lq, dim});
  const auto k = torch::randn({batch, kv_heads, lk, dim});
  const auto v = torch::randn({batch, kv_heads, lk, dim});
  const auto dout = torch::randn({batch, heads, lq, dim});
  const double scale = 1.0 / std::sqrt(double(dim));

  std::shared_ptr<BlockKernel> kernel;
  switch (c.kernel) {
    case Kernel::kTiled: kernel = std::make_shared<TiledBlockKernel>(AttentionTiling{16, 8}); break;
    case Kernel::kCpuFlash:
      kernel = std::make_shared<FusedCpuBlockKernel>(FusedCpuTiling{16, 16});
      break;
    case Kernel::kTorchFlash:
      kernel = std::make_shared<FusedBlockKernel>(FusedBackend::kCpuFlash, AttentionTiling{16, 16});
      break;
  }
  const Result got = RunKernel(*kernel, q, k, v, dout, q_pos, k_pos, scale);
  const Result want =
      Reference(q, k, v, dout, HiddenPairs(tokens, q_pos.positions, k_pos.positions), scale);
  ExpectClose(got, want, 2e-5);
}

const std::vector<int64_t> kMixed = {1, 1, 5, 40, 3, 1, 17, 2, 60};  // 1-token and long documents
const std::vector<int64_t> kLong = {150};  // one document longer than the window: plain causal

INSTANTIATE_TEST_SUITE_P(
    Kernels, DocumentKernelTest,
    ::testing::Values(
        Case{"tiled_whole", Kernel::kTiled, Layout::kWhole, kMixed},
        Case{"tiled_headtail", Kernel::kTiled, Layout::kHeadTail, kMixed},
        Case{"tiled_shuffled_keys", Kernel::kTiled, Layout::kShuffledKeys, kMixed},
        Case{"cpu_flash_whole", Kernel::kCpuFlash, Layout::kWhole, kMixed},
        Case{"cpu_flash_headtail", Kernel::kCpuFlash, Layout::kHeadTail, kMixed},
        Case{"cpu_flash_shuffled_keys", Kernel::kCpuFlash, Layout::kShuffledKeys, kMixed},
        Case{"cpu_flash_balanced", Kernel::kCpuFlash, Layout::kDocumentBalancer, kMixed},
        Case{"cpu_flash_one_long_document", Kernel::kCpuFlash, Layout::kWhole, kLong},
        Case{"torch_flash_whole", Kernel::kTorchFlash, Layout::kWhole, kMixed},
        Case{"torch_flash_headtail", Kernel::kTorchFlash, Layout::kHeadTail, kMixed},
        Case{"torch_flash_balanced", Kernel::kTorchFlash, Layout::kDocumentBalancer, kMixed},
        Case{"torch_flash_one_token_documents", Kernel::kTorchFlash, Layout::kWhole, {1}}),
    [](const auto& info) { return std::string(info.param.name); });

// The fused kernel computes a (query tile, key tile) pair of a row iff some query of the tile sees
// some key of it: the count of scores equals the tiles counted pair by pair, times tile area.
TEST(DocumentKernelCount, ComputesExactlyTheTilesSomeQuerySees) {
  const int64_t batch = 2, heads = 2, length = 128, tile = 16;
  const at::Tensor tokens = PackedTokens(batch, length, kMixed, kEos);
  const auto mask = MaskOf(tokens, kEos);
  const auto hidden = HiddenPairs(tokens, Iota(length), Iota(length));
  int64_t expected = 0, causal_tiles = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qt = 0; qt < length / tile; ++qt) {
      for (int64_t kt = 0; kt <= qt; ++kt) {
        ++causal_tiles;
        const auto part =
            hidden[b][0].slice(0, qt * tile, (qt + 1) * tile).slice(1, kt * tile, (kt + 1) * tile);
        if (!part.all().item<bool>()) expected += heads * tile * tile;
      }
    }
  }
  ASSERT_LT(expected, causal_tiles * heads * tile * tile);  // the documents hide some tiles
  const auto q = torch::randn({batch, heads, length, 8}), k = torch::randn({batch, 1, length, 8});
  BlockPositions q_pos{Iota(length)};
  q_pos.documents = mask;
  const BlockOutput out = FusedCpuAttentionForward(q, k, k, q_pos, BlockPositions{Iota(length)},
                                                   0.3, FusedCpuTiling{tile, tile});
  EXPECT_EQ(out.scores_computed, expected);
  const BlockOutput tiled = AttentionBlockForward(q, k, k, q_pos, BlockPositions{Iota(length)},
                                                  MaskKind::kCausal, 0.3, {tile, tile});
  EXPECT_EQ(tiled.scores_computed, expected);
}

// ---- ring attention --------------------------------------------------------------------------

struct RingCase {
  int64_t cp;
  LoadBalancer balancer;
  RotateMethod rotate;
  std::vector<int64_t> doc_lengths;
};

std::string Name(const RingCase& c) {
  return "cp" + std::to_string(c.cp) + "_" + ChoiceName(c.balancer) + "_" + ChoiceName(c.rotate) +
         "_docs" + std::to_string(c.doc_lengths.size());
}

struct RankResult {
  at::Tensor out, dq, dk, dv;
  std::vector<int64_t> positions;
  int64_t kv_blocks_sent = 0, blocks_skipped = 0;
};

class DocumentRingTest : public ::testing::TestWithParam<RingCase> {};

// K/V blocks the exchange must send for one pass, counted from the positions: alltoall forwards
// block src hop by hop up to the farthest rank round the ring that sees it; allgather sends it to
// each rank that sees it.
int64_t ExpectedBlocksPerPass(const RingCase& c, const std::vector<std::vector<int64_t>>& layout,
                              const at::Tensor& tokens) {
  int64_t blocks = 0;
  for (int64_t src = 0; src < c.cp; ++src) {
    int64_t farthest = 0;
    for (int64_t hop = 1; hop < c.cp; ++hop) {
      const int64_t dst = (src + hop) % c.cp;
      const bool sees =
          !HiddenPairs(tokens, layout[size_t(dst)], layout[size_t(src)]).all().item<bool>();
      if (!sees) continue;
      farthest = hop;
      if (c.rotate == RotateMethod::kAllGather) ++blocks;
    }
    if (c.rotate == RotateMethod::kAllToAll) blocks += farthest;
  }
  return blocks;
}

TEST_P(DocumentRingTest, MatchesPlainAttentionAndSendsOnlyNeededBlocks) {
  const RingCase c = GetParam();
  const int64_t batch = 2, heads = 4, kv_heads = 2, length = 96, dim = 8;
  const at::Tensor tokens = PackedTokens(batch, length, c.doc_lengths, kEos);
  torch::manual_seed(21);
  const auto q = torch::randn({batch, heads, length, dim});
  const auto k = torch::randn({batch, kv_heads, length, dim});
  const auto v = torch::randn({batch, kv_heads, length, dim});
  const auto dout = torch::randn({batch, heads, length, dim});
  const double scale = 1.0 / std::sqrt(double(dim));
  const Result want =
      Reference(q, k, v, dout, HiddenPairs(tokens, Iota(length), Iota(length)), scale);

  std::vector<RankResult> results(size_t(c.cp));
  RunOnThreads(c.cp, 1, [&](int64_t r, Communicator& comm) {
    auto ring = std::make_shared<RingAttentionPlan>(&comm, length, c.balancer, c.rotate,
                                                    AttentionKernelKind::kCpuFlash);
    const ShardedBatch shard = CpShard(tokens, tokens, ShardSpec{c.cp, r, c.balancer, kEos});
    const at::Tensor idx = shard.positions.AsTensor();
    auto ql = q.index_select(2, idx).requires_grad_();
    auto kl = k.index_select(2, idx).requires_grad_();
    auto vl = v.index_select(2, idx).requires_grad_();
    const at::Tensor out = ring->Attend(ql, kl, vl, shard.positions, scale);
    const auto g = torch::autograd::grad({out}, {ql, kl, vl}, {dout.index_select(2, idx)});
    results[size_t(r)] = {out.detach(),
                          g[0],
                          g[1],
                          g[2],
                          shard.positions.positions,
                          comm.stats().kv_blocks_sent,
                          ring->stats().blocks_skipped};
  });

  std::vector<std::vector<int64_t>> layout;
  int64_t sent = 0;
  for (const RankResult& r : results) {
    const auto idx = torch::tensor(r.positions);
    EXPECT_LE(MaxDiff(r.out, want.out.index_select(2, idx)), 1e-5);
    EXPECT_LE(MaxDiff(r.dq, want.dq.index_select(2, idx)), 1e-5);
    EXPECT_LE(MaxDiff(r.dk, want.dk.index_select(2, idx)), 1e-5);
    EXPECT_LE(MaxDiff(r.dv, want.dv.index_select(2, idx)), 1e-5);
    layout.push_back(r.positions);
    sent += r.kv_blocks_sent;
  }
  // Forward and backward each move the blocks once.
  const int64_t expected = 2 * ExpectedBlocksPerPass(c, layout, tokens);
  EXPECT_EQ(sent, expected);
  std::printf("%s: %lld K/V blocks sent (all blocks to all ranks: %lld)\n", Name(c).c_str(),
              static_cast<long long>(sent), static_cast<long long>(2 * c.cp * (c.cp - 1)));
}

const std::vector<int64_t> kShort = {1, 3, 2, 9, 1, 5};  // every document shorter than a chunk

INSTANTIATE_TEST_SUITE_P(
    Layouts, DocumentRingTest,
    ::testing::Values(RingCase{2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, kMixed},
                      RingCase{3, LoadBalancer::kDocument, RotateMethod::kAllGather, kMixed},
                      RingCase{4, LoadBalancer::kDocument, RotateMethod::kAllToAll, kMixed},
                      RingCase{4, LoadBalancer::kNone, RotateMethod::kAllGather, kMixed},
                      RingCase{4, LoadBalancer::kHeadTail, RotateMethod::kAllGather, kShort},
                      RingCase{4, LoadBalancer::kNone, RotateMethod::kAllToAll, kShort}),
    [](const auto& info) { return Name(info.param); });

// Documents shorter than a rank's chunk under the none balancer: no rank sees another's block, so
// the ring sends nothing and skips every block but its own.
TEST(DocumentRing, ShortDocumentsInContiguousChunksNeedNoTransfer) {
  const int64_t cp = 4, length = 64;
  // Documents of 8 and 4 tokens: every chunk of 16 holds whole documents.
  const at::Tensor tokens = PackedTokens(1, length, {8, 4, 4}, kEos);
  const auto qkv = torch::randn({1, 2, length, 8});
  std::vector<int64_t> sent(cp), skipped(cp);
  RunOnThreads(cp, 1, [&](int64_t r, Communicator& comm) {
    auto ring = std::make_shared<RingAttentionPlan>(&comm, length, LoadBalancer::kNone,
                                                    RotateMethod::kAllToAll);
    const ShardedBatch shard = CpShard(tokens, tokens, ShardSpec{cp, r, LoadBalancer::kNone, kEos});
    const at::Tensor x = qkv.index_select(2, shard.positions.AsTensor());
    ring->Attend(x, x, x, shard.positions, 0.3);
    sent[size_t(r)] = comm.stats().kv_blocks_sent;
    skipped[size_t(r)] = ring->stats().blocks_skipped;
  });
  for (int64_t r = 0; r < cp; ++r) {
    EXPECT_EQ(sent[size_t(r)], 0) << "rank " << r;
    EXPECT_EQ(skipped[size_t(r)], cp - 1) << "rank " << r;
  }
}

}  // namespace
}  // namespace ringtrain
