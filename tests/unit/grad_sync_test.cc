// Gradient and loss reduction over real Gloo groups (ranks as threads): every rank ends with the
// sum of every rank's gradients, bitwise equal across ranks, whatever the bucketing; a parameter
// without a gradient contributes zeros; a bfloat16 reduction rounds to bfloat16 and widens back;
// failures come out as CommError naming the collective.
#include "worker/engine/parallel/grad_sync.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/unit/thread_world.h"

namespace ringtrain {
namespace {

// Rank r's parameters: shapes (3, 5), (7,), (2, 2, 2), with gradients seeded by r (a generator of
// their own: the ranks are threads, and torch's default generator is shared); the second has no
// gradient on odd ranks.
std::vector<at::Tensor> RankParams(int64_t rank) {
  at::Generator generator = at::detail::createCPUGenerator(100 + rank);
  std::vector<at::Tensor> params = {torch::zeros({3, 5}).requires_grad_(),
                                    torch::zeros({7}).requires_grad_(),
                                    torch::zeros({2, 2, 2}).requires_grad_()};
  for (size_t i = 0; i < params.size(); ++i) {
    if (i == 1 && rank % 2 == 1) continue;
    params[i].mutable_grad() = torch::randn(params[i].sizes(), generator);
  }
  return params;
}

// The expected sums, computed independently: gradients added in rank order in float64.
std::vector<at::Tensor> ExpectedSums(int64_t world) {
  std::vector<at::Tensor> sums;
  for (int64_t r = 0; r < world; ++r) {
    const auto params = RankParams(r);
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor g = params[i].grad().defined()
                               ? params[i].grad().to(torch::kFloat64)
                               : torch::zeros(params[i].sizes(), torch::kFloat64);
      if (r == 0) {
        sums.push_back(g.clone());
      } else {
        sums[i] += g;
      }
    }
  }
  return sums;
}

class GradSyncTest : public ::testing::TestWithParam<int64_t> {};  // bucket bytes

TEST_P(GradSyncTest, EveryRankGetsTheSumOfAllGradients) {
  const int64_t world = 3;
  const auto expected = ExpectedSums(world);
  std::vector<std::vector<at::Tensor>> results(world);
  std::vector<int64_t> bytes_sent(world);
  RunOnThreads(world, world, [&](int64_t r, Communicator& comm) {
    auto params = RankParams(r);
    AllReduceGradients(comm, params, GetParam());
    for (const auto& p : params) results[r].push_back(p.grad().clone());
    bytes_sent[r] = comm.stats().bytes_sent;
  });
  for (int64_t r = 0; r < world; ++r) {
    ASSERT_EQ(results[r].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(results[r][i].to(torch::kFloat64), expected[i], 0, 1e-6))
          << "rank " << r << " param " << i;
      EXPECT_TRUE(torch::equal(results[r][i], results[0][i])) << "rank " << r << " param " << i;
    }
    EXPECT_EQ(bytes_sent[r], (15 + 7 + 8) * 4) << "every gradient byte sent once";
  }
}

// One bucket for everything; one bucket per parameter; the default.
INSTANTIATE_TEST_SUITE_P(Buckets, GradSyncTest, ::testing::Values(int64_t{1} << 20, 4, 25 << 20));

