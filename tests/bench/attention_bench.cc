// attention_bench: the machine's float32 GEMM rate and the attention block kernels'
// forward+backward rate against it (item 2 of tests/bench/README.md), printed as one JSON object
// for ringtrain-bench.
//
//   attention_bench [--kernels tiled,torch_flash] [--head-dims 32,64,128] [--seqs 4096]
//                   [--threads 1,2] [--heads 8] [--kv-heads 4] [--reps 3] [--gemm-size 2048]
//   attention_bench --list-kernels
//
// For every thread count T (at::set_num_threads(T)): the GEMM rate is the faster of at::mm (MKL)
// and a BRGeMM-tiled GEMM (AVX-512 CPUs) of two N × N float32 matrices, 2·N³ FLOPs per call; each
// case is one causal block (B = 1, H query heads, Hk kv heads, L = seq, D = head dim, positions 0 …
// L−1) through MakeBlockKernel(kind, cpu): Forward, then Backward with the forward's own statistics
// and a random dout. FLOPs are the causal attention's useful work, not what a kernel happens to
// compute: S = L(L+1)/2 visible scores per head, forward 4·S·D (Q·Kᵀ and P·V), backward 10·S·D
// (scores recomputed, dV, dP, dQ, dK), so 14·S·D·H per forward+backward; a kernel that computes
// masked-out scores is charged for them in time only. Each figure is the median of --reps timed
// calls after one untimed warm-up call.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config/choices.h"
#include "worker/engine/kernels/block_kernel.h"
#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/kernels/fused_cpu_runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
using ringtrain::AttentionKernelKind;

struct Options {
  std::vector<std::string> kernels = {"tiled", "torch_flash"};
  std::vector<int64_t> head_dims = {32, 64, 128};
  std::vector<int64_t> seqs = {4096};
  std::vector<int64_t> threads = {1, 2};
  int64_t heads = 8;
  int64_t kv_heads = 4;
  int64_t reps = 3;
  int64_t gemm_size = 2048;
};

constexpr char kUsage[] =
    "usage: attention_bench [--kernels tiled,torch_flash] [--head-dims 32,64,128] [--seqs 4096]\n"
    "                       [--threads 1,2] [--heads 8] [--kv-heads 4] [--reps 3]\n"
    "                       [--gemm-size 2048]\n"
    "       attention_bench --list-kernels\n";

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "attention_bench: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

int64_t ParsePositive(const std::string& flag, const std::string& text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 1) {
    Fail(absl::StrFormat("%s: '%s' is not a positive integer", flag, text));
  }
  return value;
}

std::vector<int64_t> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> values;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    values.push_back(ParsePositive(flag, std::string(item)));
  }
  return values;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--list-kernels") {  // the training.attention_kernel values this build knows
      std::puts(absl::StrJoin(ringtrain::ChoiceNames<AttentionKernelKind>(), " ").c_str());
      std::exit(0);
    }
    if (i + 1 >= argc) Fail(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--kernels") {  // may be empty: the GEMM rate alone
      o.kernels = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (flag == "--head-dims") {
      o.head_dims = ParseList(flag, value);
    } else if (flag == "--seqs") {
      o.seqs = ParseList(flag, value);
    } else if (flag == "--threads") {
      o.threads = ParseList(flag, value);
    } else if (flag == "--heads") {
      o.heads = ParsePositive(flag, value);
    } else if (flag == "--kv-heads") {
      o.kv_heads = ParsePositive(flag, value);
    } else if (flag == "--reps") {
      o.reps = ParsePositive(flag, value);
    } else if (flag == "--gemm-size") {
      o.gemm_size = ParsePositive(flag, value);
    } else {
      Fail("unknown flag " + flag);
    }
  }
  for (const std::string& name : o.kernels) {
    if (!ringtrain::ParseChoice<AttentionKernelKind>(name)) {
      Fail(absl::StrFormat("--kernels: unknown kernel '%s'; valid: %s", name,
                           absl::StrJoin(ringtrain::ChoiceNames<AttentionKernelKind>(), ", ")));
    }
  }
  if (o.heads % o.kv_heads != 0) {
    Fail(absl::StrFormat("--heads %d is not a multiple of --kv-heads %d", o.heads, o.kv_heads));
  }
  return o;
}

