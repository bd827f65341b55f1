// Tests for the job config: TOML parsing, overrides, whole-config validation, the mesh check and
// the TOML round trip. Every validation rule is exercised at least once through an override on an
// empty file, which also exercises the override path.
#include "common/config/job_config.h"
#include "common/config/mesh.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config/config_fields.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kSource[] = "test.toml";

absl::StatusOr<JobConfig> Parse(const std::string& text,
                                const std::vector<std::string>& overrides = {}) {
  return ParseJobConfig(text, overrides, kSource);
}

// The INVALID_ARGUMENT message of a parse expected to fail ("" and a test failure if it passed).
std::string ParseError(const std::string& text, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<JobConfig> result = Parse(text, overrides);
  EXPECT_FALSE(result.ok()) << "expected an error for overrides "
                            << ::testing::PrintToString(overrides);
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  return std::string(result.status().message());
}

// Every field, so a round trip or a parse is checked completely.
void ExpectConfigEq(const JobConfig& a, const JobConfig& b) {
  EXPECT_EQ(a.job.mode, b.job.mode);
  EXPECT_EQ(a.job.max_restarts, b.job.max_restarts);
  EXPECT_EQ(a.model.dim, b.model.dim);
  EXPECT_EQ(a.model.n_layers, b.model.n_layers);
  EXPECT_EQ(a.model.n_heads, b.model.n_heads);
  EXPECT_EQ(a.model.n_kv_heads, b.model.n_kv_heads);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.multiple_of, b.model.multiple_of);
  EXPECT_EQ(a.model.ffn_dim_multiplier, b.model.ffn_dim_multiplier);
  EXPECT_EQ(a.model.norm_eps, b.model.norm_eps);
  EXPECT_EQ(a.model.rope_theta, b.model.rope_theta);
  EXPECT_EQ(a.model.max_seq_len, b.model.max_seq_len);
  EXPECT_EQ(a.training.seq_len, b.training.seq_len);
  EXPECT_EQ(a.training.local_batch_size, b.training.local_batch_size);
  EXPECT_EQ(a.training.steps, b.training.steps);
  EXPECT_EQ(a.training.seed, b.training.seed);
  EXPECT_EQ(a.training.max_norm, b.training.max_norm);
  EXPECT_EQ(a.training.dataset, b.training.dataset);
  EXPECT_EQ(a.training.dataset_path, b.training.dataset_path);
  EXPECT_EQ(a.training.tokenizer_path, b.training.tokenizer_path);
  EXPECT_EQ(a.training.token_dtype, b.training.token_dtype);
  EXPECT_EQ(a.training.sampler, b.training.sampler);
  EXPECT_EQ(a.training.mixed_precision_param, b.training.mixed_precision_param);
  EXPECT_EQ(a.training.attention_kernel, b.training.attention_kernel);
  EXPECT_EQ(a.comm.backend, b.comm.backend);
  EXPECT_EQ(a.training.mixed_precision_reduce, b.training.mixed_precision_reduce);
  EXPECT_EQ(a.training.global_batch_size, b.training.global_batch_size);
  EXPECT_EQ(a.parallelism.data_parallel_shard_degree, b.parallelism.data_parallel_shard_degree);
  EXPECT_EQ(a.parallelism.fsdp_reshard_after_forward, b.parallelism.fsdp_reshard_after_forward);
  EXPECT_EQ(a.parallelism.fsdp_gradient_sync, b.parallelism.fsdp_gradient_sync);
  EXPECT_EQ(a.activation_checkpoint.mode, b.activation_checkpoint.mode);
  EXPECT_EQ(a.activation_checkpoint.selective_ac_option,
            b.activation_checkpoint.selective_ac_option);
  EXPECT_EQ(a.optimizer.name, b.optimizer.name);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.lr_scheduler.warmup_steps, b.lr_scheduler.warmup_steps);
  EXPECT_EQ(a.lr_scheduler.decay_ratio, b.lr_scheduler.decay_ratio);
  EXPECT_EQ(a.lr_scheduler.decay_type, b.lr_scheduler.decay_type);
  EXPECT_EQ(a.lr_scheduler.min_lr_factor, b.lr_scheduler.min_lr_factor);
  EXPECT_EQ(a.parallelism.data_parallel_replicate_degree,
            b.parallelism.data_parallel_replicate_degree);
  EXPECT_EQ(a.parallelism.context_parallel_degree, b.parallelism.context_parallel_degree);
  EXPECT_EQ(a.parallelism.context_parallel_load_balancer,
            b.parallelism.context_parallel_load_balancer);
  EXPECT_EQ(a.parallelism.context_parallel_rotate_method,
            b.parallelism.context_parallel_rotate_method);
  EXPECT_EQ(a.checkpoint.enable, b.checkpoint.enable);
  EXPECT_EQ(a.checkpoint.folder, b.checkpoint.folder);
  EXPECT_EQ(a.checkpoint.interval, b.checkpoint.interval);
  EXPECT_EQ(a.checkpoint.keep_latest_k, b.checkpoint.keep_latest_k);
  EXPECT_EQ(a.checkpoint.async_mode, b.checkpoint.async_mode);
  EXPECT_EQ(a.checkpoint.initial_load_path, b.checkpoint.initial_load_path);
  EXPECT_EQ(a.metrics.log_freq, b.metrics.log_freq);
  EXPECT_EQ(a.metrics.jsonl, b.metrics.jsonl);
  EXPECT_EQ(a.metrics.enable_tensorboard, b.metrics.enable_tensorboard);
  EXPECT_EQ(a.metrics.save_tb_folder, b.metrics.save_tb_folder);
  EXPECT_EQ(a.validation.enable, b.validation.enable);
  EXPECT_EQ(a.validation.freq, b.validation.freq);
  EXPECT_EQ(a.validation.dataset, b.validation.dataset);
  EXPECT_EQ(a.validation.dataset_path, b.validation.dataset_path);
  EXPECT_EQ(a.validation.steps, b.validation.steps);
  EXPECT_EQ(a.validation.local_batch_size, b.validation.local_batch_size);
  EXPECT_EQ(a.comm.timeout_seconds, b.comm.timeout_seconds);
}

// A file setting every key to a non-default (and valid) value.
constexpr char kFullFile[] = R"toml(
[job]
mode = "eval"
max_restarts = 3

[model]
dim = 512
n_layers = 6
n_heads = 16
n_kv_heads = 8
vocab_size = 1024
multiple_of = 128
ffn_dim_multiplier = 1.3
norm_eps = 1e-6
rope_theta = 10000.0
max_seq_len = 4096

[training]
seq_len = 1024
local_batch_size = 4
steps = 200
seed = 7
max_norm = 0.5
dataset = "bin"
dataset_path = "/data/tokens.bin"
token_dtype = "uint32"
sampler = "random"
mixed_precision_param = "bfloat16"
attention_kernel = "torch_flash"
mixed_precision_reduce = "bfloat16"
global_batch_size = 16
tokenizer_path = "/data/tokenizer.json"

