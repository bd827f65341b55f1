// Jobs that build on jobs, the pure parts (coordinator/load_source.h): JOB[@STEP], the listing of
// a job's checkpoints (keep_latest_k, paths), the choice of a checkpoint and its refusals, and the
// compatibility of a config with the checkpoint it would load.
#include "coordinator/load_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

JobConfig Config(const std::vector<std::string>& overrides) {
  absl::StatusOr<JobConfig> config = ParseJobConfig("", overrides, "test");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

JobConfig Saving() { return Config({"checkpoint.enable=true", "checkpoint.interval=4"}); }

TEST(CheckpointRefTest, ReadsJobAndStep) {
  absl::StatusOr<CheckpointRef> plain = ParseCheckpointRef("job-000001", LoadKind::kInit);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->job_id, "job-000001");
  EXPECT_FALSE(plain->step.has_value());
  absl::StatusOr<CheckpointRef> at = ParseCheckpointRef("job-000001@200", LoadKind::kResume);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->job_id, "job-000001");
  EXPECT_EQ(at->step, 200);
}

TEST(CheckpointRefTest, RefusesWhatIsNotJobAtStep) {
  for (const char* text : {"", "@5", "job-1@", "job-1@0", "job-1@-3", "job-1@+3", "job-1@2x",
                           "job-1@9999999999999999999999", "job/1", "job 1@2", "job-1@2@3"}) {
    absl::StatusOr<CheckpointRef> ref = ParseCheckpointRef(text, LoadKind::kResume);
    ASSERT_FALSE(ref.ok()) << text;
    EXPECT_EQ(ref.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(ref.status().message(), HasSubstr("--resume-from")) << text;
    EXPECT_THAT(ref.status().message(), HasSubstr("JOB@STEP")) << text;
  }
  EXPECT_FALSE(ParseCheckpointRef(std::string(200, 'j'), LoadKind::kInit).ok());
}

TEST(ListCheckpointsTest, KeepsTheNewestKCompleteAndEverySaveInFlight) {
  const std::vector<SavedCheckpoint> saved = {
      {4, true, "/ckpt"}, {8, true, "/ckpt"}, {12, true, "/ckpt"}, {16, false, "/ckpt"}};
  const std::vector<ListedCheckpoint> all = ListCheckpoints(saved, "job-000003", "checkpoints", 0);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].step, 4);
  EXPECT_EQ(all[0].path, "/ckpt/job-000003/checkpoints/step-4");
  EXPECT_TRUE(all[2].complete);
  EXPECT_FALSE(all[3].complete);
  EXPECT_EQ(all[3].path, "");  // no folder until it commits

  const std::vector<ListedCheckpoint> kept = ListCheckpoints(saved, "job-000003", "ck", 2);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].step, 8);
  EXPECT_EQ(kept[1].step, 12);
  EXPECT_EQ(kept[2].step, 16);
}

TEST(ListCheckpointsTest, PathsForAnAbsoluteFolderAndAnUnknownRoot) {
  EXPECT_EQ(ListCheckpoints({{4, true, ""}}, "job-1", "ck", 0)[0].path,
            "<checkpoint-root>/job-1/ck/step-4");
  EXPECT_EQ(ListCheckpoints({{4, true, "/r"}}, "job-1", "/r/job-1/ck", 0)[0].path,
            "/r/job-1/ck/step-4");
}

std::vector<ListedCheckpoint> Listed() {
  return {{4, true, "/r/j/ck/step-4"}, {8, true, "/r/j/ck/step-8"}, {12, false, ""}};
}

TEST(ChooseCheckpointTest, TheStepAskedForOrTheNewestComplete) {
  absl::StatusOr<ListedCheckpoint> newest =
      ChooseCheckpoint({"job-1", std::nullopt}, LoadKind::kInit, Listed(), Saving());
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->step, 8);
  absl::StatusOr<ListedCheckpoint> four =
      ChooseCheckpoint({"job-1", 4}, LoadKind::kResume, Listed(), Saving());
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->path, "/r/j/ck/step-4");
}

