// blocks_bench: the step's parts outside the GEMMs, fused against the ATen chains they replace,
// and the attention kernel at each CPU level — figures for issue 32, printed as a table.
//
//   blocks_bench [--seq 2048] [--dim 256] [--heads 8] [--kv-heads 4] [--ffn 768] [--threads 2]
//                [--reps 5] [--vocabs 256,32768] [--adamw-params 16777216]
//
// Each figure is the median of --reps timed forward+backward calls after one untimed call, on
// random inputs of the suite's shape (batch 1, L = --seq):
//   - RMSNorm (L, C), RoPE on q (L, H, D) and k (L, Hk, D) with the transpose the attention wants,
//     SwiGLU (L, F): fused_blocks.h at every level this CPU has, and the ATen chain of llama.cc;
//   - cpu_flash attention (causal, H, Hk, D = C / H) at every level;
//   - the loss: the chunked head (chunked_loss.h) against F.cross_entropy on the whole logits at
//     each vocabulary, time and the peak CPU tensor bytes above the inputs (the counting
//     allocator of worker/trainer/tensor_memory.h);
//   - AdamW's update of --adamw-params float32 parameters: the one pass (optim/adamw.h) at every
//     level against torch.optim.AdamW's single-tensor ATen chain, alone and with a snapshot's copy
//     of the new state (written in the same pass; the chain then copies it, as a snapshot did).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "worker/engine/kernels/block_kernel.h"
#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/model/chunked_loss.h"
#include "worker/engine/model/fused_blocks.h"
#include "worker/engine/model/rope.h"
#include "worker/engine/optim/adamw.h"
#include "worker/trainer/tensor_memory.h"