// The median of `reps` timed calls of `fn` (seconds), after one untimed warm-up call.
template <class Fn>
double MedianSeconds(int64_t reps, Fn fn) {
  fn();
  std::vector<double> times;
  for (int64_t r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return n % 2 == 1 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
}

// C = A·B of N × N float32 matrices out of oneDNN's BRGeMM micro-kernel (the cpu_flash kernel's
// float32 engine where ActiveF32Gemm() is brgemm), as a BLAS would: B packed into contiguous
// 256 × 256 blocks, then 256-row panels of A (each packed likewise) spread over the intra-op
// threads, accumulating over K. Rows 8 KiB apart (N = 2048) would alias in the caches unpacked. N
// must be a multiple of 256. `packed_b`: N² floats of scratch, reused across calls.
void PackedBrgemmMatmul(const at::Tensor& a, const at::Tensor& b, at::Tensor& c,
                        std::vector<float>& packed_b) {
  constexpr int64_t kRows = 256, kBlock = 256;
  const int64_t n = a.size(0), blocks = n / kBlock;
  const float* ap = a.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  float* cp = c.data_ptr<float>();
  // Block (k, j) of B at (k · blocks + j) · 256².
  at::parallel_for(0, blocks * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t k = block / blocks * kBlock, j = block % blocks * kBlock;
      float* dst = packed_b.data() + block * kBlock * kBlock;
      for (int64_t r = 0; r < kBlock; ++r) {
        std::copy_n(bp + (k + r) * n + j, kBlock, dst + r * kBlock);
      }
    }
  });
  at::parallel_for(0, n / kRows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> panel(size_t(kRows * n));  // K block k at k · 64 · 256
    for (int64_t p = begin; p < end; ++p) {
      const int64_t i = p * kRows;
      for (int64_t kb = 0; kb < blocks; ++kb) {
        for (int64_t r = 0; r < kRows; ++r) {
          std::copy_n(ap + (i + r) * n + kb * kBlock, kBlock,
                      panel.data() + (kb * kRows + r) * kBlock);
        }
      }
      for (int64_t jb = 0; jb < blocks; ++jb) {
        for (int64_t kb = 0; kb < blocks; ++kb) {
          ringtrain::fused_cpu_internal::GemmBrgemm(
              kRows, kBlock, kBlock, panel.data() + kb * kRows * kBlock, kBlock,
              packed_b.data() + (kb * blocks + jb) * kBlock * kBlock, kBlock, kb > 0,
              cp + i * n + jb * kBlock, n);
        }
      }
    }
  });
}

// The float32 GEMM rate of N × N matrices: the faster of at::mm (MKL) and, where the CPU has it
// (AVX-512) and N is a multiple of 256, BRGeMM; each printed.
double GemmFlopsPerSecond(int64_t n, int64_t reps) {
  const at::Tensor a = at::randn({n, n});
  const at::Tensor b = at::randn({n, n});
  const double flops = 2.0 * double(n) * double(n) * double(n);
  const double mkl = flops / MedianSeconds(reps, [&] { at::mm(a, b); });
  std::fprintf(stderr, "  GEMM %d×%d float32, at::mm (MKL): %.1f GFLOP/s\n", int(n), int(n),
               mkl / 1e9);
  const std::vector<ringtrain::F32Gemm> engines = ringtrain::AvailableF32Gemms();
  if (n % 256 != 0 ||
      std::find(engines.begin(), engines.end(), ringtrain::F32Gemm::kBrgemm) == engines.end()) {
    return mkl;
  }
  at::Tensor c = at::empty({n, n});
  std::vector<float> packed_b(size_t(n * n));
  const double brgemm = flops / MedianSeconds(reps, [&] { PackedBrgemmMatmul(a, b, c, packed_b); });
  std::fprintf(stderr, "  GEMM %d×%d float32, BRGeMM: %.1f GFLOP/s\n", int(n), int(n),
               brgemm / 1e9);
  if (!at::allclose(c, at::mm(a, b), 1e-4, 1e-3)) Fail("the BRGeMM GEMM disagrees with at::mm");
  return std::max(mkl, brgemm);
}

