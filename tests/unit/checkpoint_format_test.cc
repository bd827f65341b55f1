// How ringctl shows a job's checkpoints (client/checkpoint_format.h): get's lines, the
// `checkpoints` table, the source a job started from, and a job with none.
#include "client/checkpoint_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

v1::Job WithCheckpoints() {
  v1::Job job;
  job.set_job_id("job-000002");
  job.set_state(v1::JOB_STATE_RUNNING);
  v1::Checkpoint* done = job.add_checkpoints();
  done->set_step(4);
  done->set_complete(true);
  done->set_path("/ckpt/job-000002/ck/step-4");
  job.add_checkpoints()->set_step(8);  // a save in flight: no folder yet
  return job;
}

TEST(CheckpointFormatTest, LinesAndTable) {
  const v1::Job job = WithCheckpoints();
  EXPECT_EQ(CheckpointLines(job),
            (std::vector<std::string>{"step 4  complete  /ckpt/job-000002/ck/step-4",
                                      "step 8  incomplete  -"}));
  EXPECT_EQ(FormatCheckpointTable(job),
            "STEP  STATE       PATH\n"
            "4     complete    /ckpt/job-000002/ck/step-4\n"
            "8     incomplete  -\n");
}

TEST(CheckpointFormatTest, TheSourceAJobStartedFrom) {
  v1::Job job;
  EXPECT_EQ(LoadFromText(job), "");
  job.mutable_load_from()->set_job_id("job-000001");
  job.mutable_load_from()->set_step(200);
  job.mutable_load_from()->set_model_only(true);
  EXPECT_EQ(LoadFromText(job), "job-000001@200 (weights only: --init-from)");
  job.mutable_load_from()->set_model_only(false);
  EXPECT_EQ(LoadFromText(job), "job-000001@200 (the whole training state: --resume-from)");
}

TEST(CheckpointFormatTest, AJobWithNoneSaysHowToGetThem) {
  v1::Job job;
  job.set_job_id("job-000003");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(FormatCheckpointTable(job), HasSubstr("job-000003 has no checkpoints (SUCCEEDED;"));
  EXPECT_THAT(FormatCheckpointTable(job), HasSubstr("checkpoint.enable = true"));
}

}  // namespace
}  // namespace ringtrain