namespace {

using Clock = std::chrono::steady_clock;
using ringtrain::CpuIsa;

struct Options {
  int64_t seq = 2048, dim = 256, heads = 8, kv_heads = 4, ffn = 768, threads = 2, reps = 5;
  int64_t adamw_params = int64_t(1) << 24;
  std::vector<int64_t> vocabs = {256, 32768};
};

int64_t Int(const char* s) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v <= 0) {
    std::fprintf(stderr, "blocks_bench: '%s' is not a positive integer\n", s);
    std::exit(2);
  }
  return v;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "blocks_bench: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--seq")
      o.seq = Int(v);
    else if (a == "--dim")
      o.dim = Int(v);
    else if (a == "--heads")
      o.heads = Int(v);
    else if (a == "--kv-heads")
      o.kv_heads = Int(v);
    else if (a == "--ffn")
      o.ffn = Int(v);
    else if (a == "--threads")
      o.threads = Int(v);
    else if (a == "--reps")
      o.reps = Int(v);
    else if (a == "--adamw-params")
      o.adamw_params = Int(v);
    else if (a == "--vocabs") {
      o.vocabs.clear();
      for (absl::string_view p : absl::StrSplit(v, ','))
        o.vocabs.push_back(Int(std::string(p).c_str()));
    } else {
      std::fprintf(stderr, "blocks_bench: unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

double MedianSeconds(int64_t reps, const std::function<void()>& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int64_t r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

at::Tensor Leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(); }

void Row(const std::string& what, double fused, double chain) {
  std::printf("%-44s %9.3f ms %9.3f ms %7.2fx\n", what.c_str(), fused * 1e3, chain * 1e3,
              chain / fused);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  ringtrain::InstallCpuTensorCounter();
  at::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(0);
  const int64_t L = o.seq, C = o.dim, D = o.dim / o.heads;
  std::printf(
      "blocks_bench: L %lld, C %lld, H %lld, Hk %lld, D %lld, F %lld, %lld thread(s), "
      "this CPU: %s\n",
      (long long)L, (long long)C, (long long)o.heads, (long long)o.kv_heads, (long long)D,
      (long long)o.ffn, (long long)o.threads, ringtrain::CpuIsaName(ringtrain::DetectedCpuIsa()));
  std::printf("%-44s %12s %12s %8s\n", "fwd+bwd", "ours", "ATen chain", "speed-up");

  const at::Tensor x = torch::randn({1, L, C}), w = torch::rand({C}) + 0.5,
                   dy = torch::randn({1, L, C});
  const ringtrain::RotaryTables rope(D, L, 500000.0);
  const at::Tensor positions = torch::arange(L, torch::kLong);
  const at::Tensor q = torch::randn({1, L, o.heads, D}), k = torch::randn({1, L, o.kv_heads, D});
  const at::Tensor dq = torch::randn({1, o.heads, L, D}), dk = torch::randn({1, o.kv_heads, L, D});
  const at::Tensor a = torch::randn({1, L, o.ffn}), b = torch::randn({1, L, o.ffn}),
                   dh = torch::randn({1, L, o.ffn});

  auto norm = [&](bool fused) {
    return MedianSeconds(o.reps, [&] {
      const at::Tensor xl = Leaf(x), wl = Leaf(w);
      at::Tensor y;
      if (fused) {
        y = ringtrain::FusedRmsNorm(xl, wl, 1e-5);
      } else {
        y = xl * torch::rsqrt(xl.pow(2).mean(-1, true) + 1e-5) * wl;
      }
      y.backward(dy);
    });
  };
  auto rotary = [&](bool fused) {
    return MedianSeconds(o.reps, [&] {
      const at::Tensor ql = Leaf(q), kl = Leaf(k);
      at::Tensor qo, ko;
      if (fused) {
        std::tie(qo, ko) = ringtrain::FusedRopeQK(ql, kl, rope.cos(), rope.sin(), positions);
      } else {
        qo = rope.Apply(ql, positions).transpose(1, 2).contiguous();
        ko = rope.Apply(kl, positions).transpose(1, 2).contiguous();
      }
      torch::autograd::backward({qo, ko}, {dq, dk});
    });
  };
  auto swiglu = [&](bool fused) {
    return MedianSeconds(o.reps, [&] {
      const at::Tensor al = Leaf(a), bl = Leaf(b);
      const at::Tensor h = fused ? ringtrain::FusedSwiGlu(al, bl) : torch::silu(al) * bl;
      h.backward(dh);
    });
  };
  const double norm_chain = norm(false), rope_chain = rotary(false), swiglu_chain = swiglu(false);
  for (CpuIsa isa : ringtrain::AvailableCpuIsas()) {
    ringtrain::ScopedCpuIsa level(isa);
    const std::string at = std::string(" (") + ringtrain::CpuIsaName(isa) + ")";
    Row("RMSNorm" + at, norm(true), norm_chain);
    Row("RoPE q and k + transpose" + at, rotary(true), rope_chain);
    Row("SwiGLU" + at, swiglu(true), swiglu_chain);
  }

  // The attention kernel at each level, against the widest level.
  const auto kernel =
      ringtrain::MakeBlockKernel(ringtrain::AttentionKernelKind::kCpuFlash, c10::Device(c10::kCPU));
  const at::Tensor aq = torch::randn({1, o.heads, L, D}), ak = torch::randn({1, o.kv_heads, L, D}),
                   av = torch::randn({1, o.kv_heads, L, D}),
                   adout = torch::randn({1, o.heads, L, D});
  ringtrain::BlockPositions pos;
  for (int64_t i = 0; i < L; ++i) pos.positions.push_back(i);
  std::vector<std::pair<std::string, double>> attention;
  for (CpuIsa isa : ringtrain::AvailableCpuIsas()) {
    ringtrain::ScopedCpuIsa level(isa);
    attention.emplace_back(ringtrain::CpuIsaName(isa), MedianSeconds(o.reps, [&] {
                             const auto fwd = kernel->Forward(aq, ak, av, pos, pos, 0.125);
                             const auto stats = ringtrain::MakeFinalStats(fwd.out, fwd.lse, adout);
                             kernel->Backward(aq, ak, av, adout, stats, pos, pos, 0.125);
                           }));
  }
  for (const auto& [name, seconds] : attention) {
    Row("cpu_flash attention (" + name + "; vs baseline)", seconds, attention.front().second);
  }

  // The loss at each vocabulary.
  std::printf("%-44s %12s %12s %8s\n", "loss fwd+bwd", "chunked", "whole", "ratio");
  for (int64_t vocab : o.vocabs) {
    const at::Tensor h = torch::randn({L, C}), head = torch::randn({vocab, C}) * 0.05;
    const at::Tensor labels = torch::randint(vocab, {L}, torch::kLong);
    auto loss = [&](bool chunked, int64_t* peak) {
      return MedianSeconds(o.reps, [&] {
        const at::Tensor hl = Leaf(h), wl = Leaf(head);
        const ringtrain::ScopedCpuTensorPeak memory;
        at::Tensor l;
        if (chunked) {
          l = ringtrain::ChunkedCrossEntropySum(hl, wl, labels);
        } else {
          l = torch::nn::functional::cross_entropy(
              at::linear(hl, wl), labels,
              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
        }
        l.backward();
        *peak = memory.extra_bytes();
      });
    };
    int64_t peak_chunked = 0, peak_whole = 0;
    const double t_chunked = loss(true, &peak_chunked), t_whole = loss(false, &peak_whole);
    const std::string v = "V " + std::to_string(vocab);
    std::printf("%-44s %9.3f ms %9.3f ms %7.2fx\n", ("time, " + v).c_str(), t_chunked * 1e3,
                t_whole * 1e3, t_chunked / t_whole);
    std::printf("%-44s %8.1f MiB %8.1f MiB %7.2fx\n", ("peak tensor memory, " + v).c_str(),
                peak_chunked / 1048576.0, peak_whole / 1048576.0,
                double(peak_chunked) / double(peak_whole));
  }

  // AdamW's update (lr 1e-4, PyTorch's defaults otherwise), and with a snapshot's copy.
  std::printf("%-44s %12s %12s %8s\n", "AdamW update", "one pass", "ATen chain", "speed-up");
  const int64_t n = o.adamw_params;
  at::Tensor param = torch::randn({n}).requires_grad_();
  param.mutable_grad() = torch::randn({n});
  ringtrain::AdamW adamw({{"w", param}}, {});
  const std::vector<at::Tensor> copies = {torch::empty({n}), torch::empty({n}), torch::empty({n})};
  at::Tensor m = torch::zeros({n}), v = torch::zeros({n});
  auto chain = [&](bool copy) {
    return MedianSeconds(o.reps, [&] {
      torch::NoGradGuard no_grad;
      const at::Tensor p = param.detach(), g = param.grad();
      p.mul_(1 - 1e-4 * 0.1);
      m.mul_(0.9).add_(g, 0.1);
      v.mul_(0.95).addcmul_(g, g, 0.05);
      p.addcdiv_(m, (v.sqrt() / 0.2).add_(1e-8), -1e-3);
      if (copy) {
        copies[0].copy_(p);
        copies[1].copy_(m);
        copies[2].copy_(v);
      }
    });
  };
  const double chain_alone = chain(false), chain_copy = chain(true);
  const std::string params = std::to_string(n) + " params";
  for (CpuIsa isa : ringtrain::AvailableCpuIsas()) {
    ringtrain::ScopedCpuIsa level(isa);
    const std::string at = std::string(" (") + ringtrain::CpuIsaName(isa) + ")";
    Row(params + at, MedianSeconds(o.reps, [&] { adamw.Step(1e-4); }), chain_alone);
    Row(params + " + snapshot copy" + at, MedianSeconds(o.reps, [&] { adamw.Step(1e-4, copies); }),
        chain_copy);
  }
  return 0;
}
