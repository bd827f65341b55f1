// Validation you can watch, and TensorBoard, on a real local cluster (coordinator, two agents, a
// cp 2 job): the validation loss every validation.freq steps in `ringctl watch --output json`,
// `get`, `top`, `plot` and `compare`; an eval job of the exported last-step weights gives the
// same loss, shown by `get` and `watch`; the trainer's event files and `ringctl tensorboard`'s
// export, read back by TensorBoard's own reader, hold the values of the stored records.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The debug model on cp 2, four short steps, validating every 2 steps on 2 batches of 2.
std::vector<std::string> Job(std::vector<std::string> extra) {
  std::vector<std::string> o = {"parallelism.context_parallel_degree=2",
                                "training.steps=4",
                                "training.seq_len=64",
                                "training.local_batch_size=2",
                                "lr_scheduler.warmup_steps=1",
                                "validation.steps=2",
                                "validation.local_batch_size=2",
                                "metrics.log_freq=1000"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

// TensorBoard's reading of a run folder: tag → [[step, value], ...].
nlohmann::json ReadTensorBoard(const std::string& run_dir) {
  const CommandResult read =
      RunCommand({PythonPath(), SourceDir() + "/tests/parity/tensorboard_reader.py", run_dir});
  EXPECT_EQ(read.exit_code, 0) << read.output;
  return nlohmann::json::parse(read.output, nullptr, false)["scalars"];
}

TEST(ValidationE2eTest, WatchGetTopPlotCompareAnEvalAndTensorBoard) {
  TempDir shared;  // one checkpoint root for both agents, as a cluster's shared storage
  LocalCluster cluster(2, {}, {"--checkpoint-root", shared / "ckpt"});
  const std::string config = ConfigPath("debug_model.toml");
  const v1::Job train = cluster.Submit(
      config, Job({"validation.enable=true", "validation.freq=2", "checkpoint.enable=true",
                   "checkpoint.interval=100", "checkpoint.last_save_in_hf=true",
                   "metrics.enable_tensorboard=true"}));
  ASSERT_TRUE(cluster.WaitForJob(train.job_id(), IsFinal, 180, "training")) << cluster.Logs();
  ASSERT_EQ(cluster.Get(train.job_id()).state(), v1::JOB_STATE_SUCCEEDED) << cluster.Logs();

  // watch --output json: every step, validation_loss on steps 2 and 4 (beside its record's).
  const CommandResult watch = cluster.Ringctl({"watch", train.job_id(), "--output", "json"});
  ASSERT_EQ(watch.exit_code, 0) << watch.output;
  std::map<int64_t, double> validation;
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(watch.output, '\n', absl::SkipEmpty()))) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_object() || event.value("event", "") != "step") continue;
    EXPECT_EQ(event.contains("validation_loss"), event["record"].contains("validation_loss"));
    if (event.contains("validation_loss")) {
      EXPECT_EQ(event["validation_loss"], event["record"]["validation_loss"]);
      validation[event["step"].get<int64_t>()] = event["validation_loss"].get<double>();
    }
  }
  ASSERT_EQ(validation.size(), 2u) << watch.output;
  ASSERT_EQ(validation.count(2), 1u);
  ASSERT_EQ(validation.count(4), 1u);
  // The table watch: a line per validation.
  const CommandResult watch_table = cluster.Ringctl({"watch", train.job_id()});
  EXPECT_THAT(watch_table.output, HasSubstr("validation loss"));
  EXPECT_THAT(watch_table.output, HasSubstr("at step 2"));

  // get: the newest validation.
  const CommandResult get = cluster.Ringctl({"get", train.job_id(), "--output", "json"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  const nlohmann::json job = nlohmann::json::parse(get.output, nullptr, false);
  EXPECT_EQ(job["validation"]["step"], 4) << get.output;
  EXPECT_EQ(job["validation"]["loss"].get<double>(), validation[4]);
  EXPECT_THAT(cluster.Ringctl({"get", train.job_id()}).output,
              HasSubstr("validation   validation loss"));
  // top, plot, compare.
  EXPECT_THAT(cluster.Ringctl({"top", train.job_id(), "--once"}).output, HasSubstr("at step 4"));
  const std::string svg = shared / "plot.svg";
  ASSERT_EQ(cluster.Ringctl({"plot", train.job_id(), "--out", svg}).exit_code, 0);
  const std::string drawn = ReadFile(svg);
  int points = 0;
  for (size_t at = drawn.find("class=\"validation-point\""); at != std::string::npos;
       at = drawn.find("class=\"validation-point\"", at + 1)) {
    ++points;
  }
  EXPECT_EQ(points, 2);
  const CommandResult compare =
      cluster.Ringctl({"compare", train.job_id(), train.job_id(), "--assert-equal"});
  EXPECT_EQ(compare.exit_code, 0) << compare.output;
  EXPECT_THAT(compare.output, HasSubstr("validation loss:"));

  // An eval job of the last step's exported weights on the same mesh: the same loss.
  fs::copy(shared / ("ckpt/" + train.job_id() + "/outputs/checkpoints/step-4/hf"),
           cluster.data_root() + "/step-4-hf", fs::copy_options::recursive);
  const v1::Job eval =
      cluster.Submit(config, Job({"job.mode=eval", "checkpoint.initial_load_path=step-4-hf",
                                  "checkpoint.initial_load_in_hf=true"}));
  ASSERT_TRUE(cluster.WaitForJob(eval.job_id(), IsFinal, 180, "eval")) << cluster.Logs();
  ASSERT_EQ(cluster.Get(eval.job_id()).state(), v1::JOB_STATE_SUCCEEDED) << cluster.Logs();
  const nlohmann::json eval_job = nlohmann::json::parse(
      cluster.Ringctl({"get", eval.job_id(), "--output", "json"}).output, nullptr, false);
  EXPECT_EQ(eval_job["validation"]["step"], 1);
  EXPECT_EQ(eval_job["validation"]["loss"].get<double>(), validation[4]);  // bitwise
  const CommandResult eval_watch = cluster.Ringctl({"watch", eval.job_id()});
  EXPECT_THAT(eval_watch.output, HasSubstr("validation loss"));

  // TensorBoard: the trainer's run folder (rank 0, <checkpoint-root>/<job>/tb) and the export.
  const CommandResult exported = cluster.Ringctl({"export", train.job_id()});
  ASSERT_EQ(exported.exit_code, 0);
  std::vector<nlohmann::json> records;
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(exported.output, '\n', absl::SkipEmpty()))) {
    records.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(records.size(), 4u);
  ASSERT_EQ(cluster.Ringctl({"tensorboard", train.job_id(), "--out", shared / "runs"}).exit_code,
            0);
  for (const std::string& run :
       {shared / ("ckpt/" + train.job_id() + "/tb"), shared / ("runs/" + train.job_id())}) {
    const nlohmann::json tb = ReadTensorBoard(run);
    for (const auto& [tag, key] :
         std::map<std::string, std::string>{{"loss_metrics/global_avg_loss", "loss"},
                                            {"grad_norm", "grad_norm"},
                                            {"lr", "lr"},
                                            {"throughput(tps)", "tokens_per_second"},
                                            {"mfu(%)", "mfu_percent"}}) {
      ASSERT_EQ(tb[tag].size(), 4u) << run << " " << tag;
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(tb[tag][i][0], records[i]["step"]);
        EXPECT_EQ(tb[tag][i][1].get<double>(), double(float(records[i][key].get<double>())))
            << run << " " << tag << " step " << i + 1;
      }
    }
    const nlohmann::json& v = tb["validation_metrics/loss"];
    ASSERT_EQ(v.size(), 2u) << run;
    EXPECT_EQ(v[1][0], 4);
    EXPECT_EQ(v[1][1].get<double>(), double(float(validation[4])));
  }
}

}  // namespace
}  // namespace ringtrain::testing