TEST(ChooseCheckpointTest, RefusesAMissingStepNamingTheCompleteOnes) {
  absl::StatusOr<ListedCheckpoint> chosen =
      ChooseCheckpoint({"job-1", 5}, LoadKind::kInit, Listed(), Saving());
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(chosen.status().message(), HasSubstr("job-1 has no checkpoint of step 5"));
  EXPECT_THAT(chosen.status().message(), HasSubstr("complete steps: 4, 8"));
}

TEST(ChooseCheckpointTest, RefusesAnIncompleteStep) {
  absl::StatusOr<ListedCheckpoint> chosen =
      ChooseCheckpoint({"job-1", 12}, LoadKind::kResume, Listed(), Saving());
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(chosen.status().message(), HasSubstr("step 12 is not complete"));
  absl::StatusOr<ListedCheckpoint> none =
      ChooseCheckpoint({"job-1", std::nullopt}, LoadKind::kInit, {{12, false, ""}}, Saving());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("no complete checkpoint yet"));
}

TEST(ChooseCheckpointTest, RefusesAJobThatSavesNone) {
  absl::StatusOr<ListedCheckpoint> chosen =
      ChooseCheckpoint({"job-1", std::nullopt}, LoadKind::kInit, {}, Config({}));
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(chosen.status().message(), HasSubstr("checkpoint.enable = false"));
}

TEST(CheckLoadCompatibleTest, TheSameModelLoadsOnAnyMesh) {
  const JobConfig source = Saving();
  const JobConfig target = Config({"parallelism.context_parallel_degree=2", "training.steps=20"});
  EXPECT_TRUE(CheckLoadCompatible(source, "job-1", 8, target, LoadKind::kInit).ok());
  EXPECT_TRUE(CheckLoadCompatible(source, "job-1", 8, target, LoadKind::kResume).ok());
}

TEST(CheckLoadCompatibleTest, NamesEveryShapeKeyThatDiffers) {
  const JobConfig target = Config({"model.dim=128", "model.n_layers=2"});
  const absl::Status status = CheckLoadCompatible(Saving(), "job-1", 8, target, LoadKind::kInit);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.dim = 128 here, 256 in job-1"));
  EXPECT_THAT(status.message(), HasSubstr("model.n_layers = 2 here, 4 in job-1"));
  // The FFN size follows dim (torchtitan's rule), so it differs too, as resolved.
  EXPECT_THAT(status.message(), HasSubstr("model.intermediate_size"));
  // The same shape reached another way is the same shape.
  const JobConfig same = Config({"model.head_dim=32"});  // = 256 / 8
  EXPECT_TRUE(CheckLoadCompatible(Saving(), "job-1", 8, same, LoadKind::kInit).ok());
}

TEST(CheckLoadCompatibleTest, AResumeNeedsStepsLeftAndATrainingJob) {
  const absl::Status done =
      CheckLoadCompatible(Saving(), "job-1", 8, Config({"training.steps=8"}), LoadKind::kResume);
  EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(done.message(), HasSubstr("set training.steps above 8"));
  // --init-from starts again from step 1: any number of steps will do.
  EXPECT_TRUE(
      CheckLoadCompatible(Saving(), "job-1", 8, Config({"training.steps=8"}), LoadKind::kInit)
          .ok());
  const absl::Status eval =
      CheckLoadCompatible(Saving(), "job-1", 8, Config({"job.mode=eval"}), LoadKind::kResume);
  EXPECT_EQ(eval.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(eval.message(), HasSubstr("use --init-from"));
}

TEST(FirstStepTest, AfterTheResumedStepOnly) {
  JobRecord job;
  EXPECT_EQ(FirstStep(job), 1);
  job.load_from = CheckpointLoad{"job-1", "ck", 8, /*model_only=*/true};
  EXPECT_EQ(FirstStep(job), 1);
  job.load_from->model_only = false;
  EXPECT_EQ(FirstStep(job), 9);
}

}  // namespace
}  // namespace ringtrain