// One causal block's forward+backward; returns the JSON object of the case.
std::string AttentionCase(const Options& o, const std::string& kernel_name, int64_t head_dim,
                          int64_t seq, int64_t threads, double gemm_rate) {
  const AttentionKernelKind kind = *ringtrain::ParseChoice<AttentionKernelKind>(kernel_name);
  const auto kernel = ringtrain::MakeBlockKernel(kind, c10::Device(c10::kCPU));
  const at::Tensor q = at::randn({1, o.heads, seq, head_dim});     // (B, H, L, D)
  const at::Tensor k = at::randn({1, o.kv_heads, seq, head_dim});  // (B, Hk, L, D)
  const at::Tensor v = at::randn({1, o.kv_heads, seq, head_dim});
  const at::Tensor dout = at::randn({1, o.heads, seq, head_dim});
  ringtrain::BlockPositions pos;
  for (int64_t i = 0; i < seq; ++i) pos.positions.push_back(i);
  const double scale = 1.0 / std::sqrt(double(head_dim));
  int64_t scores_computed = 0;
  const double seconds = MedianSeconds(o.reps, [&] {
    const ringtrain::BlockOutput fwd = kernel->Forward(q, k, v, pos, pos, scale);
    const ringtrain::FinalStats stats = ringtrain::MakeFinalStats(fwd.out, fwd.lse, dout);
    kernel->Backward(q, k, v, dout, stats, pos, pos, scale);
    scores_computed = fwd.scores_computed;
  });
  const double visible = double(seq) * double(seq + 1) / 2;  // S, per head
  const double flops = 14.0 * visible * double(head_dim) * double(o.heads);
  const double rate = flops / seconds;
  std::fprintf(stderr, "  %-12s D %3d  L %6d  %d thread(s): %.3f s  %.1f GFLOP/s  %.0f%% of GEMM\n",
               kernel_name.c_str(), int(head_dim), int(seq), int(threads), seconds, rate / 1e9,
               100 * rate / gemm_rate);
  return absl::StrFormat(
      "{\"kernel\": \"%s\", \"describe\": \"%s\", \"head_dim\": %d, \"seq\": %d, \"heads\": %d, "
      "\"kv_heads\": %d, \"threads\": %d, \"seconds\": %.6g, \"flops\": %.6g, "
      "\"flops_per_second\": %.6g, \"fraction_of_gemm\": %.6g, \"scores_computed\": %d, "
      "\"scores_visible\": %.0f}",
      kernel_name, kernel->Describe(), head_dim, seq, o.heads, o.kv_heads, threads, seconds, flops,
      rate, rate / gemm_rate, scores_computed, visible * double(o.heads));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  std::vector<std::string> gemms, cases;
  for (int64_t threads : o.threads) {
    at::set_num_threads(int(threads));
    const double gemm_rate = GemmFlopsPerSecond(o.gemm_size, o.reps);
    std::fprintf(stderr, "  GEMM %d×%d float32, %d thread(s): %.1f GFLOP/s\n", int(o.gemm_size),
                 int(o.gemm_size), int(threads), gemm_rate / 1e9);
    gemms.push_back(absl::StrFormat("{\"threads\": %d, \"n\": %d, \"flops_per_second\": %.6g}",
                                    threads, o.gemm_size, gemm_rate));
    for (const std::string& kernel : o.kernels) {
      for (int64_t head_dim : o.head_dims) {
        for (int64_t seq : o.seqs) {
          cases.push_back(AttentionCase(o, kernel, head_dim, seq, threads, gemm_rate));
        }
      }
    }
  }
  std::printf("{\"gemm\": [%s],\n \"attention\": [%s]}\n", absl::StrJoin(gemms, ",\n  ").c_str(),
              absl::StrJoin(cases, ",\n  ").c_str());
  return 0;
}
