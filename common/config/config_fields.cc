#include "common/config/config_fields.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/printable.h"

namespace ringtrain {
namespace config_internal {

std::vector<Section> Sections(JobConfig& c) {
  return {
      {"job",
       {{"mode", Choice(&c.job.mode)}, {"max_restarts", &c.job.max_restarts},
        {"restart_backoff_seconds", &c.job.restart_backoff_seconds}, {"elastic", &c.job.elastic}}},
      {"model",
       {{"dim", &c.model.dim}, {"n_layers", &c.model.n_layers}, {"n_heads", &c.model.n_heads},
        {"n_kv_heads", &c.model.n_kv_heads}, {"vocab_size", &c.model.vocab_size},
        {"multiple_of", &c.model.multiple_of}, {"ffn_dim_multiplier", &c.model.ffn_dim_multiplier},
        {"norm_eps", &c.model.norm_eps}, {"rope_theta", &c.model.rope_theta},
        {"max_seq_len", &c.model.max_seq_len}}},
      {"training",
       {{"seq_len", &c.training.seq_len}, {"local_batch_size", &c.training.local_batch_size},
        {"steps", &c.training.steps}, {"seed", &c.training.seed}, {"max_norm", &c.training.max_norm},
        {"dataset", Choice(&c.training.dataset)}, {"dataset_path", &c.training.dataset_path},
        {"token_dtype", Choice(&c.training.token_dtype)}, {"sampler", Choice(&c.training.sampler)},
        {"mixed_precision_param", Choice(&c.training.mixed_precision_param)},
        {"attention_kernel", Choice(&c.training.attention_kernel)},
        {"mixed_precision_reduce", Choice(&c.training.mixed_precision_reduce)},
        {"global_batch_size", &c.training.global_batch_size},
        {"tokenizer_path", &c.training.tokenizer_path}}},
      {"optimizer",
       {{"name", Choice(&c.optimizer.name)}, {"lr", &c.optimizer.lr}, {"beta1", &c.optimizer.beta1},
        {"beta2", &c.optimizer.beta2}, {"eps", &c.optimizer.eps},
        {"weight_decay", &c.optimizer.weight_decay}}},
      {"lr_scheduler",
       {{"warmup_steps", &c.lr_scheduler.warmup_steps}, {"decay_ratio", &c.lr_scheduler.decay_ratio},
        {"decay_type", Choice(&c.lr_scheduler.decay_type)}, {"min_lr_factor", &c.lr_scheduler.min_lr_factor}}},
      {"parallelism",
       {{"data_parallel_replicate_degree", &c.parallelism.data_parallel_replicate_degree},
        {"data_parallel_shard_degree", &c.parallelism.data_parallel_shard_degree},
        {"context_parallel_degree", &c.parallelism.context_parallel_degree},
        {"fsdp_reshard_after_forward", Choice(&c.parallelism.fsdp_reshard_after_forward)},
        {"context_parallel_load_balancer", Choice(&c.parallelism.context_parallel_load_balancer)},
        {"context_parallel_rotate_method", Choice(&c.parallelism.context_parallel_rotate_method)}}},
      {"checkpoint",
       {{"enable", &c.checkpoint.enable}, {"folder", &c.checkpoint.folder},
        {"interval", &c.checkpoint.interval}, {"keep_latest_k", &c.checkpoint.keep_latest_k},
        {"initial_load_path", &c.checkpoint.initial_load_path}}},
      {"metrics", {{"log_freq", &c.metrics.log_freq}, {"jsonl", &c.metrics.jsonl}}},
      {"validation",
       {{"dataset", Choice(&c.validation.dataset)}, {"dataset_path", &c.validation.dataset_path},
        {"steps", &c.validation.steps}, {"local_batch_size", &c.validation.local_batch_size}}},
      {"comm", {{"timeout_seconds", &c.comm.timeout_seconds}, {"backend", Choice(&c.comm.backend)}}},
      {"activation_checkpoint",
       {{"mode", Choice(&c.activation_checkpoint.mode)},
        {"selective_ac_option", &c.activation_checkpoint.selective_ac_option}}},
  };
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
  std::string problem =
      absl::StrCat("unknown section [", Excerpt(name), "] (valid sections: ", absl::StrJoin(names, ", "), ")");
  const std::string guess = ClosestMatch(name, names);
  if (!guess.empty()) absl::StrAppend(&problem, "; did you mean '", guess, "'?");
  return problem;
}

std::string UnknownKey(const Section& section, absl::string_view key) {
  const std::vector<std::string> keys = KeyNames(section);
  std::string problem = absl::StrCat("unknown key ", section.name, ".", Excerpt(key), " (valid keys in [", section.name,
                                     "]: ", absl::StrJoin(keys, ", "), ")");
  const std::string guess = ClosestMatch(key, keys);
  if (!guess.empty()) absl::StrAppend(&problem, "; did you mean '", guess, "'?");
  return problem;
}

std::string KeyOutsideSection(absl::string_view key, const std::vector<Section>& sections) {
  std::vector<std::string> owners;
  for (const Section& s : sections) {
    if (FindField(s, key) != nullptr) owners.push_back(absl::StrCat(s.name, ".", key));
  }
  std::string problem = absl::StrCat("key '", Excerpt(key), "' is not in a section (valid sections: ",
                                     absl::StrJoin(SectionNames(sections), ", "), ")");
  if (!owners.empty()) absl::StrAppend(&problem, "; did you mean ", absl::StrJoin(owners, " or "), "?");
  return problem;
}

void AssignChoice(absl::string_view text, const ChoicePtr& choice, const std::string& key,
                  InvalidChoices* invalid) {
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
  (*invalid)[key] = std::string(text);
}

}  // namespace config_internal
}  // namespace ringtrain
