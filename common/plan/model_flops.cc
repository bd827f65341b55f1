#include "common/plan/model_flops.h"

#include "absl/strings/match.h"
#include "common/config/model_shape.h"
#include "common/plan/memory_plan.h"

namespace ringtrain {
namespace {

// A row of the peak table: the first row whose `name_part` the device's name contains wins, so a
// variant comes before its family ("H100 NVL" before "H100"). Dense figures (the data sheets'
// "with sparsity" halved); 0 where the sheet gives none.
struct KnownDevice {
  const char* name_part;
  double bf16;
  double fp32;
};

constexpr KnownDevice kKnownDevices[] = {
    {"H100 NVL", 835e12, 60e12},   {"H100 PCIe", 756e12, 51e12},
    {"H100", 989e12, 67e12},  // SXM, whose CUDA name says only "H100 80GB HBM3"
    {"H200", 989e12, 67e12},       {"GB200", 2.5e15, 0},
    {"B200", 2.25e15, 0},          {"A100", 312e12, 19.5e12},
    {"A6000", 154.85e12, 38.7e12},
};

}  // namespace

double FlopsPerToken(const ModelSection& model, int64_t seq_len) {
  const double parameters = double(PlannedParameterCount(model));
  const double embedding = model.tie_word_embeddings ? 0.0 : double(model.vocab_size) * model.dim;
  const double attention =
      12.0 * double(model.n_layers) * double(model.n_heads) * double(HeadDim(model)) * seq_len;
  return 6.0 * (parameters - embedding) + attention;
}

std::optional<double> KnownPeakFlops(absl::string_view device_name, MixedPrecision compute) {
  for (const KnownDevice& d : kKnownDevices) {
    if (!absl::StrContains(device_name, d.name_part)) continue;
    const double peak = compute == MixedPrecision::kBFloat16 ? d.bf16 : d.fp32;
    if (peak > 0) return peak;
    return std::nullopt;
  }
  return std::nullopt;
}

double MfuPercent(double flops_per_token, double tokens_per_second, int64_t world,
                  double peak_per_rank) {
  return 100.0 * flops_per_token * tokens_per_second / (double(world) * peak_per_rank);
}

}  // namespace ringtrain
