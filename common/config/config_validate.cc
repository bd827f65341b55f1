#include "common/config/config_validate.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/closest_match.h"
#include "common/config/config_fields.h"
#include "common/config/config_limits.h"
#include "common/printable.h"
#include "common/safetensors/index.h"

namespace ringtrain {
namespace config_internal {

std::string FormatDouble(double value) {
  // Shortest round-trip digits either way; plain notation where a person reads it more easily
  // ("0.0008", "500000.0"), scientific for the very small and very large.
  const double magnitude = std::fabs(value);
  const bool plain = magnitude == 0 || (magnitude >= 1e-4 && magnitude < 1e16);
  char buf[400];  // fixed notation of a value below 1e16 fits easily
  const auto result =
      std::to_chars(buf, buf + sizeof(buf), value,
                    plain ? std::chars_format::fixed : std::chars_format::scientific);
  std::string text(buf, result.ptr);
  // TOML would read "1" back as an integer; keep floats visibly floats.
  if (std::isfinite(value) && text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string Quote(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        // TOML forbids raw control characters in basic strings.
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::vector<int64_t> Divisors(int64_t n) {
  // Real configs are tiny; a bound keeps a typo like 10^15 from stalling the error message.
  constexpr int64_t kMaxEnumerated = int64_t{1} << 24;
  std::vector<int64_t> low, high;
  if (n <= 0 || n > kMaxEnumerated) return low;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

namespace {

constexpr int64_t kMaxTokenCount = int64_t{1} << 62;

// "248 or 256": the multiples of `factor` either side of `value`, leaving out a non-positive one.
std::string NearestMultiples(int64_t value, int64_t factor) {
  const int64_t below = value / factor * factor;
  int64_t above = 0;
  if (__builtin_add_overflow(below, factor, &above)) return absl::StrCat(below);
  return below > 0 ? absl::StrCat(below, " or ", above) : absl::StrCat(above);
}

// Collects problems with a uniform "key = value: must be ..." wording.
class Checker {
 public:
  Checker(const InvalidChoices& invalid, std::vector<std::string>* out)
      : invalid_(invalid), out_(out) {}

  void Add(std::string problem) { out_->push_back(std::move(problem)); }

  // Whether choice `key` (of enum E) was spelt as one of its choices; if not, says so, naming the
  // valid spellings and the closest one. The result lets dependent checks be skipped.
  template <class E>
  bool Choice(const std::string& key, absl::string_view prefix = "must be one of ") {
    checked_.insert(key);
    const auto it = invalid_.find(key);
    if (it == invalid_.end()) return true;
    const std::string& v = it->second;
    const std::vector<std::string> valid = ChoiceNames<E>();
    std::vector<std::string> quoted;
    for (const std::string& option : valid) quoted.push_back(Quote(option));
    std::string problem =
        absl::StrCat(key, " = ", Quote(Excerpt(v)), ": ", prefix, absl::StrJoin(quoted, ", "));
    const std::string guess = ClosestMatch(v, valid);
    if (!guess.empty()) absl::StrAppend(&problem, "; did you mean '", guess, "'?");
    Add(std::move(problem));
    return false;
  }

  // A misspelt choice whose key no Choice<E> call checked (a new key nobody added above) is still
  // refused, never silently left at its default.
  void RefuseUncheckedChoices() {
    for (const auto& [key, value] : invalid_) {
      if (checked_.count(key) == 0)
        Add(absl::StrCat(key, " = ", Quote(Excerpt(value)), ": not one of its choices"));
    }
  }

 private:
  const InvalidChoices& invalid_;
  std::vector<std::string>* out_;
  std::set<std::string> checked_;
};

// Every numeric key against its bounds in the one table (config_fields.cc), so that the trainer and
// the coordinator refuse the same values. The checks below are the rules between keys.
void CheckBounds(const JobConfig& config, Checker& c) {
  JobConfig copy = config;  // The field table points into a mutable config.
  for (const Section& section : Sections(copy)) {
    for (const Field& f : section.fields) {
      const std::string key = absl::StrCat(section.name, ".", f.key);
      std::string problem;
      if (const auto* ints = std::get_if<IntBounds>(&f.bounds)) {
        problem = OutOfBounds(key, *std::get<int64_t*>(f.ptr), *ints);
      } else if (const auto* reals = std::get_if<RealBounds>(&f.bounds)) {
        if (const auto* p = std::get_if<double*>(&f.ptr)) {
          problem = OutOfBounds(key, **p, *reals);
        } else if (const auto& optional = *std::get<std::optional<double>*>(f.ptr);
                   optional.has_value()) {
          problem = OutOfBounds(key, *optional, *reals);
        }
      }
      if (!problem.empty()) c.Add(std::move(problem));
    }
  }
}

void CheckJob(Checker& c) { c.Choice<JobMode>("job.mode"); }

void CheckModel(const JobConfig& config, Checker& c) {
  const ModelSection& m = config.model;
  // Grouped-query attention shares each KV head across n_heads / n_kv_heads query heads.
  if (m.n_heads > 0 && m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads != 0) {
    c.Add(absl::StrCat("model.n_kv_heads = ", m.n_kv_heads, " must divide model.n_heads = ",
                       m.n_heads, " (valid: ", absl::StrJoin(Divisors(m.n_heads), ", "), ")"));
  }
  if (m.head_dim > 0) {
    // An explicit head_dim (Llama 3 and Hugging Face files): any even size, whatever dim is.
    if (m.head_dim % 2 != 0) {
      c.Add(absl::StrCat("model.head_dim = ", m.head_dim, " must be even for RoPE (try ",
                         NearestMultiples(m.head_dim, 2), ")"));
    }
  } else if (m.dim > 0 && m.n_heads > 0) {
    if (m.dim % m.n_heads != 0) {
      std::string problem =
          absl::StrCat("model.dim = ", m.dim, " must be divisible by model.n_heads = ", m.n_heads,
                       " (try model.dim = ", NearestMultiples(m.dim, m.n_heads));
      const std::vector<int64_t> heads = Divisors(m.dim);
      const auto above = std::upper_bound(heads.begin(), heads.end(), m.n_heads);
      std::vector<int64_t> nearby;
      if (above != heads.begin()) nearby.push_back(*(above - 1));
      if (above != heads.end()) nearby.push_back(*above);
      if (!nearby.empty())
        absl::StrAppend(&problem, ", or model.n_heads = ", absl::StrJoin(nearby, " or "));
      c.Add(problem + ")");
    } else if ((m.dim / m.n_heads) % 2 != 0) {
      // RoPE rotates channel pairs, so each head needs an even number of channels.
      c.Add(absl::StrCat("model.dim / model.n_heads = ", m.dim, " / ", m.n_heads, " = ",
                         m.dim / m.n_heads, " (head_dim) must be even for RoPE (try model.dim = ",
                         NearestMultiples(m.dim, 2 * m.n_heads), ")"));
    }
  }
  if (c.Choice<RopeType>("model.rope_type") && m.rope_type == RopeType::kLlama3 &&
      m.rope_low_freq_factor >= m.rope_high_freq_factor) {
    // The smoothing between the two wavelengths divides by their difference.
    c.Add(absl::StrCat("model.rope_low_freq_factor = ", FormatDouble(m.rope_low_freq_factor),
                       " must be below model.rope_high_freq_factor = ",
                       FormatDouble(m.rope_high_freq_factor), " (Llama 3.1: 1 and 4)"));
  }
  if (c.Choice<AttnMaskType>("model.attn_mask_type") &&
      m.attn_mask_type == AttnMaskType::kBlockCausal && config.training.eos_id < 0 &&
      config.training.tokenizer_path.empty()) {
    c.Add(
        "model.attn_mask_type = \"block_causal\" needs the token that ends a document: set "
        "training.eos_id, or training.tokenizer_path (whose end-of-text token is the default)");
  }
  if (config.training.eos_id >= 0 && m.vocab_size > 0 && config.training.eos_id >= m.vocab_size) {
    c.Add(absl::StrCat("training.eos_id = ", config.training.eos_id,
                       " must be below model.vocab_size = ", m.vocab_size));
  }
  const bool max_seq_len_known = !config.hf_pending || config.given_keys.count("model.max_seq_len");
  if (max_seq_len_known && m.max_seq_len > 0 && m.max_seq_len < config.training.seq_len) {
    c.Add(absl::StrCat("model.max_seq_len = ", m.max_seq_len,
                       " must be >= training.seq_len = ", config.training.seq_len));
  }
}

void CheckTraining(const JobConfig& config, Checker& c) {
  const TrainingSection& t = config.training;
  if (c.Choice<DatasetKind>("training.dataset") && t.dataset != DatasetKind::kSynthetic) {
    if (t.dataset_path.empty()) {
      c.Add(absl::StrCat("training.dataset_path = \"\": required when training.dataset = ",
                         Quote(ChoiceName(t.dataset))));
    }
    // Without a tokenizer the text dataset tokenises bytes, so every byte value needs an embedding
    // row. With one, the trainer checks vocab_size against the tokenizer's when it loads it.
    if (t.dataset == DatasetKind::kText && t.tokenizer_path.empty() &&
        config.model.vocab_size > 0 && config.model.vocab_size < 256) {
      c.Add(absl::StrCat("model.vocab_size = ", config.model.vocab_size,
                         ": must be >= 256 when training.dataset = \"text\" without a "
                         "training.tokenizer_path (byte tokens)"));
    }
  }
  c.Choice<TokenDtype>("training.token_dtype");
  c.Choice<SamplerKind>("training.sampler");
  c.Choice<MixedPrecision>("training.mixed_precision_param");
  c.Choice<AttentionKernelKind>("training.attention_kernel");
  if (c.Choice<MixedPrecision>("training.mixed_precision_reduce") &&
      t.mixed_precision_reduce == MixedPrecision::kBFloat16 &&
      t.mixed_precision_param == MixedPrecision::kFloat32) {
    c.Add(
        "training.mixed_precision_reduce = \"bfloat16\" needs training.mixed_precision_param = "
        "\"bfloat16\" "
        "(float32 compute reduced in bfloat16 would only lose precision); set both, or reduce in "
        "\"float32\"");
  }
  if (t.global_batch_size > 0 && t.local_batch_size > 0 &&
      t.global_batch_size % t.local_batch_size != 0) {
    c.Add(absl::StrCat("training.global_batch_size = ", t.global_batch_size,
                       " must be a multiple of training.local_batch_size = ", t.local_batch_size,
                       " (times the data-parallel degree)"));
  }
}

void CheckActivationCheckpoint(const JobConfig& config, Checker& c) {
  const ActivationCheckpointSection& ac = config.activation_checkpoint;
  c.Choice<AcMode>("activation_checkpoint.mode");
  const std::string& option = ac.selective_ac_option;
  if (option == "op") return;
  int64_t every = 0;
  const auto [end, error] = std::from_chars(option.data(), option.data() + option.size(), every);
  const int64_t layers = config.model.n_layers;
  if (error != std::errc() || end != option.data() + option.size() || every < 1 ||
      (layers > 0 && every > layers)) {
    c.Add(absl::StrCat(
        "activation_checkpoint.selective_ac_option = ", Quote(Excerpt(option)),
        ": must be \"op\" (keep attention outputs) or an integer N in [1, model.n_layers = ",
        layers, "] (checkpoint every N-th block)"));
  }
}

void CheckLrScheduler(Checker& c) {
  c.Choice<DecayType>("lr_scheduler.decay_type");
  // A warmup or decay longer than the run is clamped with a warning, not refused
  // (common/config/lr_phases.h).
}

// The Ulysses degree against the method, the cp degree and the heads it splits.
void CheckUlysses(const JobConfig& config, Checker& c) {
  const ParallelismSection& p = config.parallelism;
  const int64_t cp = p.context_parallel_degree;
  const int64_t given = p.context_parallel_ulysses_degree;
  if (cp <= 0 || given < 0) return;
  switch (p.context_parallel_method) {
    case ContextParallelMethod::kRing:
      if (given > 1) {
        c.Add(absl::StrCat("parallelism.context_parallel_ulysses_degree = ", given,
                           " needs parallelism.context_parallel_method = \"ulysses\" or "
                           "\"hybrid\" (ring attention has no Ulysses groups)"));
        return;
      }
      break;
    case ContextParallelMethod::kUlysses:
      if (given != 0 && given != cp) {
        c.Add(absl::StrCat("parallelism.context_parallel_ulysses_degree = ", given,
                           " must equal parallelism.context_parallel_degree = ", cp,
                           " (or be unset) with context_parallel_method = \"ulysses\"; Ulysses "
                           "in smaller groups with the ring across them is "
                           "context_parallel_method = \"hybrid\""));
        return;
      }
      break;
    case ContextParallelMethod::kHybrid:
      if (given == 0) {
        c.Add(
            absl::StrCat("parallelism.context_parallel_method = \"hybrid\" needs "
                         "parallelism.context_parallel_ulysses_degree, a divisor of "
                         "context_parallel_degree = ",
                         cp, " (", absl::StrJoin(Divisors(cp), ", "), ")"));
        return;
      }
      if (cp % given != 0) {
        c.Add(absl::StrCat("parallelism.context_parallel_ulysses_degree = ", given,
                           " must divide parallelism.context_parallel_degree = ", cp,
                           " (hybrid runs rings of cp / ulysses_degree Ulysses groups; divisors "
                           "of ",
                           cp, ": ", absl::StrJoin(Divisors(cp), ", "), ")"));
        return;
      }
      break;
  }
  const int64_t u = UlyssesDegree(p);
  const ModelSection& m = config.model;
  // A Hugging Face model's heads are known once its config.json is read (ResolveHfAssets).
  if (u <= 1 || (config.hf_pending && config.given_keys.count("model.n_heads") == 0)) return;
  if (m.n_heads <= 0 || m.n_kv_heads <= 0 || UlyssesSplitsHeads(m.n_heads, m.n_kv_heads, u)) return;
  if (m.n_heads % u != 0) {
    c.Add(absl::StrCat("model.n_heads = ", m.n_heads,
                       " is not divisible by parallelism.context_parallel_ulysses_degree = ", u,
                       " (Ulysses gives each rank of a group n_heads / ", u,
                       " query heads); Ulysses degrees that divide it: ",
                       absl::StrJoin(Divisors(m.n_heads), ", ")));
  } else {
    c.Add(absl::StrCat("model.n_kv_heads = ", m.n_kv_heads,
                       " and parallelism.context_parallel_ulysses_degree = ", u,
                       ": one must divide the other (K/V heads are split over a Ulysses group "
                       "when the degree divides them, replicated when they divide the degree)"));
  }
}

void CheckParallelism(const JobConfig& config, Checker& c) {
  const ParallelismSection& p = config.parallelism;
  // The coordinator stores degrees and world sizes as 32-bit integers: each degree is bounded by
  // kMaxWorldSize (the table), and so is their product.
  const int64_t dp = p.data_parallel_replicate_degree;
  const int64_t shard = p.data_parallel_shard_degree;
  const int64_t cp = p.context_parallel_degree;
  if (dp <= kMaxWorldSize && shard <= kMaxWorldSize && cp > 0 && cp <= kMaxWorldSize) {
    const int64_t ranks = std::max<int64_t>(dp, 1) * std::max<int64_t>(shard, 1) * cp;  // < 2^42
    if (ranks > kMaxWorldSize) {
      c.Add(absl::StrCat("parallelism: data_parallel_replicate_degree (", dp,
                         ") × data_parallel_shard_degree (", shard, ") × context_parallel_degree (",
                         cp, ") = ", ranks, " ranks; at most ", kMaxWorldSize, " are allowed"));
    }
  }
  c.Choice<ReshardAfterForward>("parallelism.fsdp_reshard_after_forward");
  c.Choice<FsdpGradientSync>("parallelism.fsdp_gradient_sync");
  c.Choice<LoadBalancer>("parallelism.context_parallel_load_balancer");
  c.Choice<RotateMethod>("parallelism.context_parallel_rotate_method");
  if (c.Choice<ContextParallelMethod>("parallelism.context_parallel_method")) {
    CheckUlysses(config, c);
  }
}

// The trainer sizes its datasets as steps × samples per step × seq_len tokens (int64): a product
// that does not fit must be refused here, not wrap around there. Samples per step are the global
// batch when set, else dp × local_batch_size, a -1 degree bounded by the world.
void CheckTokenCount(const JobConfig& config, absl::string_view section, int64_t steps,
                     int64_t batch, Checker& c) {
  const int64_t seq_len = config.training.seq_len;
  const int64_t cp = config.parallelism.context_parallel_degree;
  const int64_t replicate = config.parallelism.data_parallel_replicate_degree;
  const int64_t shard = config.parallelism.data_parallel_shard_degree;
  if (steps <= 0 || batch <= 0 || seq_len <= 0 || cp <= 0 || cp > kMaxWorldSize ||
      replicate > kMaxWorldSize || shard > kMaxWorldSize || replicate == 0 || shard == 0) {
    return;
  }
  const bool fills = replicate < 0 || shard < 0;
  const int64_t dp = fills ? kMaxWorldSize / cp : replicate * shard;
  if (dp <= 0) return;
  const int64_t global = config.training.global_batch_size;
  const bool use_global = section == "training" && global > 0;
  int64_t product = 0;
  if (!__builtin_mul_overflow(steps, use_global ? global : batch, &product) &&
      !__builtin_mul_overflow(product, seq_len, &product) &&
      (use_global || !__builtin_mul_overflow(product, dp, &product)) && product <= kMaxTokenCount) {
    return;
  }
  const std::string samples =
      use_global ? absl::StrCat("training.global_batch_size (", global, ")")
                 : absl::StrCat(section, ".local_batch_size (", batch,
                                ") × the data-parallel degree (", fills ? "up to " : "", dp, ")");
  c.Add(absl::StrCat(section, ".steps (", steps, ") × ", samples, " × training.seq_len (", seq_len,
                     ") is more than 2^62 tokens; lower one of them"));
}

void CheckRest(const JobConfig& config, Checker& c) {
  const CheckpointSection& ck = config.checkpoint;
  if (ck.enable && ck.folder.empty())
    c.Add("checkpoint.folder = \"\": required when checkpoint.enable = true");
  if (ck.initial_load_in_hf && ck.initial_load_path.empty()) {
    c.Add(
        "checkpoint.initial_load_in_hf = true needs checkpoint.initial_load_path (a Hugging Face "
        "folder with model.safetensors or model.safetensors.index.json)");
  }
  if (!ck.initial_load_model_only && (ck.initial_load_path.empty() || ck.initial_load_in_hf ||
                                      config.job.mode == JobMode::kEval)) {
    c.Add(
        "checkpoint.initial_load_model_only = false needs checkpoint.initial_load_path naming a "
        "checkpoint's step folder (not a Hugging Face folder) and a training job: only a "
        "checkpoint holds the optimizer state and data position to continue from");
  }
  if (ck.last_save_in_hf && !ck.enable) {
    c.Add(
        "checkpoint.last_save_in_hf = true needs checkpoint.enable = true (the Hugging Face "
        "folder is written beside the last checkpoint)");
  }
  c.Choice<MixedPrecision>("checkpoint.export_dtype");
  if (absl::StatusOr<int64_t> size = ParseShardSize(ck.hf_max_shard_size); !size.ok()) {
    c.Add(absl::StrCat("checkpoint.hf_max_shard_size = ", Quote(ck.hf_max_shard_size), ": ",
                       size.status().message()));
  }

  if (config.metrics.enable_tensorboard && config.metrics.save_tb_folder.empty()) {
    c.Add(
        "metrics.save_tb_folder = \"\": required when metrics.enable_tensorboard = true (the "
        "folder the event files go to, e.g. \"tb\")");
  }
  const ValidationSection& v = config.validation;
  c.Choice<DatasetKind>("validation.dataset",
                        "must be empty (use the training dataset) or one of ");
  CheckTokenCount(config, "training", config.training.steps, config.training.local_batch_size, c);
  CheckTokenCount(config, "validation", v.steps, v.local_batch_size, c);

  c.Choice<CommBackend>("comm.backend");
}

}  // namespace

void CheckSeqLenSharding(const JobConfig& config, std::vector<std::string>* problems) {
  const int64_t seq_len = config.training.seq_len;
  const int64_t cp = config.parallelism.context_parallel_degree;
  const LoadBalancer balancer = config.parallelism.context_parallel_load_balancer;
  if (seq_len <= 0 || cp <= 0) return;
  // Head-tail balancing gives each rank one chunk from each end of the sequence: 2·cp chunks (the
  // document balancer cuts at least as many).
  const bool headtail = balancer == LoadBalancer::kHeadTail || balancer == LoadBalancer::kDocument;
  // 2·cp would overflow: no seq_len has that many chunks.
  if (headtail && cp > std::numeric_limits<int64_t>::max() / 2) {
    problems->push_back(absl::StrCat("training.seq_len = ", seq_len, " cannot be split into 2 × ",
                                     "parallelism.context_parallel_degree = 2 × ", cp,
                                     " chunks (more than 2^63; context_parallel_load_balancer = ",
                                     Quote(ChoiceName(balancer)), ")"));
    return;
  }
  const int64_t factor = headtail ? 2 * cp : cp;
  if (seq_len % factor == 0) return;
  problems->push_back(
      absl::StrCat("training.seq_len = ", seq_len, " must be divisible by ", headtail ? "2 × " : "",
                   "parallelism.context_parallel_degree = ",
                   headtail ? absl::StrCat("2 × ", cp, " = ", factor) : absl::StrCat(cp),
                   " (context_parallel_load_balancer = ", Quote(ChoiceName(balancer)),
                   " splits each sequence into ", factor,
                   " chunks); try training.seq_len = ", NearestMultiples(seq_len, factor)));
}

void ValidateJobConfig(const JobConfig& config, const InvalidChoices& invalid,
                       std::vector<std::string>* problems) {
  Checker c(invalid, problems);
  CheckBounds(config, c);
  CheckJob(c);
  CheckModel(config, c);
  CheckTraining(config, c);
  c.Choice<OptimizerName>("optimizer.name");
  CheckLrScheduler(c);
  CheckParallelism(config, c);
  CheckActivationCheckpoint(config, c);
  // A misspelt balancer kept its default; checking the sharding against that would mislead.
  if (invalid.count("parallelism.context_parallel_load_balancer") == 0) {
    CheckSeqLenSharding(config, problems);
  }
  CheckRest(config, c);
  c.RefuseUncheckedChoices();
}

}  // namespace config_internal
}  // namespace ringtrain