[optimizer]
name = "AdamW"
lr = 3e-4
beta1 = 0.8
beta2 = 0.99
eps = 1e-9
weight_decay = 0.0

[lr_scheduler]
warmup_steps = 20
decay_ratio = 0.5
decay_type = "cosine"
min_lr_factor = 0.1

[parallelism]
data_parallel_replicate_degree = 2
data_parallel_shard_degree = 2
context_parallel_degree = 4
fsdp_reshard_after_forward = "never"
fsdp_gradient_sync = "step"
context_parallel_load_balancer = "none"
context_parallel_rotate_method = "allgather"

[checkpoint]
enable = true
folder = "/tmp/ckpt"
interval = 25
keep_latest_k = 2
async_mode = "async"
initial_load_path = "/tmp/init.pt"

[metrics]
log_freq = 10
jsonl = "/tmp/metrics.jsonl"
enable_tensorboard = true
save_tb_folder = "runs/tb"

[validation]
enable = true
freq = 7
dataset = "text"
dataset_path = "/data/val.txt"
steps = 5
local_batch_size = 2

[comm]
timeout_seconds = 120.5
backend = "gloo"

[activation_checkpoint]
mode = "selective"
selective_ac_option = "2"
)toml";

JobConfig FullFileConfig() {
  JobConfig c;
  c.job = {JobMode::kEval, 3};
  c.model.dim = 512;
  c.model.n_layers = 6;
  c.model.n_heads = 16;
  c.model.n_kv_heads = 8;
  c.model.vocab_size = 1024;
  c.model.multiple_of = 128;
  c.model.ffn_dim_multiplier = 1.3;
  c.model.norm_eps = 1e-6;
  c.model.rope_theta = 10000.0;
  c.model.max_seq_len = 4096;
  c.training = {1024,
                4,
                200,
                7,
                0.5,
                DatasetKind::kBin,
                "/data/tokens.bin",
                TokenDtype::kUint32,
                SamplerKind::kRandom,
                MixedPrecision::kBFloat16,
                AttentionKernelKind::kTorchFlash,
                MixedPrecision::kBFloat16,
                16,
                "/data/tokenizer.json",
                2};
  c.model.attn_mask_type = AttnMaskType::kBlockCausal;
  c.optimizer = {OptimizerName::kAdamW, 3e-4, 0.8, 0.99, 1e-9, 0.0};
  c.lr_scheduler = {20, 0.5, DecayType::kCosine, 0.1};
  c.parallelism = {2,
                   2,
                   4,
                   ReshardAfterForward::kNever,
                   FsdpGradientSync::kStep,
                   LoadBalancer::kNone,
                   RotateMethod::kAllGather};
  c.activation_checkpoint = {AcMode::kSelective, "2"};
  c.checkpoint = {true, "/tmp/ckpt", 25, 2, AsyncMode::kAsync, "/tmp/init.pt"};
  c.metrics = {10, "/tmp/metrics.jsonl"};
  c.metrics.enable_tensorboard = true;
  c.metrics.save_tb_folder = "runs/tb";
  c.validation = {true, 7, DatasetKind::kText, "/data/val.txt", 5, 2};
  c.comm.timeout_seconds = 120.5;
  c.comm.backend = CommBackend::kGloo;
  return c;
}

// ---- Parsing
// ----------------------------------------------------------------------------------------

TEST(ParseJobConfigTest, EmptyFileGivesDefaults) {
  absl::StatusOr<JobConfig> config = Parse("");
  ASSERT_TRUE(config.ok()) << config.status();
  ExpectConfigEq(*config, JobConfig{});
  EXPECT_FALSE(config->model.ffn_dim_multiplier.has_value());
}

