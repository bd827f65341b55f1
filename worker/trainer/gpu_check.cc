// ringtrain-gpu-check attention [--device cuda:N|cpu]: the attention function on a device against
// the CPU result — the engine's LocalAttentionPlan (the autograd function the model calls) with
// the block kernel a rank would use there, forward and gradients, MHA and GQA, causal, in float32
// and in bfloat16, and on CUDA each fused kernel forced in turn (flash, memory-efficient, cuDNN).
// The reference is the tiled kernel on the CPU in float64 on the inputs as the device sees them
// (bf16 rows: rounded to bf16 first). float32 rows must be within 1e-5; bf16 rows within 0.1 (the
// flash and tiled kernels are within 0.03 on an H200; a kernel that reads its arguments wrongly
// is off by units). A 16-bit kernel that does not run is reported, not failed.
//
// Prints one JSON object per line (tests/gpu/check.sh builds its table from them):
//   {"check":"attention","case":"GQA bf16 flash","out":…,"dq":…,"dk":…,"dv":…,
//    "max_abs_diff":…,"tolerance":1e-05,"ok":true|false[,"error":"…"]}
// Exit status 0 when every row is ok, 1 otherwise, 2 on a usage error.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/device.h"
#include "common/version/version.h"
#include "worker/engine/kernels/block_kernel.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/parallel/comm.h"
#include "worker/trainer/step_report.h"

namespace ringtrain {
namespace {

constexpr double kFloat32Tolerance = 1e-5;
constexpr double kBfloat16Tolerance = 0.1;

struct Result {
  at::Tensor out, dq, dk, dv;
};

BlockPositions Iota(int64_t n) {
  BlockPositions p;
  for (int64_t i = 0; i < n; ++i) p.positions.push_back(i);
  return p;
}

Result Attend(const std::shared_ptr<BlockKernel>& block, const at::Tensor& q, const at::Tensor& k,
              const at::Tensor& v, const at::Tensor& dout, double scale) {
  auto ql = q.detach().clone().requires_grad_(), kl = k.detach().clone().requires_grad_(),
       vl = v.detach().clone().requires_grad_();
  const at::Tensor out =
      std::make_shared<LocalAttentionPlan>(block)->Attend(ql, kl, vl, Iota(q.size(2)), scale);
  const auto g = torch::autograd::grad({out}, {ql, kl, vl}, {dout.to(out.scalar_type())});
  return {out.detach(), g[0], g[1], g[2]};
}

double Diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kCPU).to(at::kDouble) - b.to(at::kCPU).to(at::kDouble))
      .abs()
      .max()
      .item<double>();
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' || c == '\t') ? ' ' : c;
  }
  return out;
}

struct Row {
  std::string name;
  std::optional<double> tolerance;
};

