// The document mask's index arithmetic (document starts, visible key ranges, tile covers, pair
// counts) against brute force, and the document load balancer: equal token counts, never worse
// than head-tail, and within 5 % of the mean whenever some placement at its chunk granularity is
// (found by exhaustive search on small cases), over random document-length draws.
#include "worker/engine/parallel/document_balancer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "worker/engine/kernels/document_mask.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {
namespace {

constexpr int64_t kEos = 0;

// One row of `length` tokens holding documents of lengths drawn from `draw` (EOS-terminated; the
// last runs off the end).
std::vector<int64_t> PackedRow(int64_t length, const std::function<int64_t()>& draw) {
  std::vector<int64_t> tokens(static_cast<size_t>(length), 1);
  for (int64_t end = draw() - 1; end < length; end += draw()) tokens[size_t(end)] = kEos;
  return tokens;
}

DocumentMask MaskOfRows(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return MakeDocumentMask(flat.data(), int64_t(rows.size()), int64_t(rows[0].size()), kEos);
}

// Brute force: same document iff no EOS in [k, q).
bool Visible(const std::vector<int64_t>& tokens, int64_t q, int64_t k) {
  if (k > q) return false;
  for (int64_t p = k; p < q; ++p) {
    if (tokens[size_t(p)] == kEos) return false;
  }
  return true;
}

TEST(DocumentMask, StartsFollowTheEosTokens) {
  const std::vector<int64_t> tokens = {5, kEos, 3, kEos, kEos, 7, 8};
  EXPECT_EQ(DocumentStarts(tokens.data(), 7, kEos), (std::vector<int64_t>{0, 0, 2, 2, 4, 5, 5}));
  const DocumentMask mask = MaskOfRows({tokens, {kEos, 1, 1, 1, 1, 1, kEos}});
  ASSERT_EQ(mask.rows(), 2);
  EXPECT_EQ(mask.starts[1], (std::vector<int64_t>{0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(VisibleFrom(&mask, 0, 4), 4);
  EXPECT_EQ(VisibleFrom(nullptr, 0, 4), 0);
}

TEST(DocumentMask, VisibleKeysPairsAndTileCoversMatchBruteForce) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t length = 64;
    std::uniform_int_distribution<int64_t> len(1, trial % 2 == 0 ? 6 : 40);
    const std::vector<int64_t> tokens = PackedRow(length, [&] { return len(rng); });
    const DocumentMask mask = MaskOfRows({tokens});
    // Random query and key sets; keys ascending for the tile cover.
    std::vector<int64_t> all(static_cast<size_t>(length));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int64_t> queries(all.begin(), all.begin() + 8), keys(all.begin() + 8, all.end());
    keys.resize(size_t(1 + trial % 12));
    std::sort(keys.begin(), keys.end());
    int64_t pairs = 0, visible_queries = 0, full_queries = 0;
    for (int64_t pq : queries) {
      const KeyRange r =
          VisibleKeys(keys.data(), int64_t(keys.size()), VisibleFrom(&mask, 0, pq), pq);
      int64_t seen = 0;
      for (size_t j = 0; j < keys.size(); ++j) {
        const bool v = Visible(tokens, pq, keys[j]);
        seen += v;
        EXPECT_EQ(v, int64_t(j) >= r.first && int64_t(j) < r.last) << "trial " << trial;
      }
      pairs += seen;
      visible_queries += seen > 0;
      full_queries += seen == int64_t(keys.size());
    }
    EXPECT_EQ(VisiblePairs(queries, keys, &mask, 0), pairs);
    EXPECT_EQ(AnyVisible(queries, keys, &mask), pairs > 0);
    const TileCover cover = CoverOfTile(queries.data(), int64_t(queries.size()), keys.data(),
                                        int64_t(keys.size()), &mask, 0);
    const TileCover want = pairs == 0                                ? TileCover::kHidden
                           : full_queries == int64_t(queries.size()) ? TileCover::kFull
                                                                     : TileCover::kPartial;
    EXPECT_EQ(cover, want) << "trial " << trial;
    (void)visible_queries;
  }
}

// ---- the balancer ----------------------------------------------------------------------------

// The best max/mean over every placement of `work`'s chunks, `per_rank` to each of `cp` ranks.
double OptimalImbalance(std::vector<int64_t> work, int64_t cp) {
  std::sort(work.rbegin(), work.rend());  // largest first: the bound prunes early
  const int64_t per_rank = int64_t(work.size()) / cp;
  std::vector<int64_t> loads(size_t(cp), 0), counts(size_t(cp), 0);
  int64_t best = INT64_MAX;
  std::function<void(size_t)> place = [&](size_t c) {
    if (c == work.size()) {
      best = std::min(best, *std::max_element(loads.begin(), loads.end()));
      return;
    }
    std::set<std::pair<int64_t, int64_t>> tried;  // (load, count): symmetric ranks once
    for (int64_t r = 0; r < cp; ++r) {
      if (counts[size_t(r)] == per_rank) continue;
      if (!tried.insert({loads[size_t(r)], counts[size_t(r)]}).second) continue;
      loads[size_t(r)] += work[c];
      counts[size_t(r)] += 1;
      if (*std::max_element(loads.begin(), loads.end()) < best) place(c + 1);
      loads[size_t(r)] -= work[c];
      counts[size_t(r)] -= 1;
    }
  };
  place(0);
  const int64_t total = std::accumulate(work.begin(), work.end(), int64_t{0});
  return double(best) * double(cp) / double(total);
}

TEST(DocumentBalancer, ChunkCountsAndHeadTailAtFinerGrain) {
  EXPECT_EQ(DocumentChunkCount(16384, 4), 32);
  EXPECT_EQ(DocumentChunkCount(256, 4), 16);  // 256 / 32 = 8 < 16 tokens: m = 2
  EXPECT_EQ(DocumentChunkCount(48, 3), 6);
  // Head-tail at 2 chunks per part is the head-tail layout of ShardPositions.
  const auto placement = HeadTailPlacement(16, 2);
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<int64_t> positions;
    for (int64_t c : placement[size_t(r)]) {
      for (int64_t i = 0; i < 4; ++i) positions.push_back(c * 4 + i);
    }
    EXPECT_EQ(positions, ShardPositions(64, 2, r, LoadBalancer::kHeadTail));
  }
}

TEST(DocumentBalancer, EqualTokensNeverWorseThanHeadTailAndNearOptimal) {
  std::mt19937 rng(2026);
  int balanced_cases = 0, reached = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t cp = 2 + trial % 3;  // 2, 3, 4
    const int64_t length = 64 * cp;    // 4·cp chunks of 16: small enough to search exhaustively
    const int64_t rows = 1 + trial % 2;
    // Short documents, long ones, and mixes (a lognormal spread like real corpora).
    std::lognormal_distribution<double> spread(trial % 4 == 0 ? 1.5 : 3.5, 1.2);
    std::vector<std::vector<int64_t>> tokens;
    for (int64_t b = 0; b < rows; ++b) {
      tokens.push_back(
          PackedRow(length, [&] { return std::max<int64_t>(1, int64_t(spread(rng))); }));
    }
    const DocumentMask mask = MaskOfRows(tokens);
    const CpLayout layout = MakeCpLayout(length, cp, LoadBalancer::kDocument, &mask);
    const CpLayout headtail = MakeCpLayout(length, cp, LoadBalancer::kHeadTail, &mask);
    // Every position once, an equal count per rank.
    std::vector<int64_t> seen;
    for (const auto& p : layout.positions) {
      EXPECT_EQ(int64_t(p.size()), length / cp);
      seen.insert(seen.end(), p.begin(), p.end());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(static_cast<size_t>(length));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all);
    // The layout's work is the work of its chunks.
    const int64_t chunks = DocumentChunkCount(length, cp);
    const std::vector<int64_t> work = ChunkWork(length, chunks, &mask);
    EXPECT_EQ(std::accumulate(layout.work.begin(), layout.work.end(), int64_t{0}),
              std::accumulate(work.begin(), work.end(), int64_t{0}));
    const double ours = Imbalance(layout.work);
    EXPECT_LE(ours, Imbalance(headtail.work) + 1e-12) << "trial " << trial;
    const double best = OptimalImbalance(work, cp);
    EXPECT_GE(ours, best - 1e-12);
    if (best <= 1.05) {
      ++balanced_cases;
      reached += ours <= 1.05;
      EXPECT_LE(ours, 1.05) << "trial " << trial << ": optimum " << best;
    }
  }
  std::printf("balanced placements existed in %d of 300 draws; reached in %d\n", balanced_cases,
              reached);
  EXPECT_GT(balanced_cases, 150);
}

TEST(DocumentBalancer, SameInputsSamePlacement) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int64_t> len(1, 90);
  const DocumentMask mask = MaskOfRows({PackedRow(512, [&] { return len(rng); })});
  const CpLayout a = MakeCpLayout(512, 4, LoadBalancer::kDocument, &mask);
  const CpLayout b = MakeCpLayout(512, 4, LoadBalancer::kDocument, &mask);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.work, b.work);
}

TEST(DocumentBalancer, PlainCausalBalancesLikeHeadTail) {
  const CpLayout layout = MakeCpLayout(1024, 4, LoadBalancer::kDocument, nullptr);
  EXPECT_LE(Imbalance(layout.work), 1.0 + 1e-3);
}

}  // namespace
}  // namespace ringtrain
