// The BRGeMM GEMM (kernels/brgemm_matmul.h) against at::mm in float64, over ragged block edges,
// leading dims wider than the matrices and an empty K; bitwise repeatable and the same on 1 and 2
// threads. The projection built on it (model/brgemm_linear.h): forward and both gradients against
// at::linear and float64, and where it applies. Skipped, saying why, on a CPU without AVX-512.
#include "worker/engine/model/brgemm_linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/tensor_compare.h"
#include "worker/engine/kernels/brgemm_matmul.h"
#include "worker/engine/kernels/cpu_isa.h"

namespace ringtrain {
namespace {

bool HasBrgemm() {
  const std::vector<F32Gemm> gemms = AvailableF32Gemms();
  return std::find(gemms.begin(), gemms.end(), F32Gemm::kBrgemm) != gemms.end();
}

#define SKIP_WITHOUT_BRGEMM()                                           \
  if (!HasBrgemm()) {                                                   \
    GTEST_SKIP() << "BRGeMM needs AVX-512; this CPU's widest level is " \
                 << CpuIsaName(DetectedCpuIsa());                       \
  }

// C = A·B through BrgemmMatmul on the (m, n, k) corner of wider matrices (leading dims + 3).
at::Tensor Matmul(const at::Tensor& a, const at::Tensor& b, int64_t m, int64_t n, int64_t k) {
  at::Tensor c = torch::full({m, n + 3}, 7.0f);
  BrgemmMatmul(m, n, k, a.data_ptr<float>(), a.size(1), b.data_ptr<float>(), b.size(1),
               c.data_ptr<float>(), n + 3);
  EXPECT_TRUE(torch::equal(c.narrow(1, n, 3), torch::full({m, 3}, 7.0f)))
      << "wrote outside the m × n corner";
  return c.narrow(1, 0, n);
}

TEST(BrgemmMatmul, MatchesFloat64OverRaggedBlocksAndWideLeadingDims) {
  SKIP_WITHOUT_BRGEMM();
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{1, 1, 1}, Shape{300, 333, 517}, Shape{128, 256, 256},
                        Shape{129, 257, 255}, Shape{2048, 64, 32}, Shape{7, 704, 1000}}) {
    SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k);
    torch::manual_seed(3);
    const at::Tensor a = torch::randn({s.m, s.k + 5}), b = torch::randn({s.k, s.n + 2});
    const at::Tensor got = Matmul(a, b, s.m, s.n, s.k);
    const at::Tensor want =
        at::mm(a.narrow(1, 0, s.k).to(torch::kFloat64), b.narrow(1, 0, s.n).to(torch::kFloat64));
    // float32 accumulation of k products of unit normals: error ~ sqrt(k)·2^-24 of sqrt(k).
    EXPECT_LE(MaxDiff(got, want), 1e-6 * double(s.k) + 1e-6);
  }
}

TEST(BrgemmMatmul, AnEmptyKGivesZeros) {
  SKIP_WITHOUT_BRGEMM();
  const at::Tensor a = torch::randn({5, 1}), b = torch::randn({1, 6});
  EXPECT_TRUE(torch::equal(Matmul(a, b, 5, 6, 0), torch::zeros({5, 6})));
}

TEST(BrgemmMatmul, SameBitsTwiceAndOnOneOrTwoThreads) {
  SKIP_WITHOUT_BRGEMM();
  torch::manual_seed(4);
  const at::Tensor a = torch::randn({700, 900}), b = torch::randn({900, 600});
  const int saved = at::get_num_threads();
  at::set_num_threads(2);
  const at::Tensor two = Matmul(a, b, 700, 600, 900), again = Matmul(a, b, 700, 600, 900);
  at::set_num_threads(1);
  const at::Tensor one = Matmul(a, b, 700, 600, 900);
  at::set_num_threads(saved);
  EXPECT_TRUE(torch::equal(two, again));
  EXPECT_TRUE(torch::equal(two, one));
  // 128 rows: 64-row blocks on two threads, one 128-row block on one; the same bits.
  const at::Tensor narrow_one = Matmul(a, b, 128, 200, 900);
  at::set_num_threads(2);
  const at::Tensor narrow_two = Matmul(a, b, 128, 200, 900);
  at::set_num_threads(saved);
  EXPECT_TRUE(torch::equal(narrow_one, narrow_two));
}

