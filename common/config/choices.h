// The config's closed choices as enums. job_config.cc parses each TOML spelling once; everything
// downstream (the engine, the trainer, the coordinator) switches on the enum and never compares
// strings. Torch-free and TOML-free, so the engine's libraries can include it.
#ifndef RINGTRAIN_COMMON_CONFIG_CHOICES_H_
#define RINGTRAIN_COMMON_CONFIG_CHOICES_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringtrain {

enum class JobMode { kTrain, kEval };                // job.mode
enum class DatasetKind { kSynthetic, kText, kBin };  // training.dataset, validation.dataset
enum class TokenDtype { kUint16, kUint32 };          // training.token_dtype (bin only)
enum class SamplerKind { kSequential, kRandom };     // training.sampler
enum class OptimizerName { kAdamW };                 // optimizer.name
enum class DecayType { kLinear, kCosine };           // lr_scheduler.decay_type
enum class LoadBalancer {
  kHeadTail,
  kNone,
  kDocument
};                                                  // parallelism.context_parallel_load_balancer
enum class RotateMethod { kAllToAll, kAllGather };  // parallelism.context_parallel_rotate_method
enum class MixedPrecision { kFloat32, kBFloat16 };  // training.mixed_precision_param
enum class CommBackend { kAuto, kNccl, kGloo };     // comm.backend
enum class AttentionKernelKind {
  kAuto,
  kCpuFlash,
  kTorchFlash,
  kTiled
};  // training.attention_kernel
enum class ReshardAfterForward {
  kDefault,
  kAlways,
  kNever
};                                                   // parallelism.fsdp_reshard_after_forward
enum class AcMode { kNone, kFull, kSelective };      // activation_checkpoint.mode
enum class FsdpGradientSync { kMicroBatch, kStep };  // parallelism.fsdp_gradient_sync
enum class ContextParallelMethod {
  kRing,
  kUlysses,
  kHybrid
};                                                  // parallelism.context_parallel_method
enum class RopeType { kDefault, kLlama3 };          // model.rope_type
enum class AttnMaskType { kCausal, kBlockCausal };  // model.attn_mask_type
enum class AsyncMode { kDisabled, kAsync };         // checkpoint.async_mode

// The config-file spellings of a choice, in enum order.
template <class E>
struct ChoiceSpelling;
template <>
struct ChoiceSpelling<JobMode> {
  static constexpr std::array<const char*, 2> kNames = {"train", "eval"};
};
template <>
struct ChoiceSpelling<DatasetKind> {
  static constexpr std::array<const char*, 3> kNames = {"synthetic", "text", "bin"};
};
template <>
struct ChoiceSpelling<TokenDtype> {
  static constexpr std::array<const char*, 2> kNames = {"uint16", "uint32"};
};
template <>
struct ChoiceSpelling<SamplerKind> {
  static constexpr std::array<const char*, 2> kNames = {"sequential", "random"};
};
template <>
struct ChoiceSpelling<OptimizerName> {
  static constexpr std::array<const char*, 1> kNames = {"AdamW"};
};
template <>
struct ChoiceSpelling<DecayType> {
  static constexpr std::array<const char*, 2> kNames = {"linear", "cosine"};
};
template <>
struct ChoiceSpelling<LoadBalancer> {
  static constexpr std::array<const char*, 3> kNames = {"headtail", "none", "document"};
};
template <>
struct ChoiceSpelling<RotateMethod> {
  static constexpr std::array<const char*, 2> kNames = {"alltoall", "allgather"};
};
template <>
struct ChoiceSpelling<MixedPrecision> {
  static constexpr std::array<const char*, 2> kNames = {"float32", "bfloat16"};
};
template <>
struct ChoiceSpelling<CommBackend> {
  static constexpr std::array<const char*, 3> kNames = {"auto", "nccl", "gloo"};
};
template <>
struct ChoiceSpelling<AttentionKernelKind> {
  static constexpr std::array<const char*, 4> kNames = {"auto", "cpu_flash", "torch_flash",
                                                        "tiled"};
};
template <>
struct ChoiceSpelling<ContextParallelMethod> {
  static constexpr std::array<const char*, 3> kNames = {"ring", "ulysses", "hybrid"};
};

template <>
struct ChoiceSpelling<RopeType> {
  static constexpr std::array<const char*, 2> kNames = {"default", "llama3"};
};
template <>
struct ChoiceSpelling<AttnMaskType> {
  static constexpr std::array<const char*, 2> kNames = {"causal", "block_causal"};
};

// Spellings an earlier release used, still read (with a warning) as the value they name.
template <class E>
struct ChoiceOldSpellings {
  static constexpr std::array<std::pair<const char*, E>, 0> kOld = {};
};
template <>
struct ChoiceOldSpellings<AttentionKernelKind> {
  // The fused CPU kernel was "ringtrain", which read like "ring".
  static constexpr std::array<std::pair<const char*, AttentionKernelKind>, 1> kOld = {
      {{"ringtrain", AttentionKernelKind::kCpuFlash}}};
};

template <>
struct ChoiceSpelling<ReshardAfterForward> {
  static constexpr std::array<const char*, 3> kNames = {"default", "always", "never"};
};
template <>
struct ChoiceSpelling<FsdpGradientSync> {
  static constexpr std::array<const char*, 2> kNames = {"micro_batch", "step"};
};
template <>
struct ChoiceSpelling<AsyncMode> {
  static constexpr std::array<const char*, 2> kNames = {"disabled", "async"};
};
template <>
struct ChoiceSpelling<AcMode> {
  static constexpr std::array<const char*, 3> kNames = {"none", "full", "selective"};
};

// "headtail" for LoadBalancer::kHeadTail: the spelling a config file uses, for logs and messages.
template <class E>
const char* ChoiceName(E value) {
  return ChoiceSpelling<E>::kNames[static_cast<size_t>(value)];
}

// Every spelling of E, in enum order (for "must be one of" messages).
template <class E>
std::vector<std::string> ChoiceNames() {
  return {ChoiceSpelling<E>::kNames.begin(), ChoiceSpelling<E>::kNames.end()};
}

// The enum value spelled `text` exactly (case-sensitive, as TOML keys are), or nullopt.
template <class E>
std::optional<E> ParseChoice(absl::string_view text) {
  const auto& names = ChoiceSpelling<E>::kNames;
  for (size_t i = 0; i < names.size(); ++i) {
    if (text == names[i]) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_CHOICES_H_
