#include "common/config/config_fields.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/closest_match.h"
#include "common/config/config_limits.h"
#include "common/printable.h"

namespace ringtrain {
namespace config_internal {

namespace {

// The bounds of the table below. Each is far beyond any real run (configs/llama3_8b.toml: dim 4096,
// 32 layers, vocab 128,256, seq_len 8,192) and keeps what is computed from it in range: parameter
// counts (vocab × dim, layers × dim × ffn) and memory plans in int64, token ids in 32 bits, the
// coordinator's 32-bit world sizes, durations in int64 milliseconds.
constexpr int64_t kMaxWidth = int64_t{1} << 16;  // dim, heads, multiple_of
constexpr int64_t kMaxFfn = int64_t{1} << 20;    // intermediate_size (Llama 3 405B: 53,248)
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxVocab = int64_t{1}
                              << 32;  // ids are uint32 (token files, the synthetic source)
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;  // 16M tokens
constexpr int64_t kMaxLocalBatch = int64_t{1} << 20;
constexpr double kMaxCommTimeoutSeconds = 86400;  // a day
constexpr int64_t kMaxStragglerWindow = 1 << 20;  // steps
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

IntBounds Count(int64_t min, int64_t max = kUnbounded, const char* why = "") {
  return {min, max, nullptr, why};
}
IntBounds CountOrMinusOne(int64_t max, const char* minus_one, const char* why = "") {
  return {1, max, minus_one, why};
}
RealBounds Real(double min, double max, bool above_min, bool below_max) {
  return {min, max, above_min, below_max, false, ""};
}
RealBounds Positive(double max = std::numeric_limits<double>::max()) {
  return Real(0, max, true, false);
}
RealBounds NonNegative() { return Real(0, std::numeric_limits<double>::max(), false, false); }
RealBounds Seconds(double min, double max) { return {min, max, false, false, true, ""}; }

}  // namespace

std::vector<Section> Sections(JobConfig& c) {
  return {
      {"job",
       {{"mode", Choice(&c.job.mode)},
        {"max_restarts", &c.job.max_restarts, Count(0, kMaxRestarts)},
        {"restart_backoff_seconds", &c.job.restart_backoff_seconds,
         Seconds(0, kMaxRestartBackoffSeconds)},
        {"elastic", &c.job.elastic}}},
      {"model",
       {{"hf_assets_path", &c.model.hf_assets_path},
        {"dim", &c.model.dim, Count(1, kMaxWidth)},
        {"n_layers", &c.model.n_layers, Count(1, kMaxLayers)},
        {"n_heads", &c.model.n_heads, Count(1, kMaxWidth)},
        {"n_kv_heads", &c.model.n_kv_heads, Count(1, kMaxWidth)},
        {"vocab_size", &c.model.vocab_size, Count(1, kMaxVocab, " (token ids are 32-bit)")},
        {"head_dim", &c.model.head_dim, Count(0, kMaxWidth, " (0 = dim / n_heads)")},
        {"intermediate_size", &c.model.intermediate_size,
         Count(0, kMaxFfn, " (0 = from multiple_of)")},
        {"multiple_of", &c.model.multiple_of, Count(1, kMaxWidth)},
        {"ffn_dim_multiplier", &c.model.ffn_dim_multiplier, Positive(64)},
        {"norm_eps", &c.model.norm_eps, Positive(1)},
        {"rope_theta", &c.model.rope_theta, Positive(1e12)},
        {"rope_type", Choice(&c.model.rope_type)},
        {"rope_factor", &c.model.rope_factor, Real(1, 1e6, false, false)},
        {"rope_low_freq_factor", &c.model.rope_low_freq_factor, Positive(1e6)},
        {"rope_high_freq_factor", &c.model.rope_high_freq_factor, Positive(1e6)},
        {"rope_original_max_position_embeddings", &c.model.rope_original_max_position_embeddings,
         Count(1, kMaxSeqLen)},
        {"tie_word_embeddings", &c.model.tie_word_embeddings},
        {"max_seq_len", &c.model.max_seq_len, Count(1, kMaxSeqLen)},
        {"attn_mask_type", Choice(&c.model.attn_mask_type)}}},
      {"training",
       {{"seq_len", &c.training.seq_len, Count(1, kMaxSeqLen)},
        {"local_batch_size", &c.training.local_batch_size, Count(1, kMaxLocalBatch)},
        // steps × samples × seq_len has its own bound (2^62 tokens, config_validate.cc).
        {"steps", &c.training.steps, Count(1)},
        {"seed", &c.training.seed, Count(0)},
        {"max_norm", &c.training.max_norm, Positive()},
        {"dataset", Choice(&c.training.dataset)},
        {"dataset_path", &c.training.dataset_path},
        {"token_dtype", Choice(&c.training.token_dtype)},
        {"sampler", Choice(&c.training.sampler)},
        {"mixed_precision_param", Choice(&c.training.mixed_precision_param)},
        {"attention_kernel", Choice(&c.training.attention_kernel)},
        {"mixed_precision_reduce", Choice(&c.training.mixed_precision_reduce)},
        {"global_batch_size", &c.training.global_batch_size,
         CountOrMinusOne(kMaxWorldSize * kMaxLocalBatch,
                         "data-parallel degree × local_batch_size")},
        {"tokenizer_path", &c.training.tokenizer_path},
        {"eos_id", &c.training.eos_id,
         IntBounds{0, kMaxVocab - 1, "the tokenizer's end-of-text token", ""}}}},
      {"optimizer",
       {{"name", Choice(&c.optimizer.name)},
        {"lr", &c.optimizer.lr, Positive()},
        {"beta1", &c.optimizer.beta1, Real(0, 1, false, true)},
        {"beta2", &c.optimizer.beta2, Real(0, 1, false, true)},
        {"eps", &c.optimizer.eps, Positive()},
        {"weight_decay", &c.optimizer.weight_decay, NonNegative()}}},
      {"lr_scheduler",
       {{"warmup_steps", &c.lr_scheduler.warmup_steps, Count(0)},
        {"decay_ratio", &c.lr_scheduler.decay_ratio, Real(0, 1, false, false)},
        {"decay_type", Choice(&c.lr_scheduler.decay_type)},
        {"min_lr_factor", &c.lr_scheduler.min_lr_factor, Real(0, 1, false, false)}}},
      {"parallelism",
       {{"data_parallel_replicate_degree", &c.parallelism.data_parallel_replicate_degree,
         CountOrMinusOne(kMaxWorldSize, "fill the world", " (the largest world size)")},
        {"data_parallel_shard_degree", &c.parallelism.data_parallel_shard_degree,
         CountOrMinusOne(kMaxWorldSize, "fill the world", " (the largest world size)")},
        {"context_parallel_degree", &c.parallelism.context_parallel_degree,
         Count(1, kMaxWorldSize, " (the largest world size)")},
        {"fsdp_reshard_after_forward", Choice(&c.parallelism.fsdp_reshard_after_forward)},
        {"fsdp_gradient_sync", Choice(&c.parallelism.fsdp_gradient_sync)},
        {"context_parallel_load_balancer", Choice(&c.parallelism.context_parallel_load_balancer)},
        {"context_parallel_rotate_method", Choice(&c.parallelism.context_parallel_rotate_method)},
        {"context_parallel_method", Choice(&c.parallelism.context_parallel_method)},
        {"context_parallel_ulysses_degree", &c.parallelism.context_parallel_ulysses_degree,
         Count(0, kMaxWorldSize, " (0 = by context_parallel_method)")}}},
      {"checkpoint",
       {{"enable", &c.checkpoint.enable},
        {"folder", &c.checkpoint.folder},
        {"interval", &c.checkpoint.interval, Count(1)},
        {"keep_latest_k", &c.checkpoint.keep_latest_k, Count(0, kUnbounded, " (0 keeps all)")},
        {"async_mode", Choice(&c.checkpoint.async_mode)},
        {"initial_load_path", &c.checkpoint.initial_load_path},
        {"initial_load_in_hf", &c.checkpoint.initial_load_in_hf},
        {"initial_load_model_only", &c.checkpoint.initial_load_model_only},
        {"last_save_in_hf", &c.checkpoint.last_save_in_hf},
        {"hf_max_shard_size", &c.checkpoint.hf_max_shard_size},
        {"export_dtype", Choice(&c.checkpoint.export_dtype)},
        {"memory_interval", &c.checkpoint.memory_interval, Count(0, kUnbounded, " (0 = off)")}}},
      {"metrics",
       {{"log_freq", &c.metrics.log_freq, Count(1)},
        {"jsonl", &c.metrics.jsonl},
        {"straggler_window", &c.metrics.straggler_window, Count(0, kMaxStragglerWindow)},
        {"straggler_threshold", &c.metrics.straggler_threshold, Real(1, 1e6, true, false)},
        {"enable_tensorboard", &c.metrics.enable_tensorboard},
        {"save_tb_folder", &c.metrics.save_tb_folder},
        {"peak_flops", &c.metrics.peak_flops,
         RealBounds{-1, 1e18, false, false, false,
                    " (FLOP/s of one device; 0: the known or measured peak, -1: no MFU)"}}}},
      {"validation",
       {{"enable", &c.validation.enable},
        {"freq", &c.validation.freq, Count(1)},
        {"dataset", Choice(&c.validation.dataset)},
        {"dataset_path", &c.validation.dataset_path},
        {"steps", &c.validation.steps, Count(1)},
        {"local_batch_size", &c.validation.local_batch_size, Count(1, kMaxLocalBatch)}}},
      {"comm",
       {{"timeout_seconds", &c.comm.timeout_seconds, Seconds(0.001, kMaxCommTimeoutSeconds)},
        {"backend", Choice(&c.comm.backend)}}},
      {"activation_checkpoint",
       {{"mode", Choice(&c.activation_checkpoint.mode)},
        {"selective_ac_option", &c.activation_checkpoint.selective_ac_option}}},
  };
}

std::string OutOfBounds(absl::string_view key, int64_t value, const IntBounds& b) {
  if ((b.minus_one != nullptr && value == -1) || (value >= b.min && value <= b.max)) return "";
  std::string valid = b.max == kUnbounded
                          ? (b.min == 1 ? std::string("> 0") : absl::StrCat(">= ", b.min))
                          : absl::StrCat("in [", b.min, ", ", b.max, "]");
  if (b.minus_one != nullptr) valid = absl::StrCat("-1 (", b.minus_one, ") or ", valid);
  return absl::StrCat(key, " = ", value, ": must be ", valid, b.why);
}

std::string OutOfBounds(absl::string_view key, double value, const RealBounds& b) {
  // Written so that NaN is out of every range.
  const bool above = b.above_min ? value > b.min : value >= b.min;
  const bool below = b.below_max ? value < b.max : value <= b.max;
  // Whole milliseconds downstream: a positive duration under 1 ms would become none at all.
  const bool whole_ms = !b.seconds || value == 0 || value >= 0.001;
  if (above && below && whole_ms) return "";
  std::string valid;
  if (b.seconds) {
    valid = absl::StrCat(b.min == 0 ? "0 or " : "", "in [", std::max(b.min, 0.001), ", ", b.max,
                         "] seconds (it is counted in whole milliseconds)");
  } else if (b.max == std::numeric_limits<double>::max()) {
    valid = absl::StrCat(b.above_min ? "> " : ">= ", b.min);
  } else {
    valid =
        absl::StrCat("in ", b.above_min ? "(" : "[", b.min, ", ", b.max, b.below_max ? ")" : "]");
  }
  return absl::StrCat(key, " = ", FormatDouble(value), ": must be ", valid, b.why);
}

std::vector<std::string> SectionNames(const std::vector<Section>& sections) {
  std::vector<std::string> names;
  for (const Section& s : sections) names.push_back(s.name);
  return names;
}

std::vector<std::string> KeyNames(const Section& section) {
  std::vector<std::string> names;
  for (const Field& f : section.fields) names.push_back(f.key);
  return names;
}

const Section* FindSection(const std::vector<Section>& sections, absl::string_view name) {
  for (const Section& s : sections) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

const Field* FindField(const Section& section, absl::string_view key) {
  for (const Field& f : section.fields) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

std::string UnknownSection(absl::string_view name, const std::vector<Section>& sections) {
  const std::vector<std::string> names = SectionNames(sections);
  std::string problem = absl::StrCat("unknown section [", Excerpt(name),
                                     "] (valid sections: ", absl::StrJoin(names, ", "), ")");
  const std::string guess = ClosestMatch(name, names);
  if (!guess.empty()) absl::StrAppend(&problem, "; did you mean '", guess, "'?");
  return problem;
}

std::string UnknownKey(const Section& section, absl::string_view key) {
  const std::vector<std::string> keys = KeyNames(section);
  std::string problem =
      absl::StrCat("unknown key ", section.name, ".", Excerpt(key), " (valid keys in [",
                   section.name, "]: ", absl::StrJoin(keys, ", "), ")");
  const std::string guess = ClosestMatch(key, keys);
  if (!guess.empty()) absl::StrAppend(&problem, "; did you mean '", guess, "'?");
  return problem;
}

std::string KeyOutsideSection(absl::string_view key, const std::vector<Section>& sections) {
  std::vector<std::string> owners;
  for (const Section& s : sections) {
    if (FindField(s, key) != nullptr) owners.push_back(absl::StrCat(s.name, ".", key));
  }
  std::string problem = absl::StrCat(
      "key '", Excerpt(key),
      "' is not in a section (valid sections: ", absl::StrJoin(SectionNames(sections), ", "), ")");
  if (!owners.empty())
    absl::StrAppend(&problem, "; did you mean ", absl::StrJoin(owners, " or "), "?");
  return problem;
}

void AssignChoice(absl::string_view text, const ChoicePtr& choice, const std::string& key,
                  InvalidChoices* invalid, std::vector<std::string>* warnings) {
  if (choice.optional && text.empty()) {
    choice.set(-1);
    invalid->erase(key);
    return;
  }
  for (size_t i = 0; i < choice.names.size(); ++i) {
    if (text == choice.names[i]) {
      choice.set(static_cast<int>(i));
      invalid->erase(key);  // a later override may fix an earlier value
      return;
    }
  }
  for (const auto& [old_name, value] : choice.old_spellings) {
    if (text == old_name) {
      choice.set(value);
      invalid->erase(key);
      warnings->push_back(absl::StrCat(key, " = \"", old_name, "\" is the old spelling of \"",
                                       choice.names[value], "\"; it still works, but write \"",
                                       choice.names[value], "\""));
      return;
    }
  }
  (*invalid)[key] = std::string(text);
}

}  // namespace config_internal
}  // namespace ringtrain