TEST(ParseJobConfigTest, EmptySectionsGiveDefaults) {
  absl::StatusOr<JobConfig> config = Parse("[job]\n[model]\n[training]\n[comm]\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ExpectConfigEq(*config, JobConfig{});
}

TEST(ParseJobConfigTest, FullFileSetsEveryKey) {
  absl::StatusOr<JobConfig> config = Parse(kFullFile);
  ASSERT_TRUE(config.ok()) << config.status();
  ExpectConfigEq(*config, FullFileConfig());
}

TEST(ParseJobConfigTest, OmittedKeysKeepDefaults) {
  absl::StatusOr<JobConfig> config = Parse("[training]\nsteps = 7\n");
  ASSERT_TRUE(config.ok()) << config.status();
  JobConfig expected;
  expected.training.steps = 7;
  ExpectConfigEq(*config, expected);
}

TEST(ParseJobConfigTest, IntegerAcceptedForFloatKey) {
  absl::StatusOr<JobConfig> config =
      Parse("[optimizer]\nlr = 1\n[model]\nffn_dim_multiplier = 2\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.lr, 1.0);
  EXPECT_EQ(config->model.ffn_dim_multiplier, 2.0);
}

TEST(ParseJobConfigTest, FloatForIntegerKeyIsAnError) {
  EXPECT_THAT(ParseError("[training]\nsteps = 10.0\n"),
              AllOf(StartsWith("invalid config test.toml:\n"),
                    HasSubstr("training.steps = 10.0: expected an integer")));
}

TEST(ParseJobConfigTest, WrongTypesNameKeyValueAndLine) {
  EXPECT_THAT(ParseError("[training]\nseq_len = \"abc\"\n"),
              HasSubstr("line 2: training.seq_len = \"abc\": expected an integer"));
  EXPECT_THAT(ParseError("[optimizer]\nlr = \"fast\"\n"),
              HasSubstr("optimizer.lr = \"fast\": expected a number"));
  EXPECT_THAT(ParseError("[checkpoint]\nenable = 1\n"),
              HasSubstr("checkpoint.enable = 1: expected true or false"));
  EXPECT_THAT(ParseError("[job]\nmode = 5\n"), HasSubstr("job.mode = 5: expected a string"));
  EXPECT_THAT(ParseError("[model]\nffn_dim_multiplier = true\n"),
              HasSubstr("model.ffn_dim_multiplier = true: expected a number"));
  EXPECT_THAT(ParseError("[optimizer]\nlr = inf\n"),
              HasSubstr("optimizer.lr = inf: expected a finite number"));
  EXPECT_THAT(ParseError("[training]\nsteps = [1, 2]\n"),
              HasSubstr("training.steps = [ 1, 2 ]: expected an integer"));
}

TEST(ParseJobConfigTest, UnknownKeyListsValidKeysAndSuggests) {
  const std::string message = ParseError("[training]\nstpes = 10\n");
  EXPECT_THAT(message, HasSubstr("line 2: unknown key training.stpes"));
  EXPECT_THAT(
      message,
      HasSubstr("valid keys in [training]: seq_len, local_batch_size, steps, seed, max_norm, "
                "dataset, dataset_path, token_dtype, sampler"));
  EXPECT_THAT(message, HasSubstr("did you mean 'steps'?"));
}

// Several unknown keys of one section: its valid keys are listed once, the rest say "as above"
// (so twenty problems and the count of the rest fit in one gRPC status).
TEST(ParseJobConfigTest, ASectionsValidKeysAreListedOnce) {
  const std::string message = ParseError("[comm]\nbandwidth = 10\nlatency = 3\n", {"comm.x=1"});
  EXPECT_THAT(message, HasSubstr("line 2: unknown key comm.bandwidth (valid keys in [comm]: "
                                 "timeout_seconds, backend)"));
  EXPECT_THAT(message,
              HasSubstr("line 3: unknown key comm.latency (valid keys in [comm]: as above)"));
  EXPECT_THAT(message, HasSubstr("unknown key comm.x (valid keys in [comm]: as above)"));
}

TEST(ParseJobConfigTest, UnknownKeyFarFromAnyKeyHasNoSuggestion) {
  const std::string message = ParseError("[comm]\nbandwidth = 10\n");
  EXPECT_THAT(
      message,
      HasSubstr("unknown key comm.bandwidth (valid keys in [comm]: timeout_seconds, backend)"));
  EXPECT_THAT(message, Not(HasSubstr("did you mean")));
}

TEST(ParseJobConfigTest, UnknownSectionListsSectionsAndSuggests) {
  const std::string message = ParseError("[trainig]\nsteps = 10\n");
  EXPECT_THAT(message, HasSubstr("unknown section [trainig]"));
  EXPECT_THAT(
      message,
      HasSubstr("valid sections: job, model, training, optimizer, lr_scheduler, parallelism, "
                "checkpoint, metrics, validation, comm"));
  EXPECT_THAT(message, HasSubstr("did you mean 'training'?"));
  EXPECT_THAT(ParseError("[zzzzzzzz]\n"),
              AllOf(HasSubstr("unknown section [zzzzzzzz]"), Not(HasSubstr("did you mean"))));
}

TEST(ParseJobConfigTest, KeyOutsideAnySectionSuggestsItsSections) {
  const std::string message = ParseError("steps = 10\n");
  EXPECT_THAT(message, HasSubstr("key 'steps' is not in a section"));
  EXPECT_THAT(message, HasSubstr("did you mean training.steps or validation.steps?"));
}

TEST(ParseJobConfigTest, SectionThatIsNotATableIsAnError) {
  EXPECT_THAT(ParseError("training = 5\n"), HasSubstr("[training] must be a table"));
}

TEST(ParseJobConfigTest, MalformedTomlNamesSourceLineAndColumn) {
  const std::string message = ParseError("[training]\nsteps = 10\nseq_len = = 4\n");
  EXPECT_THAT(message, StartsWith("invalid config test.toml: malformed TOML at line 3, column"));
  EXPECT_THAT(message, HasSubstr("could not determine value type"));  // toml++'s own description
}

TEST(ParseJobConfigTest, DuplicateKeyIsMalformed) {
  EXPECT_THAT(ParseError("[training]\nsteps = 1\nsteps = 2\n"),
              HasSubstr("malformed TOML at line 3"));
}

TEST(ParseJobConfigTest, ParseProblemsAreAllReportedInFileOrder) {
  const std::string message = ParseError(
      "[training]\nzeta = 1\nalpha = 2\n[bogus]\n[model]\ndim = \"x\"\n", {"--training.steps=abc"});
  const size_t zeta = message.find("line 2: unknown key training.zeta");
  const size_t alpha = message.find("line 3: unknown key training.alpha");
  const size_t bogus = message.find("line 4: unknown section [bogus]");
  const size_t dim = message.find("line 6: model.dim = \"x\": expected an integer");
  const size_t steps = message.find("training.steps = abc");
  ASSERT_NE(zeta, std::string::npos) << message;
  ASSERT_NE(alpha, std::string::npos) << message;
  ASSERT_NE(bogus, std::string::npos) << message;
  ASSERT_NE(dim, std::string::npos) << message;
  ASSERT_NE(steps, std::string::npos) << message;
  EXPECT_LT(zeta, alpha);
  EXPECT_LT(alpha, bogus);
  EXPECT_LT(bogus, dim);
  EXPECT_LT(dim, steps);
}

// ---- Overrides
// --------------------------------------------------------------------------------------

TEST(OverrideTest, EachTypeParses) {
  absl::StatusOr<JobConfig> config =
      Parse("", {"--training.steps=10", "training.seed=-0", "--optimizer.lr=8e-4",
                 "optimizer.beta1=0", "--model.ffn_dim_multiplier=1.5", "--checkpoint.enable=true",
                 "--checkpoint.folder=/x/y", "--training.dataset=\"synthetic\"",
                 "--metrics.jsonl=a=b", "--comm.timeout_seconds=+30"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.steps, 10);
  EXPECT_EQ(config->training.seed, 0);
  EXPECT_EQ(config->optimizer.lr, 8e-4);
  EXPECT_EQ(config->optimizer.beta1, 0.0);
  EXPECT_EQ(config->model.ffn_dim_multiplier, 1.5);
  EXPECT_TRUE(config->checkpoint.enable);
  EXPECT_EQ(config->checkpoint.folder, "/x/y");
  EXPECT_EQ(config->training.dataset, DatasetKind::kSynthetic);
  EXPECT_EQ(config->metrics.jsonl, "a=b");  // only the first '=' separates key from value
  EXPECT_EQ(config->comm.timeout_seconds, 30.0);
}

TEST(OverrideTest, AChoiceOverrideReplacesAMisspeltFileValue) {
  // The file's misspelling is reported only when nothing later fixes it.
  absl::StatusOr<JobConfig> config =
      Parse("[training]\nsampler = \"shuffle\"\n[validation]\ndataset = \"txt\"\n",
            {"--training.sampler=random", "--validation.dataset="});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.sampler, SamplerKind::kRandom);
  EXPECT_FALSE(config->validation.dataset.has_value());
  const std::string message =
      ParseError("[training]\nsampler = \"random\"\n", {"--training.sampler=shuffle"});
  EXPECT_THAT(message, HasSubstr("training.sampler = \"shuffle\": must be one of"));
}

TEST(OverrideTest, StringValueKeepsInnerTextAndSpaces) {
  absl::StatusOr<JobConfig> config =
      Parse("", {"--metrics.jsonl=\"my run.jsonl\"", "--checkpoint.folder= a b "});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics.jsonl, "my run.jsonl");
  EXPECT_EQ(config->checkpoint.folder, " a b ");
}

TEST(OverrideTest, AppliedAfterFileInOrder) {
  absl::StatusOr<JobConfig> config =
      Parse("[training]\nsteps = 50\n[checkpoint]\nenable = true\n",
            {"--training.steps=60", "--training.steps=70", "--checkpoint.enable=false"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.steps, 70);
  EXPECT_FALSE(config->checkpoint.enable);
}

TEST(OverrideTest, OverrideCanFixAnInvalidFile) {
  // Validation runs after overrides, so the file alone need not be valid.
  absl::StatusOr<JobConfig> config = Parse("[training]\nsteps = 0\n", {"--training.steps=5"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.steps, 5);
}

TEST(OverrideTest, MissingEqualsNamesTheArgument) {
  EXPECT_THAT(ParseError("", {"--training.steps"}),
              HasSubstr("override '--training.steps': expected --section.key=value"));
  EXPECT_THAT(ParseError("", {"--training.steps", "10"}), HasSubstr("override '10'"));
}

TEST(OverrideTest, IntegerErrors) {
  EXPECT_THAT(
      ParseError("", {"--training.steps=1.5"}),
      HasSubstr("training.steps = 1.5 (override '--training.steps=1.5'): expected an integer"));
  EXPECT_THAT(ParseError("", {"--training.steps=abc"}), HasSubstr("training.steps = abc"));
  EXPECT_THAT(ParseError("", {"--training.steps="}), HasSubstr("expected an integer"));
  EXPECT_THAT(ParseError("", {"--training.steps=10abc"}), HasSubstr("expected an integer"));
  EXPECT_THAT(ParseError("", {"--training.steps=99999999999999999999"}),
              HasSubstr("expected an integer that fits in 64 bits"));
}

TEST(OverrideTest, FloatErrors) {
  EXPECT_THAT(ParseError("", {"--optimizer.lr=fast"}),
              HasSubstr("optimizer.lr = fast (override '--optimizer.lr=fast'): expected a number"));
  EXPECT_THAT(ParseError("", {"--optimizer.lr=1e999"}), HasSubstr("expected a finite number"));
  EXPECT_THAT(ParseError("", {"--optimizer.lr=nan"}), HasSubstr("expected a finite number"));
  EXPECT_THAT(ParseError("", {"--optimizer.lr=1e-3x"}), HasSubstr("expected a number"));
  EXPECT_THAT(ParseError("", {"--model.ffn_dim_multiplier=x"}),
              HasSubstr("model.ffn_dim_multiplier = x"));
}

TEST(OverrideTest, BoolErrors) {
  EXPECT_THAT(
      ParseError("", {"--checkpoint.enable=yes"}),
      HasSubstr(
          "checkpoint.enable = yes (override '--checkpoint.enable=yes'): expected true or false"));
  EXPECT_THAT(ParseError("", {"--checkpoint.enable=1"}), HasSubstr("expected true or false"));
}

TEST(OverrideTest, UnknownNamesAreErrorsWithSuggestions) {
  EXPECT_THAT(ParseError("", {"--training.stpes=5"}),
              AllOf(HasSubstr("override '--training.stpes=5': unknown key training.stpes"),
                    HasSubstr("did you mean 'steps'?")));
  EXPECT_THAT(ParseError("", {"--optimiser.lr=1"}), AllOf(HasSubstr("unknown section [optimiser]"),
                                                          HasSubstr("did you mean 'optimizer'?")));
  EXPECT_THAT(ParseError("", {"--lr=1"}), AllOf(HasSubstr("key 'lr' is not in a section"),
                                                HasSubstr("did you mean optimizer.lr?")));
}

TEST(OverrideTest, AllOverrideProblemsAreReported) {
  const std::string message = ParseError("", {"--training.steps=x", "--nope", "--optimizer.lr=y"});
  EXPECT_THAT(message, HasSubstr("training.steps = x"));
  EXPECT_THAT(message, HasSubstr("override '--nope'"));
  EXPECT_THAT(message, HasSubstr("optimizer.lr = y"));
}

// ---- Validation
// -------------------------------------------------------------------------------------

struct RuleCase {
  std::vector<std::string> overrides;
  std::string expected;  // a substring of the problem line
};

void PrintTo(const RuleCase& c, std::ostream* os) { *os << ::testing::PrintToString(c.overrides); }

class ValidationRuleTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(ValidationRuleTest, ReportsTheProblem) {
  const std::string message = ParseError("", GetParam().overrides);
  EXPECT_THAT(message, StartsWith("invalid config test.toml:\n  "));
  EXPECT_THAT(message, HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    AllRules, ValidationRuleTest,
    ::testing::Values(
        // job
        RuleCase{{"job.mode=serve"}, "job.mode = \"serve\": must be one of \"train\", \"eval\""},
        RuleCase{{"job.max_restarts=-1"}, "job.max_restarts = -1: must be in [0, 1000]"},
        // model
        RuleCase{{"model.dim=0"}, "model.dim = 0: must be in [1, 65536]"},
        RuleCase{{"model.n_layers=0"}, "model.n_layers = 0: must be in [1, 1024]"},
        RuleCase{{"model.n_heads=-8"}, "model.n_heads = -8: must be in [1, 65536]"},
        RuleCase{{"model.n_kv_heads=0"}, "model.n_kv_heads = 0: must be in [1, 65536]"},
        RuleCase{{"model.vocab_size=0"},
                 "model.vocab_size = 0: must be in [1, 4294967296] (token ids are 32-bit)"},
        RuleCase{{"model.multiple_of=0"}, "model.multiple_of = 0: must be in [1, 65536]"},
        RuleCase{{"model.max_seq_len=0"}, "model.max_seq_len = 0: must be in [1, 16777216]"},
        RuleCase{{"model.n_kv_heads=3"},
                 "model.n_kv_heads = 3 must divide model.n_heads = 8 (valid: 1, 2, 4, 8)"},
        RuleCase{{"model.dim=250"},
                 "model.dim = 250 must be divisible by model.n_heads = 8 (try model.dim = 248 or "
                 "256, or "
                 "model.n_heads = 5 or 10)"},
        RuleCase{{"model.dim=200"},
                 "model.dim / model.n_heads = 200 / 8 = 25 (head_dim) must be even for RoPE (try "
                 "model.dim = 192 or "
                 "208)"},
        RuleCase{{"model.ffn_dim_multiplier=0"},
                 "model.ffn_dim_multiplier = 0.0: must be in (0, 64]"},
        RuleCase{{"model.norm_eps=0"}, "model.norm_eps = 0.0: must be in (0, 1]"},
        RuleCase{{"model.rope_theta=-1"}, "model.rope_theta = -1.0: must be in (0, 1e+12]"},
        RuleCase{{"model.max_seq_len=128"},
                 "model.max_seq_len = 128 must be >= training.seq_len = 256"},
        // training
        RuleCase{{"training.seq_len=0"}, "training.seq_len = 0: must be in [1, 16777216]"},
        RuleCase{{"training.local_batch_size=0"},
                 "training.local_batch_size = 0: must be in [1, 1048576]"},
        RuleCase{{"training.steps=0"}, "training.steps = 0: must be > 0"},
        RuleCase{{"training.seed=-1"}, "training.seed = -1: must be >= 0"},
        RuleCase{{"training.max_norm=0"}, "training.max_norm = 0.0: must be > 0"},
        RuleCase{{"training.dataset=txt"},
                 "training.dataset = \"txt\": must be one of \"synthetic\", \"text\", \"bin\"; did "
                 "you mean 'text'?"},
        RuleCase{{"training.dataset=text", "model.vocab_size=1024"},
                 "training.dataset_path = \"\": required when training.dataset = \"text\""},
        RuleCase{{"training.dataset=bin"},
                 "training.dataset_path = \"\": required when training.dataset = \"bin\""},
        RuleCase{{"training.token_dtype=int8"},
                 "training.token_dtype = \"int8\": must be one of \"uint16\", \"uint32\""},
        RuleCase{{"training.sampler=shuffle"},
                 "training.sampler = \"shuffle\": must be one of \"sequential\", \"random\""},
        RuleCase{{"model.attn_mask_type=block_causal"},
                 "model.attn_mask_type = \"block_causal\" needs the token that ends a document: "
                 "set training.eos_id, or training.tokenizer_path (whose end-of-text token is the "
                 "default)"},
        RuleCase{{"model.attn_mask_type=block_causal", "training.eos_id=512"},
                 "training.eos_id = 512 must be below model.vocab_size = 512"},
        RuleCase{{"model.attn_mask_type=blockcausal"},
                 "model.attn_mask_type = \"blockcausal\": must be one of \"causal\", "
                 "\"block_causal\"; did you mean 'block_causal'?"},
        RuleCase{{"parallelism.context_parallel_load_balancer=document",
                  "parallelism.context_parallel_degree=3", "training.seq_len=100",
                  "model.max_seq_len=100"},
                 "training.seq_len = 100 must be divisible by 2 × "
                 "parallelism.context_parallel_degree = 2 × 3 = 6 (context_parallel_load_balancer "
                 "= \"document\" splits each sequence into 6 chunks); try training.seq_len = 96 "
                 "or 102"},
        RuleCase{
            {"training.dataset=text", "training.dataset_path=a.txt", "model.vocab_size=128"},
            "model.vocab_size = 128: must be >= 256 when training.dataset = \"text\" without a "
            "training.tokenizer_path"},
        // optimizer
        RuleCase{{"optimizer.name=Adam"},
                 "optimizer.name = \"Adam\": must be one of \"AdamW\"; did you mean 'AdamW'?"},
        RuleCase{{"optimizer.lr=0"}, "optimizer.lr = 0.0: must be > 0"},
        RuleCase{{"optimizer.beta1=1"}, "optimizer.beta1 = 1.0: must be in [0, 1)"},
        RuleCase{{"optimizer.beta2=-0.5"}, "optimizer.beta2 = -0.5: must be in [0, 1)"},
        RuleCase{{"optimizer.eps=0"}, "optimizer.eps = 0.0: must be > 0"},
        RuleCase{{"optimizer.weight_decay=-0.1"}, "optimizer.weight_decay = -0.1: must be >= 0"},
        // lr_scheduler
        RuleCase{{"lr_scheduler.warmup_steps=-1"}, "lr_scheduler.warmup_steps = -1: must be >= 0"},
        RuleCase{{"lr_scheduler.decay_ratio=1.5"},
                 "lr_scheduler.decay_ratio = 1.5: must be in [0, 1]"},
        RuleCase{{"lr_scheduler.decay_type=cosin"},
                 "lr_scheduler.decay_type = \"cosin\": must be one of \"linear\", \"cosine\"; did "
                 "you mean 'cosine'?"},
        RuleCase{{"lr_scheduler.min_lr_factor=2"},
                 "lr_scheduler.min_lr_factor = 2.0: must be in [0, 1]"},
        RuleCase{
            {"training.mixed_precision_param=fp16"},
            "training.mixed_precision_param = \"fp16\": must be one of \"float32\", \"bfloat16\""},
        RuleCase{{"training.attention_kernel=flash"},
                 "training.attention_kernel = \"flash\": must be one of \"auto\", \"cpu_flash\", "
                 "\"torch_flash\", \"tiled\""},
        RuleCase{{"training.mixed_precision_reduce=bfloat16"},
                 "training.mixed_precision_reduce = \"bfloat16\" needs "
                 "training.mixed_precision_param = \"bfloat16\""},
        RuleCase{
            {"training.mixed_precision_reduce=fp16"},
            "training.mixed_precision_reduce = \"fp16\": must be one of \"float32\", \"bfloat16\""},
        RuleCase{{"training.global_batch_size=0"},
                 "training.global_batch_size = 0: must be -1 (data-parallel degree × "
                 "local_batch_size) or in [1, "
                 "17179869184]"},
        RuleCase{
            {"training.global_batch_size=12"},
            "training.global_batch_size = 12 must be a multiple of training.local_batch_size = 8"},
        RuleCase{{"activation_checkpoint.mode=partial"},
                 "activation_checkpoint.mode = \"partial\": must be one of \"none\", \"full\", "
                 "\"selective\""},
        RuleCase{
            {"activation_checkpoint.mode=selective", "activation_checkpoint.selective_ac_option=0"},
            "activation_checkpoint.selective_ac_option = \"0\": must be \"op\" (keep attention "
            "outputs) or an "
            "integer N in [1, model.n_layers = 4]"},
        RuleCase{{"activation_checkpoint.selective_ac_option=5"},
                 "activation_checkpoint.selective_ac_option = \"5\": must be \"op\""},
        RuleCase{{"activation_checkpoint.selective_ac_option=2x"},
                 "activation_checkpoint.selective_ac_option = \"2x\": must be \"op\""},
        RuleCase{{"comm.backend=mpi"},
                 "comm.backend = \"mpi\": must be one of \"auto\", \"nccl\", \"gloo\""},
        // parallelism
        RuleCase{{"parallelism.data_parallel_replicate_degree=0"},
                 "parallelism.data_parallel_replicate_degree = 0: must be -1 (fill the world) or "
                 "in [1, 16384] (the "
                 "largest world size)"},
        RuleCase{{"parallelism.data_parallel_replicate_degree=-2"},
                 "parallelism.data_parallel_replicate_degree = -2: must be -1"},
        RuleCase{{"parallelism.context_parallel_degree=0"},
                 "parallelism.context_parallel_degree = 0: must be in [1, 16384]"},
        RuleCase{{"parallelism.data_parallel_shard_degree=0"},
                 "parallelism.data_parallel_shard_degree = 0: must be -1 (fill the world) or in "
                 "[1, 16384]"},
        RuleCase{{"parallelism.fsdp_reshard_after_forward=sometimes"},
                 "parallelism.fsdp_reshard_after_forward = \"sometimes\": must be one of "
                 "\"default\", \"always\", "
                 "\"never\""},
        RuleCase{{"parallelism.fsdp_gradient_sync=never"},
                 "parallelism.fsdp_gradient_sync = \"never\": must be one of \"micro_batch\", "
                 "\"step\""},
        RuleCase{{"parallelism.context_parallel_load_balancer=zigzag"},
                 "parallelism.context_parallel_load_balancer = \"zigzag\": must be one of "
                 "\"headtail\", \"none\""},
        RuleCase{{"parallelism.context_parallel_rotate_method=ring"},
                 "parallelism.context_parallel_rotate_method = \"ring\": must be one of "
                 "\"alltoall\", \"allgather\""},
        RuleCase{{"parallelism.context_parallel_degree=3"},
                 "training.seq_len = 256 must be divisible by 2 × "
                 "parallelism.context_parallel_degree = 2 × 3 = 6 "
                 "(context_parallel_load_balancer = \"headtail\" splits each sequence into 6 "
                 "chunks); try "
                 "training.seq_len = 252 or 258"},
        RuleCase{
            {"parallelism.context_parallel_degree=3",
             "parallelism.context_parallel_load_balancer=none"},
            "training.seq_len = 256 must be divisible by parallelism.context_parallel_degree = 3 "
            "(context_parallel_load_balancer = \"none\" splits each sequence into 3 chunks); try "
            "training.seq_len = 255 or 258"},
        RuleCase{{"parallelism.context_parallel_degree=4", "training.seq_len=4"},
                 "training.seq_len = 4 must be divisible by 2 × "
                 "parallelism.context_parallel_degree = 2 × 4 = 8 "
                 "(context_parallel_load_balancer = \"headtail\" splits each sequence into 8 "
                 "chunks); try "
                 "training.seq_len = 8"},
        // checkpoint, metrics, validation, comm
        RuleCase{{"checkpoint.interval=0"}, "checkpoint.interval = 0: must be > 0"},
        RuleCase{{"checkpoint.keep_latest_k=-1"},
                 "checkpoint.keep_latest_k = -1: must be >= 0 (0 keeps all)"},
        RuleCase{{"checkpoint.enable=true", "checkpoint.folder="},
                 "checkpoint.folder = \"\": required when checkpoint.enable = true"},
        RuleCase{{"metrics.log_freq=0"}, "metrics.log_freq = 0: must be > 0"},
        RuleCase{{"validation.dataset=parquet"},
                 "validation.dataset = \"parquet\": must be empty (use the training dataset) or "
                 "one of \"synthetic\", "
                 "\"text\", \"bin\""},
        RuleCase{{"validation.steps=0"}, "validation.steps = 0: must be > 0"},
        RuleCase{{"validation.freq=0"}, "validation.freq = 0: must be > 0"},
        RuleCase{{"metrics.enable_tensorboard=true", "metrics.save_tb_folder="},
                 "metrics.save_tb_folder = \"\": required when metrics.enable_tensorboard = true"},
        RuleCase{{"validation.local_batch_size=-3"},
                 "validation.local_batch_size = -3: must be in [1, 1048576]"},
        RuleCase{{"comm.timeout_seconds=0"},
                 "comm.timeout_seconds = 0.0: must be in [0.001, 86400] seconds"}));

// Values the trainer would refuse, or turn into nonsense, are refused by the validation the
// coordinator runs at submit: a timeout of 1e308 s became -2^63 ms, 1e-9 s became 0 ms, and a vocab
// of 2^32 + 1 passed until the trainer's synthetic source refused it.
TEST(ValidationTest, ValuesOutsideTheirBoundsAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"comm.timeout_seconds=1e308",
       "comm.timeout_seconds = 1e+308: must be in [0.001, 86400] seconds (it is counted in whole "
       "milliseconds)"},
      {"comm.timeout_seconds=1e-9",
       "comm.timeout_seconds = 1e-09: must be in [0.001, 86400] seconds"},
      {"comm.timeout_seconds=-1", "comm.timeout_seconds = -1.0: must be in [0.001, 86400] seconds"},
      {"job.restart_backoff_seconds=1e-9",
       "job.restart_backoff_seconds = 1e-09: must be 0 or in [0.001, 3600] seconds"},
      {"job.restart_backoff_seconds=3601",
       "job.restart_backoff_seconds = 3601.0: must be 0 or in [0.001, 3600]"},
      {"job.max_restarts=1001", "job.max_restarts = 1001: must be in [0, 1000]"},
      {"model.vocab_size=4294967297",
       "model.vocab_size = 4294967297: must be in [1, 4294967296] (token ids are 32-bit)"},
      {"model.dim=9223372036854775807", "model.dim = 9223372036854775807: must be in [1, 65536]"},
      {"model.n_layers=1000000000", "model.n_layers = 1000000000: must be in [1, 1024]"},
      {"model.ffn_dim_multiplier=1e300", "model.ffn_dim_multiplier = 1e+300: must be in (0, 64]"},
      {"training.seq_len=1099511627776",
       "training.seq_len = 1099511627776: must be in [1, 16777216]"},
      {"training.local_batch_size=1099511627776",
       "training.local_batch_size = 1099511627776: must be in [1, 1048576]"},
      {"training.global_batch_size=-2", "training.global_batch_size = -2: must be -1"},
      {"optimizer.beta2=nan", "expected a finite number"},
  };
  for (const auto& [override_text, expected] : cases) {
    EXPECT_THAT(ParseError("", {override_text}), HasSubstr(expected)) << override_text;
  }
}

TEST(ValidationTest, BoundsAreInclusiveWhereTheySaySo) {
  for (const std::vector<std::string>& overrides :
       std::vector<std::vector<std::string>>{{"comm.timeout_seconds=0.001"},
                                             {"comm.timeout_seconds=86400"},
                                             {"job.restart_backoff_seconds=0"},
                                             {"job.restart_backoff_seconds=3600"},
                                             {"job.max_restarts=1000"},
                                             {"model.vocab_size=4294967296"},
                                             {"model.n_layers=1024"},
                                             {"training.seed=9223372036854775807"},
                                             {"model.ffn_dim_multiplier=64"},
                                             {"model.norm_eps=1"}}) {
    const absl::StatusOr<JobConfig> config = Parse("", overrides);
    EXPECT_TRUE(config.ok()) << overrides[0] << ": " << config.status();
  }
}

// One table bounds every numeric key (config_fields.cc): a key added without bounds fails here.
TEST(ValidationTest, EveryNumericKeyHasBounds) {
  JobConfig config;
  for (const config_internal::Section& section : config_internal::Sections(config)) {
    for (const config_internal::Field& f : section.fields) {
      const std::string key = absl::StrCat(section.name, ".", f.key);
      if (std::holds_alternative<int64_t*>(f.ptr)) {
        EXPECT_TRUE(std::holds_alternative<config_internal::IntBounds>(f.bounds)) << key;
      } else if (std::holds_alternative<double*>(f.ptr) ||
                 std::holds_alternative<std::optional<double>*>(f.ptr)) {
        EXPECT_TRUE(std::holds_alternative<config_internal::RealBounds>(f.bounds)) << key;
      } else {
        EXPECT_TRUE(std::holds_alternative<std::monostate>(f.bounds)) << key;
      }
    }
  }
}

TEST(ValidationTest, BoundaryValuesAreAccepted) {
  absl::StatusOr<JobConfig> config =
      Parse("", {"optimizer.beta1=0", "optimizer.beta2=0.999999", "optimizer.weight_decay=0",
                 "lr_scheduler.decay_ratio=1", "lr_scheduler.min_lr_factor=1",
                 "lr_scheduler.warmup_steps=0", "training.seed=0", "checkpoint.keep_latest_k=0",
                 "model.max_seq_len=256", "model.n_kv_heads=8",
                 "parallelism.data_parallel_replicate_degree=1",
                 "parallelism.context_parallel_degree=128", "job.max_restarts=0",
                 "validation.dataset=bin", "checkpoint.enable=true"});
  ASSERT_TRUE(config.ok()) << config.status();
}

TEST(ValidationTest, WarmupPlusDecayMayFillTheRunExactly) {
  absl::StatusOr<JobConfig> config =
      Parse("", {"lr_scheduler.warmup_steps=70", "lr_scheduler.decay_ratio=0.3"});
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST(ValidationTest, DisabledCheckpointMayHaveEmptyFolder) {
  EXPECT_TRUE(Parse("", {"checkpoint.folder="}).ok());
}

TEST(ValidationTest, TextDatasetWithBigVocabIsValid) {
  absl::StatusOr<JobConfig> config =
      Parse("[training]\ndataset = \"text\"\ndataset_path = \"corpus.txt\"\n");
  EXPECT_TRUE(config.ok()) << config.status();
}

// With a tokenizer the trainer checks vocab_size against it; the config alone cannot.
TEST(ValidationTest, TextDatasetWithTokenizerTakesAnyVocab) {
  absl::StatusOr<JobConfig> config =
      Parse("", {"training.dataset=text", "training.dataset_path=a.txt",
                 "training.tokenizer_path=tokenizer.json", "model.vocab_size=128"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.tokenizer_path, "tokenizer.json");
  EXPECT_NE(JobConfigToToml(*config).find("tokenizer_path = \"tokenizer.json\""),
            std::string::npos);
}

TEST(ValidationTest, SeveralProblemsAreReportedInOneMessage) {
  const std::string message = ParseError("[model]\ndim = 0\n[optimizer]\nlr = -1.0\n",
                                         {"--job.mode=serve", "--comm.timeout_seconds=0"});
  EXPECT_THAT(message, StartsWith("invalid config test.toml:\n"));
  EXPECT_THAT(message, HasSubstr("\n  job.mode = \"serve\""));
  EXPECT_THAT(message, HasSubstr("\n  model.dim = 0: must be in [1, 65536]"));
  EXPECT_THAT(message, HasSubstr("\n  optimizer.lr = -1.0: must be > 0"));
  EXPECT_THAT(message,
              HasSubstr("\n  comm.timeout_seconds = 0.0: must be in [0.001, 86400] seconds"));
  // One problem per line: the header plus four.
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 4) << message;
}

TEST(JobConfigTest, OldSpellingOfAChoiceStillWorksWithAWarning) {
  absl::StatusOr<JobConfig> config = Parse("[training]\nattention_kernel = \"ringtrain\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.attention_kernel, AttentionKernelKind::kCpuFlash);
  ASSERT_EQ(config->warnings.size(), 1u);
  EXPECT_THAT(config->warnings[0], HasSubstr("training.attention_kernel = \"ringtrain\" is the old "
                                             "spelling of \"cpu_flash\""));
  EXPECT_THAT(JobConfigToToml(*config), HasSubstr("attention_kernel = \"cpu_flash\""));
  config = Parse("", {"--training.attention_kernel=ringtrain"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training.attention_kernel, AttentionKernelKind::kCpuFlash);
  EXPECT_EQ(config->warnings.size(), 1u);
  config = Parse("[training]\nattention_kernel = \"cpu_flash\"\n");
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->warnings.empty());
}

TEST(JobConfigTest, ContextParallelMethodsAndTheirUlyssesDegree) {
  absl::StatusOr<JobConfig> config = Parse("[parallelism]\ncontext_parallel_method = \"ring\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->parallelism.context_parallel_method, ContextParallelMethod::kRing);
  EXPECT_EQ(UlyssesDegree(config->parallelism), 1);
  EXPECT_THAT(ParseError("[parallelism]\ncontext_parallel_method = \"rings\"\n"),
              HasSubstr("parallelism.context_parallel_method = \"rings\": must be one of "
                        "\"ring\", \"ulysses\", \"hybrid\""));
  const std::string heads = "[model]\nn_heads = 8\nn_kv_heads = 2\ndim = 128\n";
  // ulysses: the whole cp group (unset or equal); hybrid: a divisor of cp, required.
  config = Parse(heads +
                 "[parallelism]\ncontext_parallel_degree = 4\n"
                 "context_parallel_method = \"ulysses\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(UlyssesDegree(config->parallelism), 4);  // 2 K/V heads replicated over 4 ranks
  config = Parse(heads +
                 "[parallelism]\ncontext_parallel_degree = 8\n"
                 "context_parallel_method = \"hybrid\"\n"
                 "context_parallel_ulysses_degree = 2\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(UlyssesDegree(config->parallelism), 2);
  EXPECT_THAT(ParseError(heads + "[parallelism]\ncontext_parallel_degree = 4\n"
                                 "context_parallel_method = \"hybrid\"\n"),
              HasSubstr("parallelism.context_parallel_method = \"hybrid\" needs "
                        "parallelism.context_parallel_ulysses_degree, a divisor of "
                        "context_parallel_degree = 4 (1, 2, 4)"));
  EXPECT_THAT(ParseError(heads + "[parallelism]\ncontext_parallel_degree = 4\n"
                                 "context_parallel_method = \"hybrid\"\n"
                                 "context_parallel_ulysses_degree = 3\n"),
              HasSubstr("parallelism.context_parallel_ulysses_degree = 3 must divide "
                        "parallelism.context_parallel_degree = 4"));
  EXPECT_THAT(ParseError(heads + "[parallelism]\ncontext_parallel_degree = 4\n"
                                 "context_parallel_method = \"ulysses\"\n"
                                 "context_parallel_ulysses_degree = 2\n"),
              HasSubstr("parallelism.context_parallel_ulysses_degree = 2 must equal "
                        "parallelism.context_parallel_degree = 4"));
  EXPECT_THAT(ParseError(heads + "[parallelism]\ncontext_parallel_degree = 4\n"
                                 "context_parallel_ulysses_degree = 2\n"),
              HasSubstr("parallelism.context_parallel_ulysses_degree = 2 needs "
                        "parallelism.context_parallel_method = \"ulysses\" or \"hybrid\""));
  // Heads the degree cannot split: n_heads by the degree; K/V heads neither split nor replicated.
  EXPECT_THAT(ParseError("[model]\nn_heads = 6\nn_kv_heads = 2\ndim = 96\n"
                         "[parallelism]\ncontext_parallel_degree = 4\n"
                         "context_parallel_method = \"ulysses\"\n"),
              HasSubstr("model.n_heads = 6 is not divisible by "
                        "parallelism.context_parallel_ulysses_degree = 4"));
  EXPECT_THAT(ParseError("[model]\nn_heads = 24\nn_kv_heads = 4\ndim = 192\n"
                         "[parallelism]\ncontext_parallel_degree = 6\n"
                         "context_parallel_method = \"ulysses\"\n"),
              HasSubstr("model.n_kv_heads = 4 and parallelism.context_parallel_ulysses_degree = "
                        "6: one must divide the other"));
}

TEST(JobConfigTest, UlyssesOnAMeshTheWorldCannotHoldNamesTheKeys) {
  absl::StatusOr<JobConfig> config = Parse(
      "[parallelism]\ncontext_parallel_degree = 4\ncontext_parallel_method = "
      "\"ulysses\"\ndata_parallel_replicate_degree = 1\n");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<MeshDegrees> mesh = ResolveMesh(*config, 2);
  ASSERT_FALSE(mesh.ok());
  EXPECT_THAT(std::string(mesh.status().message()),
              HasSubstr("context_parallel_degree (4) = 4 but the world size is 2"));
  mesh = ResolveMesh(*config, 4);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->ulysses, 4);
}

TEST(JobConfigTest, ActivationCheckpointIntervals) {
  JobConfig config;
  EXPECT_EQ(ActivationCheckpointEvery(config), 0);
  config.activation_checkpoint.mode = AcMode::kFull;
  EXPECT_EQ(ActivationCheckpointEvery(config), 1);
  config.activation_checkpoint.mode = AcMode::kSelective;
  EXPECT_EQ(ActivationCheckpointEvery(config), -1);
  config.activation_checkpoint.selective_ac_option = "2";
  EXPECT_EQ(ActivationCheckpointEvery(config), 2);
}

// ---- TOML round trip
// --------------------------------------------------------------------------------

void ExpectRoundTrip(const JobConfig& config) {
  const std::string text = JobConfigToToml(config);
  absl::StatusOr<JobConfig> reparsed = ParseJobConfig(text, {}, "roundtrip.toml");
  ASSERT_TRUE(reparsed.ok()) << reparsed.status() << "\n" << text;
  ExpectConfigEq(*reparsed, config);
  EXPECT_EQ(JobConfigToToml(*reparsed), text);
}

TEST(JobConfigToTomlTest, DefaultsRoundTrip) { ExpectRoundTrip(JobConfig{}); }

TEST(JobConfigToTomlTest, FullConfigRoundTrips) { ExpectRoundTrip(FullFileConfig()); }

TEST(JobConfigToTomlTest, AwkwardValuesRoundTripExactly) {
  JobConfig config = FullFileConfig();
  config.optimizer.lr = 0.1 + 0.2;  // not the double nearest 0.3
  config.optimizer.beta1 = 1.0 / 3.0;
  config.optimizer.eps = 4.9406564584124654e-324;  // the smallest subnormal
  config.model.rope_theta = 999999999999.99988;    // just below the bound, 1e12
  config.model.norm_eps = 1.0;                     // integral: must still print as a float
  config.model.ffn_dim_multiplier = 2.0 / 3.0;
  config.comm.timeout_seconds = 86399.123456789;
  config.training.seed = 9223372036854775807;
  config.training.dataset_path =
      "dir with \"quotes\"\\back\tslash\nnewline\x01 \xc3\xa9t\xc3\xa9.bin";
  config.metrics.jsonl = "";
  ExpectRoundTrip(config);
}

TEST(JobConfigToTomlTest, ListsEveryKeyWithItsValue) {
  const std::string text = JobConfigToToml(JobConfig{});
  for (const char* line :
       {"[job]\nmode = \"train\"\nmax_restarts = 0\n",
        "[model]\nhf_assets_path = \"\"\ndim = 256\n", "norm_eps = 1e-05\nrope_theta = 500000.0\n",
        "# ffn_dim_multiplier is not set\n", "[training]\nseq_len = 256\n", "dataset_path = \"\"\n",
        "[optimizer]\nname = \"AdamW\"\nlr = 0.0008\n",
        "[lr_scheduler]\nwarmup_steps = 0\ndecay_ratio = 0.0\n",
        "data_parallel_replicate_degree = -1\n", "[checkpoint]\nenable = false\n",
        "[metrics]\nlog_freq = 1\n", "[validation]\nenable = false\nfreq = 10\ndataset = \"\"\n",
        "[comm]\ntimeout_seconds = 60.0\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  JobConfig with_ffn;
  with_ffn.model.ffn_dim_multiplier = 1.5;
  EXPECT_THAT(JobConfigToToml(with_ffn), HasSubstr("ffn_dim_multiplier = 1.5\n"));
}

TEST(JobConfigToTomlTest, OneSectionAlone) {
  const std::string text = JobConfigToToml(JobConfig{}, "model");
  EXPECT_THAT(text, HasSubstr("[model]\nhf_assets_path = \"\"\ndim = 256\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("[training]")));
  const absl::StatusOr<JobConfig> back = ParseJobConfig(text, {}, "model.toml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model.dim, 256);
}

// A job that names a Hugging Face folder leaves the architecture checks to ResolveHfAssets: the
// placeholder max_seq_len does not refuse a long seq_len, and the keys the text set are recorded.
TEST(JobConfigTest, HfAssetsPathDefersArchitectureChecks) {
  const absl::StatusOr<JobConfig> c =
      ParseJobConfig("[model]\nhf_assets_path = \"models/llama\"\n[training]\nseq_len = 8192\n",
                     {"--model.n_layers=16"}, "job.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->hf_pending);
  EXPECT_EQ(c->given_keys,
            (std::set<std::string>{"model.hf_assets_path", "model.n_layers", "training.seq_len"}));
  // Without the folder, the same seq_len is refused against max_seq_len.
  EXPECT_FALSE(ParseJobConfig("[training]\nseq_len = 8192\n", {}, "job.toml").ok());
}

// ---- Files
// ------------------------------------------------------------------------------------------

TEST(LoadJobConfigTest, MissingFileIsNotFound) {
  const absl::StatusOr<JobConfig> config = LoadJobConfig("/nonexistent/ringtrain.toml", {});
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(config.status().message(),
            "cannot read config file '/nonexistent/ringtrain.toml': No such file or directory");
}

TEST(LoadJobConfigTest, DirectoryIsNotFound) {
  const absl::StatusOr<JobConfig> config = LoadJobConfig(::testing::TempDir(), {});
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("cannot read config file"));
}

TEST(LoadJobConfigTest, ReadsFileAppliesOverridesAndNamesPathInErrors) {
  const std::string path = ::testing::TempDir() + "/job_config_test.toml";
  {
    std::ofstream out(path);
    out << kFullFile;
  }
  absl::StatusOr<JobConfig> config = LoadJobConfig(path, {"--training.steps=300"});
  ASSERT_TRUE(config.ok()) << config.status();
  JobConfig expected = FullFileConfig();
  expected.training.steps = 300;
  ExpectConfigEq(*config, expected);

  const absl::StatusOr<JobConfig> bad = LoadJobConfig(path, {"--training.steps=0"});
  EXPECT_THAT(std::string(bad.status().message()),
              StartsWith(absl::StrCat("invalid config ", path, ":\n")));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ringtrain
