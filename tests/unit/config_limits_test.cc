// The bounds on a job config checked before parsing (config_limits.h): each limit, its message (the
// limit and the actual figure), the capped problem list, the narrowing and overflow checks of the
// validator, and the inputs that crashed toml++ (tests/unit/fixtures/config_bounds/), each of which
// must now be an INVALID_ARGUMENT from ParseJobConfig.
#include "common/config/config_limits.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/config/mesh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Repeat(const std::string& part, int n, const std::string& separator = "") {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i == 0 ? "" : separator, part);
  return out;
}

std::string BoundsError(const std::string& text, const std::vector<std::string>& overrides = {}) {
  const absl::Status s = CheckConfigBounds(text, overrides, "t.toml");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

std::string ParseError(const std::string& text, const std::vector<std::string>& overrides = {}) {
  const absl::StatusOr<JobConfig> c = ParseJobConfig(text, overrides, "t.toml");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  return std::string(c.status().message());
}

TEST(ConfigLimitsTest, RealConfigsPass) {
  for (const char* name : {"debug_model.toml", "llama3_8b.toml"}) {
    const std::string path = testing::ConfigPath(name);
    const std::string text = testing::ReadFile(path);
    ASSERT_FALSE(text.empty()) << path;
    EXPECT_TRUE(CheckConfigBounds(text, {}, path).ok()) << name;
    EXPECT_TRUE(ParseJobConfig(text, {}, path).ok()) << name;
  }
  // Strings and comments may hold any brackets and '=' without counting.
  const std::string tricky = "# [[[[[[[[[[[[[[[[[[[[ = = =\n[training]\ndataset_path = \"" +
                             Repeat("[{=", 500) + "\"\n[checkpoint]\nfolder = '''" +
                             Repeat("{[=\n", 300) + "'''\n[metrics]\njsonl = \"\\\"[[[[\"\n";
  EXPECT_TRUE(CheckConfigBounds(tricky, {}, "t.toml").ok())
      << CheckConfigBounds(tricky, {}, "t.toml");
}

TEST(ConfigLimitsTest, TextSize) {
  const std::string text = "[training]\n" + std::string(kMaxConfigBytes, '#');
  EXPECT_THAT(BoundsError(text), HasSubstr(absl::StrCat("the config is ", text.size(),
                                                        " bytes; at most 262144 bytes (256 KiB)")));
}

TEST(ConfigLimitsTest, Depth) {
  const std::string deep = "x = " + Repeat("[", 17) + Repeat("]", 17) + "\n";
  EXPECT_THAT(
      BoundsError(deep),
      HasSubstr("brackets nest 17 levels deep (first past the limit at line 1); at most 16"));
  const std::string ok = "x = " + Repeat("[", 16) + Repeat("]", 16) + "\n";
  EXPECT_TRUE(CheckConfigBounds(ok, {}, "t").ok());
  const std::string inline_tables =
      "[job]\nx = " + Repeat("{a = ", 20) + "1" + Repeat("}", 20) + "\n";
  EXPECT_THAT(BoundsError(inline_tables),
              HasSubstr("brackets nest 20 levels deep (first past the limit at line 2)"));
  // Through the parser too: never a crash, the limit named.
  EXPECT_THAT(ParseError(deep), HasSubstr("at most 16 levels are allowed"));
}

TEST(ConfigLimitsTest, KeyCount) {
  std::string text = "[model]\n";
  for (int i = 0; i < 1100; ++i) absl::StrAppend(&text, "k", i, " = 1\n");
  EXPECT_THAT(BoundsError(text),
              HasSubstr("the config has 1101 keys and table headers; at most 1024"));
  std::string headers;
  for (int i = 0; i < 1025; ++i) absl::StrAppend(&headers, "[t", i, "]\n");
  EXPECT_THAT(BoundsError(headers), HasSubstr("the config has 1025 keys"));
}

TEST(ConfigLimitsTest, KeyPathLength) {
  const std::string key = Repeat("a", 129, ".");  // 257 bytes
  EXPECT_THAT(BoundsError("[job]\n" + key + " = 1\n"),
              HasSubstr("a key path at line 2 is 257 bytes long; at most 256"));
  EXPECT_THAT(BoundsError("[" + key + "]\n"), HasSubstr("is 257 bytes long"));
  EXPECT_THAT(BoundsError("[[" + key + "]]\n"), HasSubstr("bytes long; at most 256"));
  EXPECT_THAT(BoundsError("x = {y = 1, " + key + " = 2}\n"), HasSubstr("is 257 bytes long"));
  EXPECT_TRUE(CheckConfigBounds("[job]\n" + Repeat("a", 128, ".") + " = 1\n", {}, "t").ok());
}

TEST(ConfigLimitsTest, Overrides) {
  const std::vector<std::string> many(257, "training.steps=1");
  EXPECT_THAT(BoundsError("", many), HasSubstr("257 overrides; at most 256"));
  const std::vector<std::string> long_one = {"training.dataset_path=" + std::string(5000, 'x')};
  EXPECT_THAT(
      BoundsError("", long_one),
      HasSubstr(
          "override 1 (training.dataset_path=xxxxxxxxxxxxxxxxxx...) is 5022 bytes; at most 4096"));
}

// Each committed input crashed toml++ 3.3 (SIGSEGV, stack exhausted by one nested table per
// dotted-key component) before the pre-scan existed.
TEST(ConfigLimitsTest, CrashInputsAreRefused) {
  for (const char* name : {"dotted_key.toml", "table_header.toml", "array_of_tables.toml",
                           "inline_table_dotted_key.toml"}) {
    const std::string text =
        testing::ReadFile(testing::SourceDir() + "/tests/unit/fixtures/config_bounds/" + name);
    ASSERT_GT(text.size(), 100000u) << name;
    EXPECT_THAT(ParseError(text), HasSubstr("bytes long; at most 256 bytes are allowed")) << name;
  }
}

TEST(ConfigLimitsTest, ProblemListIsCapped) {
  std::vector<std::string> overrides;
  for (int i = 0; i < 200; ++i) overrides.push_back(absl::StrCat("model.unknown_key_", i, "=1"));
  const std::string message = ParseError("", overrides);
  EXPECT_THAT(message, HasSubstr("unknown_key_19"));
  EXPECT_THAT(message, Not(HasSubstr("unknown_key_20 ")));
  EXPECT_THAT(message, HasSubstr("\n  ... and 180 more problems"));
  EXPECT_LT(message.size(), 20000u);
  // 1000 unknown keys in the file (within the key limit): still 20 listed.
  std::string text = "[model]\n";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&text, "unknown_", i, " = 1\n");
  const std::string file_message = ParseError(text);
  EXPECT_THAT(file_message, HasSubstr("... and 980 more problems"));
  EXPECT_LT(file_message.size(), 20000u);
}

