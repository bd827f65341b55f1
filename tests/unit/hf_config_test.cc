// config.json ⇄ the [model] section: both spellings of RoPE scaling, the refusals, the export's
// config.json read back, and ResolveHfAssets against the keys a job file set.
#include "common/config/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

// Llama 3.2 1B's config.json as the Hub has it (transformers 4.x spelling).
constexpr char kLlama32_1B[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

// The same model as transformers 5.x writes it.
constexpr char kLlama32_1B_v5[] = R"({
  "architectures": ["LlamaForCausalLM"], "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_parameters": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3",
                      "rope_theta": 500000.0},
  "tie_word_embeddings": true, "dtype": "bfloat16", "vocab_size": 128256})";

TEST(HfConfigTest, ReadsLlama32InBothSpellings) {
  for (const char* text : {kLlama32_1B, kLlama32_1B_v5}) {
    const absl::StatusOr<ModelSection> m = ParseHfConfig(text, "config.json");
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->dim, 2048);
    EXPECT_EQ(m->n_layers, 16);
    EXPECT_EQ(m->n_heads, 32);
    EXPECT_EQ(m->n_kv_heads, 8);
    EXPECT_EQ(m->head_dim, 64);
    EXPECT_EQ(m->intermediate_size, 8192);
    EXPECT_EQ(m->vocab_size, 128256);
    EXPECT_EQ(m->max_seq_len, 131072);
    EXPECT_EQ(m->norm_eps, 1e-5);
    EXPECT_EQ(m->rope_theta, 500000.0);
    EXPECT_EQ(m->rope_type, RopeType::kLlama3);
    EXPECT_EQ(m->rope_factor, 32.0);
    EXPECT_EQ(m->rope_low_freq_factor, 1.0);
    EXPECT_EQ(m->rope_high_freq_factor, 4.0);
    EXPECT_EQ(m->rope_original_max_position_embeddings, 8192);
    EXPECT_TRUE(m->tie_word_embeddings);
  }
}

TEST(HfConfigTest, DefaultsOfOlderFiles) {
  // Llama 2 style: no head_dim, no num_key_value_heads, no rope_theta, rope_scaling null.
  const absl::StatusOr<ModelSection> m = ParseHfConfig(
      R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 172, "vocab_size": 300,
          "rope_scaling": null})",
      "config.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->head_dim, 16);
  EXPECT_EQ(m->n_kv_heads, 4);
  EXPECT_EQ(m->rope_theta, 10000.0);
  EXPECT_EQ(m->rope_type, RopeType::kDefault);
  EXPECT_FALSE(m->tie_word_embeddings);
}

TEST(HfConfigTest, RefusesWhatItCannotHonourNamingTheField) {
  const std::string base =
      R"("hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 172, "vocab_size": 300)";
  const std::pair<std::string, std::string> cases[] = {
      {R"("hidden_act": "gelu")", "hidden_act = \"gelu\""},
      {R"("attention_bias": true)", "attention_bias = true"},
      {R"("mlp_bias": true)", "mlp_bias = true"},
      {R"("model_type": "mistral")", "model_type = \"mistral\""},
      {R"("architectures": ["MistralForCausalLM"])", "architectures"},
      {R"("attention_dropout": 0.1)", "attention_dropout = 0.1"},
      {R"("quantization_config": {"bits": 4})", "quantization_config"},
      {R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})",
       "rope_scaling.rope_type = \"yarn\""},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})",
       "rope_scaling.low_freq_factor is missing"},
      {R"("num_key_value_heads": 2.5)", "num_key_value_heads = 2.5"},
  };
  for (const auto& [field, message] : cases) {
    const absl::StatusOr<ModelSection> m =
        ParseHfConfig(absl::StrCat("{", base, ", ", field, "}"), "dir/config.json");
    ASSERT_FALSE(m.ok()) << field;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(message)) << field;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("dir/config.json")) << field;
  }
  EXPECT_FALSE(ParseHfConfig("[1, 2]", "config.json").ok());
  EXPECT_THAT(std::string(ParseHfConfig("{", "c.json").status().message()),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(std::string(ParseHfConfig("{}", "c.json").status().message()),
              HasSubstr("hidden_size is missing"));
}

