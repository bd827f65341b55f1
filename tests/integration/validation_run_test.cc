// Validation during training and TensorBoard files, on two CP ranks under ringtrain-run: training
// with [validation] enable computes the same losses bitwise as without; its validation loss after
// the last step is bitwise an eval job's on the exported weights of that step; and the event files
// the trainer writes, read back by TensorBoard's own reader (tests/parity/tensorboard_reader.py),
// hold the values of the JSONL records, MFU among them; and MFU is the model FLOPs of the tokens
// over the world's peak.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

// debug_model.toml on cp 2, small: 4 steps, 2 validation batches of 2 windows.
std::vector<std::string> CpRun(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {ConfigPath("debug_model.toml"),
                                   "--parallelism.context_parallel_degree=2",
                                   "--lr_scheduler.warmup_steps=2",
                                   "--lr_scheduler.decay_ratio=0",
                                   "--training.steps=4",
                                   "--training.local_batch_size=2",
                                   "--validation.steps=2",
                                   "--validation.local_batch_size=2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return LauncherCommand(2, args);
}

TEST(ValidationRunTest, TrainingIsUnchangedAndTheLastValidationIsAnEvalOfItsWeights) {
  TempDir dir;
  // (and without MFU: it changes nothing either)
  const auto off =
      RunCommand(CpRun({"--metrics.jsonl=" + (dir / "off.jsonl"), "--metrics.peak_flops=-1"}));
  ASSERT_EQ(off.exit_code, 0) << off.output;
  const auto on = RunCommand(CpRun(
      {"--metrics.jsonl=" + (dir / "on.jsonl"), "--validation.enable=true", "--validation.freq=3",
       "--checkpoint.enable=true", "--checkpoint.folder=" + (dir / "ckpt"),
       "--checkpoint.interval=100", "--checkpoint.last_save_in_hf=true"}));
  ASSERT_EQ(on.exit_code, 0) << on.output;
  const auto a = ReadJsonl(dir / "off.jsonl"), b = ReadJsonl(dir / "on.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("loss"), b[i].at("loss")) << "step " << i + 1;
    EXPECT_EQ(a[i].at("grad_norm"), b[i].at("grad_norm")) << "step " << i + 1;
    EXPECT_EQ(a[i].count("validation_loss"), 0u);
    EXPECT_EQ(a[i].count("mfu_percent"), 0u);  // metrics.peak_flops = -1
    // Every freq = 3 steps and after the last.
    EXPECT_EQ(b[i].count("validation_loss"), i + 1 == 3 || i + 1 == 4 ? 1u : 0u) << i + 1;
  }
  // An eval job of the step-4 weights (exported exactly, float32) on the same mesh.
  const auto eval = RunCommand(CpRun({"--job.mode=eval", "--metrics.jsonl=" + (dir / "eval.jsonl"),
                                      "--checkpoint.initial_load_path=" + (dir / "ckpt/step-4/hf"),
                                      "--checkpoint.initial_load_in_hf=true"}));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  const auto e = ReadJsonl(dir / "eval.jsonl");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].at("step"), "1");  // an eval job's one record
  EXPECT_EQ(e[0].at("validation_loss"), b[3].at("validation_loss"));
  EXPECT_EQ(e[0].at("loss"), e[0].at("validation_loss"));
  EXPECT_NE(b[2].at("validation_loss"), b[3].at("validation_loss"));  // the weights moved
}

TEST(ValidationRunTest, TensorBoardReadsBackTheJsonlValues) {
  TempDir dir;
  const auto run = RunCommand(CpRun(
      {"--metrics.jsonl=" + (dir / "run.jsonl"), "--validation.enable=true", "--validation.freq=2",
       "--metrics.enable_tensorboard=true", "--metrics.save_tb_folder=" + (dir / "tb")}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto read =
      RunCommand({PythonPath(), SourceDir() + "/tests/parity/tensorboard_reader.py", dir / "tb"});
  ASSERT_EQ(read.exit_code, 0) << read.output;
  const nlohmann::json tb = nlohmann::json::parse(read.output);
  EXPECT_EQ(tb["file_version"], nlohmann::json::array({"brain.Event:2"}));  // rank 0 only
  const auto records = ReadJsonl(dir / "run.jsonl");
  ASSERT_EQ(records.size(), 4u);
  // Against the GEMM rate the trainer measured at start: positive (not bounded by 100 here, as a
  // machine loaded at start and idle later makes the measured peak low).
  for (const auto& record : records) {
    ASSERT_EQ(record.count("mfu_percent"), 1u);
    EXPECT_GT(std::stod(record.at("mfu_percent")), 0);
  }
  const std::map<std::string, std::string> tags = {{"loss_metrics/global_avg_loss", "loss"},
                                                   {"grad_norm", "grad_norm"},
                                                   {"lr", "lr"},
                                                   {"throughput(tps)", "tokens_per_second"},
                                                   {"time_metrics/end_to_end(s)", "step_seconds"},
                                                   {"mfu(%)", "mfu_percent"}};
  for (const auto& [tag, key] : tags) {
    const nlohmann::json& points = tb["scalars"][tag];
    ASSERT_EQ(points.size(), records.size()) << tag;
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(points[i][0].get<int64_t>(), int64_t(i + 1)) << tag;
      // simple_value is a float: the record's double rounded to float, exactly.
      EXPECT_EQ(points[i][1].get<double>(), double(float(std::stod(records[i].at(key)))))
          << tag << " step " << i + 1;
    }
  }
  const nlohmann::json& validation = tb["scalars"]["validation_metrics/loss"];
  ASSERT_EQ(validation.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& record = records[2 * i + 1];  // steps 2 and 4
    EXPECT_EQ(validation[i][0].get<int64_t>(), int64_t(2 * i + 2));
    EXPECT_EQ(validation[i][1].get<double>(),
              double(float(std::stod(record.at("validation_loss")))));
  }
}

// MFU with a given peak: torchtitan's FLOPs per token of the debug model at seq_len 256 (6,691,584,
// tests/unit/model_flops_test.cc) times the record's global tokens/s, over 2 ranks' peaks. On
// cp 2 each rank holds half of every sequence, and its tokens count at the whole sequence's length.
TEST(ValidationRunTest, MfuIsTheModelFlopsOfTheTokensOverTheWorldsPeak) {
  TempDir dir;
  const auto run =
      RunCommand(CpRun({"--metrics.jsonl=" + (dir / "run.jsonl"), "--metrics.peak_flops=2e9"}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("MFU: 6.692e+06 FLOPs/token, peak 2e+09 FLOP/s a rank "
                            "(metrics.peak_flops) x 2 ranks"),
            std::string::npos)
      << run.output;
  const auto records = ReadJsonl(dir / "run.jsonl");
  ASSERT_EQ(records.size(), 4u);
  for (const auto& record : records) {
    ASSERT_EQ(record.count("mfu_percent"), 1u);
    const double tokens_per_second = std::stod(record.at("tokens_per_second"));
    EXPECT_DOUBLE_EQ(std::stod(record.at("mfu_percent")),
                     100 * 6'691'584.0 * tokens_per_second / (2 * 2e9));
  }
}

}  // namespace
}  // namespace ringtrain::testing