TEST(ConfigLimitsTest, DegreesThatWouldNarrowAreRefused) {
  // 2^32 + 1 used to become 1 in the coordinator's 32-bit world size.
  EXPECT_THAT(
      ParseError("", {"parallelism.data_parallel_replicate_degree=4294967297"}),
      HasSubstr(
          "parallelism.data_parallel_replicate_degree = 4294967297: must be -1 (fill the world) or "
          "in [1, 16384]"));
  EXPECT_THAT(ParseError("", {"parallelism.context_parallel_degree=4294967296",
                              "training.seq_len=4294967296"}),
              HasSubstr("parallelism.context_parallel_degree = 4294967296: must be in [1, 16384]"));
  EXPECT_THAT(ParseError("", {"parallelism.data_parallel_replicate_degree=256",
                              "parallelism.context_parallel_degree=128"}),
              HasSubstr("× context_parallel_degree (128) = 32768 ranks; at most 16384"));
  EXPECT_THAT(ParseError("[parallelism]\ndata_parallel_replicate_degree = 9223372036854775807\n"),
              HasSubstr("must be -1 (fill the world) or in [1, 16384]"));
  absl::StatusOr<JobConfig> c = ParseJobConfig("", {}, "t");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(std::string(ResolveMesh(*c, int64_t{1} << 32).status().message()),
              HasSubstr("at most 16384 ranks"));
}

TEST(ConfigLimitsTest, TokenCountsThatOverflowAreRefused) {
  // steps × dp × batch × seq_len sizes the trainer's dataset in int64.
  EXPECT_THAT(
      ParseError("", {"training.steps=4611686018427387904", "lr_scheduler.warmup_steps=0"}),
      HasSubstr("training.steps (4611686018427387904) × training.local_batch_size (8) × the "
                "data-parallel degree (up to 16384) × training.seq_len (256) is more than 2^62"));
  EXPECT_THAT(ParseError("", {"training.steps=4611686018427387904", "lr_scheduler.warmup_steps=0",
                              "training.global_batch_size=16"}),
              HasSubstr("training.steps (4611686018427387904) × training.global_batch_size (16) × "
                        "training.seq_len (256) is more than 2^62"));
  EXPECT_THAT(ParseError("", {"validation.local_batch_size=9223372036854775807"}),
              HasSubstr("validation.steps (10) × validation.local_batch_size"));
  EXPECT_TRUE(
      ParseJobConfig(
          "", {"training.steps=1000000000", "parallelism.data_parallel_replicate_degree=4"}, "t")
          .ok());
}

}  // namespace
}  // namespace ringtrain
