// Jobs that build on jobs, against a real local cluster whose two agents share one
// --checkpoint-root: a job's checkpoints in `ringctl checkpoints` (table and json) and `get`;
// --resume-from continuing another job's training with losses bitwise those of the uninterrupted
// job; --init-from starting from its weights (a learning rate far below float32's resolution
// keeps them as loaded, so its step 5 computes what the source's step 5 computed, bitwise); and
// the refusals of a job, a step and a model shape that do not exist or fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// cp = 2 over both workers, 8 short steps, a checkpoint every 4, plus `extra`.
std::vector<std::string> Job(std::vector<std::string> extra) {
  std::vector<std::string> o = {"parallelism.data_parallel_replicate_degree=1",
                                "parallelism.context_parallel_degree=2",
                                "training.steps=8",
                                "training.seq_len=32",
                                "training.local_batch_size=2",
                                "lr_scheduler.warmup_steps=2",
                                "metrics.log_freq=1000",
                                "checkpoint.enable=true",
                                "checkpoint.interval=4"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

class LineageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new TempDir();
    cluster_ = new LocalCluster(2, {}, {"--checkpoint-root", *shared_ / "ckpt"});
    source_ = Run(Submit(Job({}), "", ""));
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete shared_;
    shared_ = nullptr;
  }

  // SubmitJob of the debug config with `overrides`, init_from and resume_from; the call's status
  // and the job.
  static grpc::Status Try(const std::vector<std::string>& overrides, const std::string& init_from,
                          const std::string& resume_from, v1::Job* job) {
    v1::SubmitJobRequest request;
    request.set_config_toml(ReadFile(ConfigPath("debug_model.toml")));
    for (const std::string& o : overrides) request.add_overrides(o);
    request.set_init_from(init_from);
    request.set_resume_from(resume_from);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return cluster_->stub().SubmitJob(&context, request, job);
  }
  static std::string Submit(const std::vector<std::string>& overrides, const std::string& init,
                            const std::string& resume) {
    v1::Job job;
    const grpc::Status status = Try(overrides, init, resume, &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return job.job_id();
  }
  // Waits for the job to end; fails the test unless it SUCCEEDED.
  static std::string Run(const std::string& job_id) {
    EXPECT_TRUE(cluster_->WaitForJob(job_id, IsFinal, 180, job_id + "'s end")) << cluster_->Logs();
    EXPECT_EQ(cluster_->Get(job_id).state(), v1::JOB_STATE_SUCCEEDED) << cluster_->Logs();
    return job_id;
  }
  // The job's stored losses by step, as the trainer wrote them (raw JSON text: compared bitwise).
  static std::map<int64_t, std::string> Losses(const std::string& job_id) {
    std::map<int64_t, std::string> losses;
    for (const v1::JobEvent& e : cluster_->Watch(job_id, 0, 30)) {
      if (e.has_step()) losses[e.step().step()] = RawField(e.step().record_json(), "loss");
    }
    return losses;
  }

  static TempDir* shared_;
  static LocalCluster* cluster_;
  static std::string source_;
};

TempDir* LineageTest::shared_ = nullptr;
LocalCluster* LineageTest::cluster_ = nullptr;
std::string LineageTest::source_;

TEST_F(LineageTest, CheckpointsAreListedByGetAndCheckpoints) {
  const CommandResult json = cluster_->Ringctl({"checkpoints", source_, "--output", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json listed = nlohmann::json::parse(json.output);
  ASSERT_EQ(listed.size(), 2u) << json.output;
  const std::string root = fs::canonical(*shared_ / "ckpt").string();
  for (size_t i = 0; i < 2; ++i) {
    const std::string step = std::to_string(4 * (i + 1));
    EXPECT_EQ(listed[i]["step"], step) << json.output;  // int64 is a JSON string in proto3
    EXPECT_EQ(listed[i]["complete"], true) << json.output;
    const std::string path = listed[i]["path"];
    EXPECT_EQ(path, root + "/" + source_ + "/outputs/checkpoints/step-" + step);
    EXPECT_TRUE(fs::exists(path + "/COMPLETE")) << path;
  }
  const CommandResult table = cluster_->Ringctl({"checkpoints", source_});
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_THAT(table.output, HasSubstr("STEP"));
  EXPECT_THAT(table.output,
              HasSubstr("complete  " + root + "/" + source_ + "/outputs/checkpoints/step-8"));
  const CommandResult get = cluster_->Ringctl({"get", source_});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  EXPECT_THAT(get.output, HasSubstr("checkpoints  step 4  complete  " + root));
  EXPECT_THAT(get.output, HasSubstr("step 8  complete  " + root));
  // A job that saves none says so.
  const std::string bare =
      Run(Submit(Job({"checkpoint.enable=false", "training.steps=2"}), "", ""));
  const CommandResult none = cluster_->Ringctl({"checkpoints", bare});
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_THAT(none.output, HasSubstr(bare + " has no checkpoints"));
}

TEST_F(LineageTest, ResumeFromContinuesBitwise) {
  const std::string resumed = Run(Submit(Job({}), "", source_ + "@4"));
  const v1::Job job = cluster_->Get(resumed);
  EXPECT_EQ(job.load_from().job_id(), source_);
  EXPECT_EQ(job.load_from().step(), 4);
  EXPECT_FALSE(job.load_from().model_only());
  const std::map<int64_t, std::string> uninterrupted = Losses(source_);
  const std::map<int64_t, std::string> continued = Losses(resumed);
  ASSERT_EQ(uninterrupted.size(), 8u);
  ASSERT_EQ(continued.size(), 4u) << "only the steps after the checkpoint";
  for (int64_t step = 5; step <= 8; ++step) {
    ASSERT_EQ(continued.count(step), 1u) << step;
    EXPECT_EQ(continued.at(step), uninterrupted.at(step)) << "step " << step;
  }
  const CommandResult get = cluster_->Ringctl({"get", resumed});
  EXPECT_THAT(get.output, HasSubstr("started from " + source_ +
                                    "@4 (the whole training state: --resume-from)"));
  // Its own checkpoint of the last step is in its own folder.
  EXPECT_THAT(cluster_->Ringctl({"checkpoints", resumed}).output,
              HasSubstr(resumed + "/outputs/checkpoints/step-8"));
}

TEST_F(LineageTest, InitFromStartsFromTheSavedWeights) {
  // The newest complete checkpoint by default; with lr 1e-30 no update moves a float32 weight, so
  // every step computes the loss of step 4's weights, and step 5 reads the batch the source's
  // step 5 read.
  const std::string init = Run(Submit(Job({"optimizer.lr=1e-30"}), source_ + "@4", ""));
  EXPECT_TRUE(cluster_->Get(init).load_from().model_only());
  const std::map<int64_t, std::string> from = Losses(source_);
  const std::map<int64_t, std::string> loaded = Losses(init);
  ASSERT_EQ(loaded.size(), 8u) << "a fresh run of its own steps";
  EXPECT_EQ(loaded.at(5), from.at(5));
  EXPECT_NE(loaded.at(1), from.at(1)) << "step 1 ran on the trained weights, not the seed's";

  const std::string newest = Submit(Job({"training.steps=2"}), source_, "");
  EXPECT_EQ(cluster_->Get(newest).load_from().step(), 8);
  Run(newest);
}

TEST_F(LineageTest, RefusesWhatCannotBeLoaded) {
  v1::Job job;
  grpc::Status missing_job = Try(Job({}), "job-999999", "", &job);
  EXPECT_EQ(missing_job.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(missing_job.error_message(), HasSubstr("this coordinator has no job job-999999"));

  grpc::Status missing_step = Try(Job({}), "", source_ + "@3", &job);
  EXPECT_EQ(missing_step.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(missing_step.error_message(),
              HasSubstr(source_ + " has no checkpoint of step 3; its complete steps: 4, 8"));

  grpc::Status shape = Try(Job({"model.n_layers=2"}), source_ + "@4", "", &job);
  EXPECT_EQ(shape.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(shape.error_message(), HasSubstr("model.n_layers = 2 here, 4 in " + source_));

  grpc::Status nothing_left = Try(Job({}), "", source_ + "@8", &job);
  EXPECT_EQ(nothing_left.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(nothing_left.error_message(), HasSubstr("set training.steps above 8"));

  // Through ringctl: the refusal on stderr, exit 2 (the request is what to fix).
  const CommandResult cli =
      cluster_->Ringctl({"submit", ConfigPath("debug_model.toml"), "--init-from", source_ + "@5"});
  EXPECT_EQ(cli.exit_code, 2) << cli.output;
  EXPECT_THAT(cli.output, HasSubstr("has no checkpoint of step 5"));
}

}  // namespace
}  // namespace ringtrain::testing