// mixed_precision_reduce = bfloat16: the buckets are rounded to bfloat16 and summed in it, then
// widened back, so every result is a bfloat16 value in a float32 .grad, half the bytes are sent,
// and each element is within the rounding bound of grad_sync.h of the exact sum: three inputs
// rounded once and two additions rounded once each, every rounding <= 2^-9 of what it rounds, so
// |error| <= 2^-9 · (3 · Σ_r |g_r|) < 2^-7 · Σ_r |g_r|.
TEST(GradSyncTest, Bfloat16ReduceRoundsAndWidensBack) {
  const int64_t world = 3;
  const auto expected = ExpectedSums(world);
  std::vector<at::Tensor> abs_sums;
  for (int64_t r = 0; r < world; ++r) {
    const auto params = RankParams(r);
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor a = params[i].grad().defined()
                               ? params[i].grad().abs().to(torch::kFloat64)
                               : torch::zeros(params[i].sizes(), torch::kFloat64);
      if (r == 0) {
        abs_sums.push_back(a.clone());
      } else {
        abs_sums[i] += a;
      }
    }
  }
  std::vector<std::vector<at::Tensor>> results(world);
  std::vector<int64_t> bytes_sent(world);
  RunOnThreads(world, world, [&](int64_t r, Communicator& comm) {
    auto params = RankParams(r);
    AllReduceGradients(comm, params, 64, at::kBFloat16);
    for (const auto& p : params) results[r].push_back(p.grad().clone());
    bytes_sent[r] = comm.stats().bytes_sent;
  });
  bool any_rounded = false;
  for (int64_t r = 0; r < world; ++r) {
    ASSERT_EQ(results[r].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const at::Tensor& g = results[r][i];
      EXPECT_EQ(g.scalar_type(), torch::kFloat) << "rank " << r << " param " << i;
      EXPECT_TRUE(torch::equal(g, g.to(torch::kBFloat16).to(torch::kFloat)))
          << "rank " << r << " param " << i << ": not a bfloat16 value";
      const at::Tensor error = (g.to(torch::kFloat64) - expected[i]).abs();
      EXPECT_TRUE((error <= abs_sums[i] * std::ldexp(1.0, -7)).all().item<bool>())
          << "rank " << r << " param " << i << ": max error " << error.max().item<double>();
      any_rounded = any_rounded || (error > 1e-6).any().item<bool>();
      EXPECT_TRUE(torch::equal(g, results[0][i])) << "rank " << r << " param " << i;
    }
    EXPECT_EQ(bytes_sent[r], (15 + 7 + 8) * 2) << "bfloat16: two bytes per gradient element";
  }
  EXPECT_TRUE(any_rounded) << "bfloat16 gave the float32 sums: nothing was rounded";
}

// Through host buffers (what Gloo does for CUDA ranks, here on CPU tensors): the same bits.
TEST(GradSyncTest, StagingThroughHostChangesNothing) {
  const int64_t world = 3;
  std::vector<std::vector<at::Tensor>> direct(world), staged(world);
  std::vector<double> loss_direct(world), loss_staged(world);
  std::vector<std::vector<std::vector<double>>> figures(world);
  for (const bool stage : {false, true}) {
    RunOnThreads(
        world, world,
        [&](int64_t r, Communicator& comm) {
          auto params = RankParams(r);
          AllReduceGradients(comm, params, 64);
          for (const auto& p : params) (stage ? staged : direct)[r].push_back(p.grad().clone());
          (stage ? loss_staged : loss_direct)[r] = AllReduceSum(comm, 0.1 * double(r + 1));
          if (stage) figures[r] = comm.AllGatherDoubles({double(r), 0.5});
        },
        stage);
  }
  for (int64_t r = 0; r < world; ++r) {
    ASSERT_EQ(staged[r].size(), direct[r].size());
    for (size_t i = 0; i < direct[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(staged[r][i], direct[r][i])) << "rank " << r << " param " << i;
    }
    EXPECT_EQ(loss_staged[r], loss_direct[r]);
    ASSERT_EQ(figures[r].size(), size_t(world));
    for (int64_t j = 0; j < world; ++j) {
      EXPECT_EQ(figures[r][j], (std::vector<double>{double(j), 0.5}));
    }
  }
}

TEST(AllReduceSumTest, SumsDoublesExactly) {
  std::vector<double> sums(4);
  RunOnThreads(4, 2, [&](int64_t r, Communicator& comm) {
    sums[r] = AllReduceSum(comm, 0.25 * double(r + 1));
  });
  for (double s : sums) EXPECT_EQ(s, 2.5);
}

TEST(CommCallTest, FailuresBecomeCommErrorsNamingTheCall) {
  try {
    CommCall("all-reduce of gradients", []() -> int { throw std::runtime_error("peer closed"); });
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_EQ(std::string(e.what()), "all-reduce of gradients failed: peer closed");
  }
  // A failed wait (already a CommError) still gets the name of the call around it: the peer.
  try {
    CommCall("ring attention: receive of K/V from cp rank 1",
             []() -> int { throw CommError("Connection closed by peer"); });
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_EQ(std::string(e.what()),
              "ring attention: receive of K/V from cp rank 1 failed: Connection closed by peer");
  }
}

}  // namespace
}  // namespace ringtrain