int RunAttention(const c10::Device& device) {
  const int64_t batch = 2, heads = 8, len = 512, dim = 64;
  const double scale = 1.0 / std::sqrt(double(dim));
  bool all_ok = true;
  for (const int64_t kv_heads : {heads, int64_t(2)}) {
    const std::string shape = kv_heads == heads ? "MHA" : "GQA";
    torch::manual_seed(2024);
    const at::Tensor q = torch::randn({batch, heads, len, dim});
    const at::Tensor k = torch::randn({batch, kv_heads, len, dim});
    const at::Tensor v = torch::randn({batch, kv_heads, len, dim});
    const at::Tensor dout = torch::randn({batch, heads, len, dim});
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const bool bf16 = dtype == at::kBFloat16;
      // The CPU result: the tiled kernel in float64 on the inputs as the device sees them.
      auto cpu_input = [&](const at::Tensor& x) { return x.to(dtype).to(at::kDouble); };
      const Result want = Attend(std::make_shared<TiledBlockKernel>(), cpu_input(q), cpu_input(k),
                                 cpu_input(v), dout.to(dtype).to(at::kDouble), scale);
      std::vector<std::pair<std::string, std::shared_ptr<BlockKernel>>> kernels;
      if (device.is_cuda()) {
        kernels.push_back({"auto", std::make_shared<FusedBlockKernel>(FusedBackend::kAuto)});
        if (bf16)
          kernels.push_back({"flash", std::make_shared<FusedBlockKernel>(FusedBackend::kFlash)});
        kernels.push_back(
            {"efficient", std::make_shared<FusedBlockKernel>(FusedBackend::kEfficient)});
        if (bf16)
          kernels.push_back({"cudnn", std::make_shared<FusedBlockKernel>(FusedBackend::kCudnn)});
        kernels.push_back({"tiled", std::make_shared<TiledBlockKernel>()});
      } else {
        kernels.push_back(
            {"cpu-flash", std::make_shared<FusedBlockKernel>(FusedBackend::kCpuFlash)});
        kernels.push_back({"tiled", std::make_shared<TiledBlockKernel>()});
      }
      for (const auto& [name, kernel] : kernels) {
        std::string label = name;
        if (name == "auto") {
          const at::Tensor probe =
              torch::zeros({batch, heads, len, dim}, at::TensorOptions(device).dtype(dtype));
          try {
            label = absl::StrCat(
                "auto→", FusedBackendName(
                             static_cast<FusedBlockKernel&>(*kernel).Resolve(probe, probe, true)));
          } catch (const std::exception&) {
          }
        }
        const std::string case_name =
            absl::StrCat(shape, " ", bf16 ? "bf16" : "fp32", " ", label, " (", device.str(), ")");
        const double tolerance = bf16 ? kBfloat16Tolerance : kFloat32Tolerance;
        JsonRecord row;
        row.Add("check", std::string("attention")).Add("case", case_name);
        try {
          auto on_device = [&](const at::Tensor& x) { return x.to(device).to(dtype); };
          const Result got =
              Attend(kernel, on_device(q), on_device(k), on_device(v), on_device(dout), scale);
          if (device.is_cuda()) torch::cuda::synchronize();
          const double d_out = Diff(got.out, want.out), d_q = Diff(got.dq, want.dq),
                       d_k = Diff(got.dk, want.dk), d_v = Diff(got.dv, want.dv);
          const double worst = std::max({d_out, d_q, d_k, d_v});
          const bool ok = worst <= tolerance;
          all_ok = all_ok && ok;
          row.Add("out", d_out)
              .Add("dq", d_q)
              .Add("dk", d_k)
              .Add("dv", d_v)
              .Add("max_abs_diff", worst);
          row.AddRaw("tolerance", FormatDouble17(tolerance));
          row.AddRaw("ok", ok ? "true" : "false");
        } catch (const std::exception& e) {
          // A 16-bit kernel this GPU or this PyTorch lacks is reported, not failed; auto, tiled
          // and every float32 kernel must run.
          const bool ok = bf16 && name != "auto" && name != "tiled";
          all_ok = all_ok && ok;
          row.AddRaw("tolerance", FormatDouble17(tolerance));
          row.AddRaw("ok", ok ? "true" : "false");
          std::string what = e.what();
          if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
            what = c10_error->what_without_backtrace();
          }
          row.AddRaw("error", "\"" + Escape(what.substr(0, 300)) + "\"");
        }
        std::cout << row.str() << std::endl;
      }
    }
  }
  return all_ok ? 0 : 1;
}

int Usage() {
  std::cerr << "usage: ringtrain-gpu-check attention [--device cuda:N|cpu] | --version\n"
               "  Compares the attention function on the device with the CPU result, forward and\n"
               "  gradients; one JSON object per line. Exit 0 when every float32 row is within\n"
               "  1e-5, 1 otherwise.\n";
  return 2;
}

}  // namespace
}  // namespace ringtrain

int main(int argc, char** argv) {
  using namespace ringtrain;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--version") {
    std::cout << VersionLine("ringtrain-gpu-check") << std::endl;
    return 0;
  }
  if (args.empty() || args[0] != "attention") return Usage();
  std::string device_text = "cuda:0";
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("--device=", 0) == 0) {
      device_text = args[i].substr(9);
    } else if (args[i] == "--device" && i + 1 < args.size()) {
      device_text = args[++i];
    } else {
      return Usage();
    }
  }
  const auto spec = ParseDevice(device_text);
  if (!spec.ok()) {
    std::cerr << "ringtrain-gpu-check: " << spec.status().message() << "\n";
    return 2;
  }
  const c10::Device device(spec->type == DeviceType::kCuda ? c10::kCUDA : c10::kCPU,
                           static_cast<c10::DeviceIndex>(
                               spec->type == DeviceType::kCuda ? std::max(spec->index, 0) : -1));
  if (const absl::Status s = Communicator::CheckDeviceSupported(device); !s.ok()) {
    std::cerr << "ringtrain-gpu-check: " << s.message() << "\n";
    return 1;
  }
  try {
    return RunAttention(device);
  } catch (const std::exception& e) {
    std::cerr << "ringtrain-gpu-check: " << e.what() << "\n";
    return 1;
  }
}