// A given as its transpose (k × m, wider leading dim): the bits of BrgemmMatmul on ATen's
// transpose, over tiles of 16 and ragged edges, on one thread or two, accumulating or not.
TEST(BrgemmMatmul, TransposedAIsTheSameBitsAsTransposingFirst) {
  SKIP_WITHOUT_BRGEMM();
  struct Shape {
    int64_t m, n, k;
  };
  const int saved = at::get_num_threads();
  for (const Shape s :
       {Shape{1, 1, 1}, Shape{16, 16, 16}, Shape{300, 333, 517}, Shape{128, 256, 256},
        Shape{129, 257, 255}, Shape{704, 256, 2048}, Shape{17, 5, 31}}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k << ", " << threads);
      at::set_num_threads(threads);
      torch::manual_seed(6);
      const at::Tensor a_t = torch::randn({s.k, s.m + 3}), b = torch::randn({s.k, s.n});
      const at::Tensor a = a_t.narrow(1, 0, s.m).t().contiguous();
      for (bool accumulate : {false, true}) {
        at::Tensor want = torch::randn({s.m, s.n}), got = want.clone();
        BrgemmMatmul(s.m, s.n, s.k, a.data_ptr<float>(), s.k, b.data_ptr<float>(), s.n,
                     want.data_ptr<float>(), s.n, accumulate);
        BrgemmMatmulTransposedA(s.m, s.n, s.k, a_t.data_ptr<float>(), s.m + 3, b.data_ptr<float>(),
                                s.n, got.data_ptr<float>(), s.n, accumulate);
        EXPECT_TRUE(torch::equal(got, want));
      }
    }
  }
  at::set_num_threads(saved);
}

// Both ways of the weight gradient: more out features than in and fewer.
class BrgemmLinearTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(BrgemmLinearTest, ForwardAndGradientsMatchAtLinearAndFloat64) {
  SKIP_WITHOUT_BRGEMM();
  const auto [in, out] = GetParam();
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({2, 333, in}), w = torch::randn({out, in}) * 0.1;
  const at::Tensor dy = torch::randn({2, 333, out});
  const at::Tensor xb = Leaf(x), wb = Leaf(w);
  const at::Tensor y = BrgemmLinear(xb, wb);
  y.backward(dy);
  const at::Tensor xa = Leaf(x), wa = Leaf(w);
  const at::Tensor ya = at::linear(xa, wa);
  ya.backward(dy);
  const at::Tensor x64 = Leaf(x.to(torch::kFloat64)), w64 = Leaf(w.to(torch::kFloat64));
  at::linear(x64, w64).backward(dy.to(torch::kFloat64));
  ASSERT_EQ(y.sizes(), ya.sizes());
  for (const auto& [got, aten, exact] : {std::tuple{y, ya, at::linear(x64, w64)},
                                         {xb.grad(), xa.grad(), x64.grad()},
                                         {wb.grad(), wa.grad(), w64.grad()}}) {
    EXPECT_LE(RelDiff(got, aten), 1e-5);
    // No further from float64 than ATen's float32 is, give or take its rounding.
    EXPECT_LE(MaxDiff(got, exact), 2 * MaxDiff(aten, exact) + 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(InOut, BrgemmLinearTest,
                         ::testing::Values(std::pair<int64_t, int64_t>{130, 301},
                                           std::pair<int64_t, int64_t>{300, 70}),
                         [](const auto& info) {
                           return "in" + std::to_string(info.param.first) + "_out" +
                                  std::to_string(info.param.second);
                         });

TEST(BrgemmLinear, AppliesToFloat32CpuTensorsWhereBrgemmIsTheEngine) {
  const at::Tensor x = torch::randn({4, 8}), w = torch::randn({3, 8});
  EXPECT_EQ(BrgemmLinearApplies(x, w), ActiveF32Gemm() == F32Gemm::kBrgemm);
  EXPECT_FALSE(BrgemmLinearApplies(x.to(torch::kBFloat16), w.to(torch::kBFloat16)));
  EXPECT_FALSE(BrgemmLinearApplies(x.to(torch::kFloat64), w.to(torch::kFloat64)));
}

TEST(BrgemmLinear, RefusesMismatchedFeatures) {
  SKIP_WITHOUT_BRGEMM();
  try {
    BrgemmLinear(torch::randn({4, 8}), torch::randn({3, 9}));
    FAIL() << "8 features against a weight of 9 were accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("x has 8 features, the weight takes 9"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ringtrain
