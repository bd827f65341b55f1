#include "worker/engine/model/initial_values.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

namespace ringtrain {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// (0, 1]: 53 random bits.
double Uniform(uint64_t bits) { return double((bits >> 11) + 1) * 0x1.0p-53; }

struct Distribution {
  bool ones = false;
  double std = 1;
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
};

Distribution DistributionOf(const std::string& name, const ModelArgs& args) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("norm.weight")) return Distribution{true};
  if (name == "tok_embeddings.weight") return Distribution{};
  if (name == "output.weight") {
    const double s = 1.0 / std::sqrt(double(args.dim));
    return Distribution{false, s, -3 * s, 3 * s};
  }
  // layers.N.…
  TORCH_CHECK(name.rfind("layers.", 0) == 0, "no initial values for parameter ", name);
  const int64_t layer_id = std::stoll(name.substr(7));
  const double depth_std = 0.02 / std::sqrt(2.0 * double(layer_id + 1));
  const bool first = ends_with("attention.wq.weight") || ends_with("attention.wk.weight") ||
                     ends_with("attention.wv.weight") || ends_with("feed_forward.w1.weight");
  return Distribution{false, first ? 0.02 : depth_std, -2.0, 2.0};
}

}  // namespace

void FillInitialValues(const std::string& name, const ModelArgs& args, uint64_t seed, int64_t begin,
                       int64_t end, const at::Tensor& out) {
  TORCH_CHECK(out.device().is_cpu() && out.scalar_type() == at::kFloat && out.is_contiguous() &&
                  out.numel() == end - begin,
              "FillInitialValues: out must be ", end - begin, " contiguous float32 CPU elements");
  const Distribution d = DistributionOf(name, args);
  float* data = out.data_ptr<float>();
  if (d.ones) {
    for (int64_t i = 0; i < end - begin; ++i) data[i] = 1.0f;
    return;
  }
  const uint64_t key = SplitMix64(SplitMix64(seed) ^ Fnv1a(name));
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  // Each element depends on its index alone, so the split into threads changes nothing.
  at::parallel_for(begin, end, 1 << 14, [&](int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) {
      double x = 0;
      for (uint64_t attempt = 0;; ++attempt) {
        const uint64_t a = SplitMix64(key ^ SplitMix64(uint64_t(i) * 64 + attempt));
        const uint64_t b = SplitMix64(a);
        x = d.std * std::sqrt(-2.0 * std::log(Uniform(a))) * std::cos(kTwoPi * Uniform(b));
        if (x >= d.low && x <= d.high) break;
      }
      data[i - begin] = float(x);
    }
  });
}

}  // namespace ringtrain
