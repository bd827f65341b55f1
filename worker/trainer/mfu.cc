#include "worker/trainer/mfu.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/plan/model_flops.h"
#include "worker/engine/kernels/brgemm_matmul.h"
#include "worker/engine/kernels/cpu_isa.h"
#ifdef RINGTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Keeps start-up short: the measurement ends within this, a call of the largest size excepted.
constexpr double kGemmBudgetSeconds = 0.25;

// Whether the model's GEMMs in `dtype` run on BRGeMM (float32 where it is the engine, cpu_isa.h's
// F32Gemm) rather than at::mm, so the peak is timed there.
bool BrgemmGemms(at::ScalarType dtype) {
  return dtype == at::kFloat && ActiveF32Gemm() == F32Gemm::kBrgemm;
}

std::optional<double> DevicePeak(const JobConfig& config, const c10::Device& device,
                                 std::string* source) {
  const MixedPrecision compute = config.training.mixed_precision_param;
  const char* dtype = compute == MixedPrecision::kBFloat16 ? "bf16" : "float32";
  if (config.metrics.peak_flops > 0) {
    *source = "metrics.peak_flops";
    return config.metrics.peak_flops;
  }
#ifdef RINGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const std::string name = at::cuda::getDeviceProperties(device.index())->name;
    const std::optional<double> peak = KnownPeakFlops(name, compute);
    if (!peak) {
      RT_LOG(Info) << "no MFU: the peak " << dtype << " FLOP/s of " << name
                   << " is not in the table (common/plan/model_flops.cc); set metrics.peak_flops "
                      "to the device's dense peak to have it";
      return std::nullopt;
    }
    *source = absl::StrCat(name, ", ", dtype, " data sheet");
    return peak;
  }
#endif
  if (!device.is_cpu()) return std::nullopt;
  const at::ScalarType gemm_dtype =
      compute == MixedPrecision::kBFloat16 ? at::kBFloat16 : at::kFloat;
  const double peak = MeasureCpuGemmFlops(gemm_dtype, kGemmBudgetSeconds);
  *source = absl::StrCat(dtype, " GEMM (", BrgemmGemms(gemm_dtype) ? "BRGeMM" : "at::mm",
                         ") measured at start on ", at::get_num_threads(), " thread(s)");
  return peak;
}

}  // namespace

double MfuBasis::Percent(double tokens_per_second) const {
  return MfuPercent(flops_per_token, tokens_per_second, world, peak_per_rank);
}

std::string MfuBasis::Describe() const {
  return absl::StrFormat("%.4g FLOPs/token, peak %.4g FLOP/s a rank (%s) x %d rank%s",
                         flops_per_token, peak_per_rank, peak_source, world, world == 1 ? "" : "s");
}

std::optional<MfuBasis> ChooseMfuBasis(const JobConfig& config, const c10::Device& device,
                                       int64_t world) {
  if (config.metrics.peak_flops < 0 || config.job.mode != JobMode::kTrain) return std::nullopt;
  MfuBasis basis;
  basis.world = world;
  basis.flops_per_token = FlopsPerToken(config.model, config.training.seq_len);
  const std::optional<double> peak = DevicePeak(config, device, &basis.peak_source);
  if (!peak || !(*peak > 0)) return std::nullopt;
  basis.peak_per_rank = *peak;
  return basis;
}

double MeasureCpuGemmFlops(at::ScalarType dtype, double budget_seconds) {
  const auto start = Clock::now();
  const at::NoGradGuard no_grad;
  const bool brgemm = BrgemmGemms(dtype);
  int64_t n = 256;
  at::Tensor a, b, c;
  const auto gemm = [&] {
    if (!brgemm) {
      at::mm(a, b);
      return;
    }
    BrgemmMatmul(n, n, n, a.data_ptr<float>(), n, b.data_ptr<float>(), n, c.data_ptr<float>(), n);
  };
  double seconds = 0;
  for (;;) {
    // Constant operands: a GEMM's speed does not depend on normal values, and the default
    // generator must not move (runs are bitwise, snapshots keep its state).
    a = at::full({n, n}, 0.5, at::TensorOptions().dtype(dtype));
    b = at::full({n, n}, 0.25, at::TensorOptions().dtype(dtype));
    c = at::empty({n, n}, at::TensorOptions().dtype(dtype));
    gemm();  // the first call of a size pays for packing buffers, JIT and thread start-up
    const auto call = Clock::now();
    gemm();
    seconds = SecondsSince(call);
    if (seconds >= 0.02 || n >= 2048 || SecondsSince(start) > budget_seconds / 2) break;
    n *= 2;
  }
  const double flops = 2.0 * double(n) * double(n) * double(n);
  double best = flops / seconds;
  while (SecondsSince(start) < budget_seconds) {
    const auto call = Clock::now();
    gemm();
    best = std::max(best, flops / SecondsSince(call));
  }
  return best;
}

}  // namespace ringtrain