TEST(HfConfigTest, TheExportsConfigReadsBack) {
  const ModelSection m = *ParseHfConfig(kLlama32_1B, "config.json");
  for (MixedPrecision dtype : {MixedPrecision::kFloat32, MixedPrecision::kBFloat16}) {
    const absl::StatusOr<ModelSection> back = ParseHfConfig(HfConfigJson(m, dtype), "export");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(HfConfigJson(*back, dtype), HfConfigJson(m, dtype));
  }
  EXPECT_THAT(HfConfigJson(m, MixedPrecision::kBFloat16),
              HasSubstr("\"torch_dtype\": \"bfloat16\""));
}

class ResolveHfAssetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("hf_config_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << kLlama32_1B;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<JobConfig> Resolve(const std::string& model_keys,
                                    const std::vector<std::string>& overrides = {}) {
    absl::StatusOr<JobConfig> config = ParseJobConfig(
        absl::StrCat("[model]\nhf_assets_path = \"", dir_.string(), "\"\n", model_keys), overrides,
        "job.toml");
    if (!config.ok()) return config.status();
    if (absl::Status s = ResolveHfAssets(&*config); !s.ok()) return s;
    return config;
  }

  std::filesystem::path dir_;
};

TEST_F(ResolveHfAssetsTest, TheFolderGivesTheArchitecture) {
  const absl::StatusOr<JobConfig> c = Resolve("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.dim, 2048);
  EXPECT_EQ(c->model.vocab_size, 128256);
  EXPECT_EQ(c->model.rope_type, RopeType::kLlama3);
  EXPECT_TRUE(c->model.tie_word_embeddings);
  EXPECT_EQ(c->model.hf_assets_path, dir_.string());
  EXPECT_TRUE(c->training.tokenizer_path.empty());  // no tokenizer.json here
  std::ofstream(dir_ / "tokenizer.json") << "{}";
  EXPECT_EQ(Resolve("")->training.tokenizer_path, (dir_ / "tokenizer.json").string());
}

TEST_F(ResolveHfAssetsTest, AKeyThatAgreesIsFineOneThatContradictsIsRefusedNamingBoth) {
  EXPECT_TRUE(Resolve("dim = 2048\nn_kv_heads = 8\n").ok());
  const absl::StatusOr<JobConfig> c = Resolve("dim = 1024\n", {"--model.rope_factor=8"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(c.status().message());
  EXPECT_THAT(message, HasSubstr("model.dim = 1024 contradicts hidden_size = 2048"));
  EXPECT_THAT(message, HasSubstr("model.rope_factor = 8.0 contradicts factor = 32.0"));
  EXPECT_THAT(message, HasSubstr("config.json"));
}

TEST_F(ResolveHfAssetsTest, MaxSeqLenMayBeSetAndTheResultIsValidated) {
  EXPECT_EQ(Resolve("max_seq_len = 262144\n")->model.max_seq_len, 262144);
  // seq_len beyond max_position_embeddings without max_seq_len: the usual validation says so.
  const absl::StatusOr<JobConfig> c = Resolve("", {"--training.seq_len=262144"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("model.max_seq_len = 131072 must be >= training.seq_len = 262144"));
}

TEST_F(ResolveHfAssetsTest, AMissingFolderIsAConfigError) {
  absl::StatusOr<JobConfig> config =
      ParseJobConfig("[model]\nhf_assets_path = \"/nonexistent/llama\"\n", {}, "job.toml");
  ASSERT_TRUE(config.ok()) << config.status();
  const absl::Status s = ResolveHfAssets(&*config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent/llama/config.json"));
}

}  // namespace
}  // namespace ringtrain
