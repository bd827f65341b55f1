// The job configuration: TOML sections like torchtitan's train configs, every key overridable as
// `--section.key=value`. Torch-free, so the coordinator validates the same configs the trainer
// runs.
//
// Validation is whole-config: ParseJobConfig reports every problem at once, each naming the key,
// the value and what would be valid. Every numeric key has bounds in the table of keys
// (config_fields.cc), so no value that passes overflows what is computed from it. Checks that need
// the world size (mesh) are in ResolveMesh (common/config/mesh.h).
#ifndef RINGTRAIN_COMMON_CONFIG_JOB_CONFIG_H_
#define RINGTRAIN_COMMON_CONFIG_JOB_CONFIG_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/choices.h"

namespace ringtrain {

// The job's restart policy (acted on by the coordinator; the trainer only validates it): when a
// rank fails, hangs or loses its worker, the coordinator stops every rank and starts the job again
// from its latest complete checkpoint, at most max_restarts times, restart_backoff_seconds after
// the failure. elastic lets a restart run on a smaller data-parallel degree (same cp, same global
// batch through gradient accumulation) when fewer workers remain.
inline constexpr int64_t kMaxRestarts = 1000;
inline constexpr double kMaxRestartBackoffSeconds = 3600;

struct JobSection {
  JobMode mode = JobMode::kTrain;
  int64_t max_restarts = 0;              // >= 0
  double restart_backoff_seconds = 5.0;  // >= 0
  bool elastic = false;
};

// The Llama 3 architecture. Keys left at their defaults take their values from
// hf_assets_path's config.json when it is set (common/config/hf_config.h).
struct ModelSection {
  // A Hugging Face model folder (config.json; tokenizer.json when present): the architecture comes
  // from its config.json (LlamaForCausalLM), resolved by the trainer (ResolveHfAssets), where the
  // path is readable. Empty: the keys below.
  std::string hf_assets_path;
  int64_t dim = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 4;  // n_heads % n_kv_heads == 0
  int64_t vocab_size = 512;
  int64_t head_dim = 0;                      // 0 = dim / n_heads
  int64_t intermediate_size = 0;             // the FFN hidden size; 0 = from multiple_of
  int64_t multiple_of = 256;                 // torchtitan's FFN rounding (intermediate_size = 0)
  std::optional<double> ffn_dim_multiplier;  // absent in TOML = not set
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  // RoPE frequency scaling: "default" none; "llama3" as Llama 3.1/3.2 (transformers'
  // _compute_llama3_parameters) with the four keys below.
  RopeType rope_type = RopeType::kDefault;
  double rope_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 8192;
  // One matrix for the token embedding and the output projection (Llama 3.2 1B/3B).
  bool tie_word_embeddings = false;
  int64_t max_seq_len = 2048;  // >= training.seq_len; Hugging Face's max_position_embeddings
  // "causal", or "block_causal" (torchtitan's name): packed documents, each ending with (and
  // including) training.eos_id; a token attends to the earlier tokens of its own document only.
  AttnMaskType attn_mask_type = AttnMaskType::kCausal;
};

struct TrainingSection {
  int64_t seq_len = 256;
  int64_t local_batch_size = 8;
  int64_t steps = 100;
  int64_t seed = 42;
  double max_norm = 1.0;  // > 0
  DatasetKind dataset = DatasetKind::kSynthetic;
  std::string dataset_path;                      // required for text and bin
  TokenDtype token_dtype = TokenDtype::kUint16;  // bin only
  SamplerKind sampler = SamplerKind::kSequential;
  // The compute dtype (torchtitan's name). bfloat16: weights are cast to bf16 for the forward and
  // backward, AdamW keeps and updates float32 master weights, gradients arrive in float32; softmax
  // statistics, log-sum-exp merges, RMSNorm and the loss stay float32.
  MixedPrecision mixed_precision_param = MixedPrecision::kFloat32;
  // The attention block kernel: auto = fused SDPA kernels on CUDA, the tiled kernel on the CPU;
  // fused on the CPU runs PyTorch's CPU flash kernel (worker/engine/kernels/block_kernel.h).
  AttentionKernelKind attention_kernel = AttentionKernelKind::kAuto;
  // The dtype gradients are reduced in (torchtitan's name). bfloat16 needs mixed_precision_param =
  // bfloat16; gradients are widened back to float32 for the optimizer.
  MixedPrecision mixed_precision_reduce = MixedPrecision::kFloat32;
  // Samples per optimizer step over all data-parallel ranks (torchtitan's name). -1 = dp ×
  // local_batch_size; a multiple of it accumulates global_batch_size / (dp × local_batch_size)
  // micro-batches of local_batch_size before each optimizer step.
  int64_t global_batch_size = -1;
  // The tokenizer for dataset = "text" (and text validation data): a Hugging Face tokenizer.json
  // (byte-level BPE) or a tiktoken file (common/tokenizer/tokenizer.h). Empty: one token per byte.
  // model.vocab_size must be at least the tokenizer's, which the trainer checks when it loads it.
  std::string tokenizer_path;
  // The token that ends a document: block-causal attention's bounds, and appended after each file
  // of a tokenized text dataset. -1 = the tokenizer's end-of-text token, when it has one.
  int64_t eos_id = -1;
};

struct OptimizerSection {
  OptimizerName name = OptimizerName::kAdamW;
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct LrSchedulerSection {
  int64_t warmup_steps = 0;  // >= 0; more than the run is clamped (lr_phases.h)
  double decay_ratio = 0.0;  // in [0, 1]
  DecayType decay_type = DecayType::kLinear;
  double min_lr_factor = 0.0;  // in [0, 1]
};

// world = replicate × shard × cp, cp innermost. Parameters, gradients and optimizer state are
// sharded over the shard × cp ranks together (CP ranks hold the same weights); replicas all-reduce.
struct ParallelismSection {
  int64_t data_parallel_replicate_degree =
      -1;                                  // -1 fills the world (1 when the shard degree is -1)
  int64_t data_parallel_shard_degree = 1;  // -1 fills the world
  int64_t context_parallel_degree = 1;
  // When a block's gathered parameters are freed after its forward (torchtitan's name): default =
  // always, except the last block, whose backward comes next; never keeps them until backward.
  ReshardAfterForward fsdp_reshard_after_forward = ReshardAfterForward::kDefault;
  // With gradient accumulation, when FSDP reduce-scatters the gradients: after every micro-batch's
  // backward ("micro_batch", holding only shards), or once, after the step's last ("step": FSDP2's
  // set_requires_gradient_sync(False) on the others; each rank holds every unit's unsharded
  // float32 gradient between the micro-batches).
  FsdpGradientSync fsdp_gradient_sync = FsdpGradientSync::kMicroBatch;
  LoadBalancer context_parallel_load_balancer = LoadBalancer::kHeadTail;
  RotateMethod context_parallel_rotate_method = RotateMethod::kAllToAll;
  // How attention runs across the cp ranks of a sequence (worker/engine/parallel/parallelize.h):
  // ring attention, Ulysses (all-to-all from sequence to head shards), or hybrid (Ulysses inside
  // groups of context_parallel_ulysses_degree consecutive cp ranks, the ring across the groups).
  ContextParallelMethod context_parallel_method = ContextParallelMethod::kRing;
  // The Ulysses group size: 0 = by the method (ring 1, ulysses the whole cp group; hybrid needs it
  // set). UlyssesDegree (common/config/mesh.h) resolves it.
  int64_t context_parallel_ulysses_degree = 0;
};

// The Ulysses group size `p` asks for: 1 for ring, the cp degree for ulysses, the given degree for
// hybrid (at least 1; the validation refuses what does not divide the cp degree).
inline int64_t UlyssesDegree(const ParallelismSection& p) {
  switch (p.context_parallel_method) {
    case ContextParallelMethod::kRing: return 1;
    case ContextParallelMethod::kUlysses: return std::max<int64_t>(1, p.context_parallel_degree);
    case ContextParallelMethod::kHybrid: break;
  }
  return std::max<int64_t>(1, p.context_parallel_ulysses_degree);
}

// Whether a Ulysses group of `u` ranks can split the model's heads: n_heads divisible by u, and
// n_kv_heads divisible by u (split) or dividing it (replicated).
inline bool UlyssesSplitsHeads(int64_t n_heads, int64_t n_kv_heads, int64_t u) {
  return u >= 1 && n_heads % u == 0 && (n_kv_heads % u == 0 || u % n_kv_heads == 0);
}

struct CheckpointSection {
  bool enable = false;
  std::string folder = "checkpoints";
  int64_t interval = 50;      // > 0 when enabled
  int64_t keep_latest_k = 0;  // 0 keeps all
  // "async": a save copies the state to host buffers and training goes on while a background
  // thread writes (worker/engine/checkpoint/checkpoint_writer.h).
  AsyncMode async_mode = AsyncMode::kDisabled;
  // Initial weights: a torch.save'd state dict with our names, a checkpoint's step folder
  // (step-N/, e.g. another job's: `ringctl submit --init-from / --resume-from`), or with
  // initial_load_in_hf a Hugging Face folder (model.safetensors, or shards with
  // model.safetensors.index.json). Read only when the job's own folder holds no checkpoint yet.
  std::string initial_load_path;
  bool initial_load_in_hf = false;
  // torchtitan's: true loads the model alone (a fresh optimizer from step 1); false, from a step
  // folder only, loads the whole training state — model, AdamW's moments, the data position, the
  // RNG — so the job continues after the folder's step.
  bool initial_load_model_only = true;
  // The last checkpoint also holds step-N/hf/: config.json, safetensors shards of at most
  // hf_max_shard_size ("5GB", "500MB", "2GiB", or bytes) in export_dtype, and the tokenizer.
  bool last_save_in_hf = false;
  std::string hf_max_shard_size = "5GB";
  MixedPrecision export_dtype = MixedPrecision::kFloat32;
  // In-memory snapshots (worker/trainer/memory_snapshots.h): every memory_interval steps each rank
  // copies its training state into host memory and to a buddy rank's, so a lost rank is healed in
  // place from memory (0 = off). Independent of `enable`.
  int64_t memory_interval = 0;
};

struct MetricsSection {
  int64_t log_freq = 1;  // > 0: a human line every log_freq steps
  std::string jsonl;     // path of the JSONL report, or empty
  // Straggler detection (worker/trainer/straggler.h): a rank whose compute time is at least
  // straggler_threshold × the median of the others' for straggler_window steps in a row is named
  // in the step record, the log, `ringctl top` and `watch`. straggler_window = 0 turns it off.
  int64_t straggler_window = 5;
  double straggler_threshold = 1.25;
  // TensorBoard event files (torchtitan's names; common/tensorboard): rank 0 writes every step's
  // scalars into save_tb_folder, resolved like checkpoint.folder (under the job's own folder on a
  // worker, <checkpoint-root>/<job_id>/; relative to the working directory under ringtrain-run).
  bool enable_tensorboard = false;
  std::string save_tb_folder = "tb";
  // MFU's peak (README "Metrics"; worker/trainer/mfu.h): one device's dense FLOP/s in the compute
  // dtype. 0: a known GPU's data-sheet figure, or on the CPU a GEMM rate measured at start; -1: no
  // MFU.
  double peak_flops = 0;
};

// The validation data: what an eval job (job.mode = "eval") computes its loss over, and with
// enable (torchtitan's names) what a training job validates on every freq steps and after its last
// (the mean loss over `steps` batches of local_batch_size windows per dp rank, the same batches
// each time, no gradients).
struct ValidationSection {
  bool enable = false;
  int64_t freq = 10;
  std::optional<DatasetKind> dataset;  // unset ("" in TOML) = the training dataset
  std::string dataset_path;            // empty = the training dataset_path
  int64_t steps = 10;
  int64_t local_batch_size = 8;
};

// Activation checkpointing (torchtitan's names): full recomputes each block's forward in its
// backward (ring attention and its K/V exchange included); selective with "N" checkpoints every
// N-th block, with "op" keeps each attention's output and log-sum-exp so attention is not
// recomputed.
struct ActivationCheckpointSection {
  AcMode mode = AcMode::kNone;
  std::string selective_ac_option = "op";  // "op" or an integer in [1, model.n_layers]
};

struct CommSection {
  double timeout_seconds = 60.0;  // bounds every collective
  // auto: NCCL for CUDA ranks, Gloo for CPU ranks. gloo on CUDA ranks moves the device tensors
  // through host memory (several ranks on one GPU, which NCCL refuses). nccl needs CUDA ranks.
  CommBackend backend = CommBackend::kAuto;
};

struct JobConfig {
  JobSection job;
  ModelSection model;
  TrainingSection training;
  OptimizerSection optimizer;
  LrSchedulerSection lr_scheduler;
  ParallelismSection parallelism;
  CheckpointSection checkpoint;
  MetricsSection metrics;
  ValidationSection validation;
  CommSection comm;
  ActivationCheckpointSection activation_checkpoint;
  // What parsing accepted but the user should change (an old spelling of a choice), one line each.
  // Not a key: JobConfigToToml writes the new spellings. The trainer logs them; the coordinator
  // returns them with the SubmitJob reply.
  std::vector<std::string> warnings;
  // The keys the text or an override set ("model.dim"), so defaults can be told from choices.
  // Not a key; not printed.
  std::set<std::string> given_keys;
  // model.hf_assets_path is set and not yet read (ResolveHfAssets): the [model] values are
  // placeholders, so checks that need the architecture (max_seq_len against seq_len) wait.
  bool hf_pending = false;
};

// Parses TOML text, applies `overrides` ("--section.key=value" or "section.key=value"; the value is
// parsed as the key's type), then validates. Errors are INVALID_ARGUMENT with one line per problem.
// `source_name` names the text in messages (usually the file path).
absl::StatusOr<JobConfig> ParseJobConfig(const std::string& toml_text,
                                         const std::vector<std::string>& overrides,
                                         const std::string& source_name);

// Reads the file, then ParseJobConfig. A missing/unreadable file is NOT_FOUND naming the path.
absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                        const std::vector<std::string>& overrides);

// The activation-checkpoint interval of a valid config: 0 = none; 1 = every block (full); N = every
// N-th block (selective N); -1 = selective "op".
int64_t ActivationCheckpointEvery(const JobConfig& config);

// The config as TOML text (every key, effective values) — recorded next to checkpoints and reports.
// With `only_section` ("model"), that section alone.
std::string JobConfigToToml(const JobConfig& config, const std::string& only_section = "");

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_JOB_CONFIG_H_
