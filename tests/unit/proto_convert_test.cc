// job.h's records → the ringtrain.v1 messages: every field lands in its wire field, the state enum
// maps one to one (and by name), absent things stay absent on the wire (no error, no start or
// finish time before there is one), and timestamps round-trip to the millisecond.
#include "coordinator/proto_convert.h"

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "coordinator/job.h"

namespace ringtrain {
namespace {

using google::protobuf::util::TimeUtil;

constexpr JobState kAllStates[] = {JobState::kQueued,    JobState::kAssigned, JobState::kRunning,
                                   JobState::kSucceeded, JobState::kFailed,   JobState::kCancelled,
                                   JobState::kRestarting};

TEST(ProtoConvertTest, EveryStateMapsToTheWireStateOfTheSameName) {
  std::set<int> seen;
  for (JobState state : kAllStates) {
    const v1::JobState wire = ToProto(state);
    EXPECT_NE(wire, v1::JOB_STATE_UNSPECIFIED) << JobStateName(state);
    EXPECT_EQ(v1::JobState_Name(wire), std::string("JOB_STATE_") + JobStateName(state));
    seen.insert(wire);
    // The store keeps states by name: the name reads back as the same state.
    EXPECT_EQ(JobStateFromName(JobStateName(state)), state);
  }
  EXPECT_EQ(seen.size(), std::size(kAllStates));  // one to one
  EXPECT_EQ(JobStateFromName("RUNNIN"), std::nullopt);
}

TEST(ProtoConvertTest, TimestampsRoundTripToTheMillisecond) {
  for (int64_t unix_ms : {int64_t{0}, int64_t{999}, int64_t{1000}, int64_t{1700000000123}}) {
    google::protobuf::Timestamp t;
    SetTimestamp(unix_ms, &t);
    EXPECT_EQ(TimeUtil::TimestampToMilliseconds(t), unix_ms);
    EXPECT_GE(t.nanos(), 0);
    EXPECT_LT(t.nanos(), 1000000000);
  }
  google::protobuf::Timestamp t;
  SetTimestamp(1700000000123, &t);
  EXPECT_EQ(t.seconds(), 1700000000);
  EXPECT_EQ(t.nanos(), 123000000);
}

JobRecord FailedJob() {
  JobRecord job;
  job.job_id = "job-000007";
  job.name = "ring-8k";
  job.state = JobState::kFailed;
  job.config_toml = "[training]\nsteps = 10\n";
  job.overrides = {"training.steps=5", "parallelism.context_parallel_degree=2"};
  job.degrees = {4, 2, 2};  // world, dp, cp
  job.device_kind = "cuda";
  job.mesh = {
      {0, "worker-1", 0, 0}, {1, "worker-2", 0, 0}, {2, "worker-3", 1, 1}, {3, "worker-4", 1, 1}};
  job.wait_reason = "";
  job.error = JobError{3, "worker-4", 137, "E killed\n", "rank 3 on worker-4 was killed"};
  job.submitted_unix_ms = 1700000000000;
  job.started_unix_ms = 1700000001500;
  job.finished_unix_ms = 1700000009250;
  job.total_steps = 5;
  job.last_step = 4;
  job.last_loss = 2.75;
  return job;
}

TEST(ProtoConvertTest, JobFieldsLandInTheirWireFields) {
  const JobRecord job = FailedJob();
  const v1::Job out = ToProto(job);
  EXPECT_EQ(out.job_id(), "job-000007");
  EXPECT_EQ(out.name(), "ring-8k");
  EXPECT_EQ(out.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(out.config_toml(), job.config_toml);
  ASSERT_EQ(out.overrides_size(), 2);
  EXPECT_EQ(out.overrides(0), "training.steps=5");  // in order
  EXPECT_EQ(out.overrides(1), "parallelism.context_parallel_degree=2");
  EXPECT_EQ(out.device_kind(), "cuda");
  EXPECT_EQ(out.world_size(), 4);
  EXPECT_EQ(out.dp(), 2);
  EXPECT_EQ(out.cp(), 2);
  ASSERT_EQ(out.mesh_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out.mesh(i).rank(), job.mesh[i].rank);
    EXPECT_EQ(out.mesh(i).worker_id(), job.mesh[i].worker_id);
    EXPECT_EQ(out.mesh(i).cp_group(), job.mesh[i].cp_group);
    EXPECT_EQ(out.mesh(i).dp_index(), job.mesh[i].dp_index);
  }
  ASSERT_TRUE(out.has_error());
  EXPECT_EQ(out.error().rank(), 3);
  EXPECT_EQ(out.error().worker_id(), "worker-4");
  EXPECT_EQ(out.error().exit_status(), 137);
  EXPECT_EQ(out.error().stderr_tail(), "E killed\n");
  EXPECT_EQ(out.error().message(), "rank 3 on worker-4 was killed");
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(out.submitted_time()), job.submitted_unix_ms);
  ASSERT_TRUE(out.has_started_time());
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(out.started_time()), job.started_unix_ms);
  ASSERT_TRUE(out.has_finished_time());
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(out.finished_time()), job.finished_unix_ms);
  EXPECT_EQ(out.total_steps(), 5);
  EXPECT_EQ(out.last_step(), 4);
  EXPECT_DOUBLE_EQ(out.last_loss(), 2.75);
}

TEST(ProtoConvertTest, AQueuedJobHasNoMeshErrorOrStartAndFinishTimes) {
  JobRecord job;
  job.job_id = "job-000001";
  job.degrees = {2, 1, 2};  // world, dp, cp
  job.wait_reason = "waiting for 2 idle cpu workers, 0 free";
  job.submitted_unix_ms = 1700000000000;
  const v1::Job out = ToProto(job);
  EXPECT_EQ(out.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(out.device_kind(), "cpu");  // JobRecord's default
  EXPECT_EQ(out.mesh_size(), 0);
  EXPECT_EQ(out.overrides_size(), 0);
  EXPECT_EQ(out.wait_reason(), job.wait_reason);
  EXPECT_FALSE(out.has_error());
  EXPECT_TRUE(out.has_submitted_time());  // always set, even at 0
  EXPECT_FALSE(out.has_started_time());
  EXPECT_FALSE(out.has_finished_time());
  EXPECT_EQ(out.last_step(), 0);
}

TEST(ProtoConvertTest, StepEventBecomesAStepJobEvent) {
  StepEvent step{"job-000003", 12, 3.5, 0.25, 3e-4, 51200.5, 0.125, R"({"step": 12, "x": 1})"};
  const v1::JobEvent event = ToProtoEvent(step);
  ASSERT_EQ(event.event_case(), v1::JobEvent::kStep);
  EXPECT_EQ(event.step().job_id(), "job-000003");
  EXPECT_EQ(event.step().step(), 12);
  EXPECT_DOUBLE_EQ(event.step().loss(), 3.5);
  EXPECT_DOUBLE_EQ(event.step().grad_norm(), 0.25);
  EXPECT_DOUBLE_EQ(event.step().lr(), 3e-4);
  EXPECT_DOUBLE_EQ(event.step().tokens_per_second(), 51200.5);
  EXPECT_DOUBLE_EQ(event.step().step_seconds(), 0.125);
  EXPECT_EQ(event.step().record_json(), step.record_json);  // kept whole
}

TEST(ProtoConvertTest, ADivergedLossStaysNaNOnTheWire) {
  StepEvent step;
  step.job_id = "job-000003";
  step.step = 1;
  step.loss = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(ToProtoEvent(step).step().loss()));
}

TEST(ProtoConvertTest, StateChangeBecomesAStateChangeJobEvent) {
  StateChange change{"job-000004", JobState::kRunning, JobState::kCancelled,
                     "cancelled by a client", 1700000004321};
  const v1::JobEvent event = ToProtoEvent(change);
  ASSERT_EQ(event.event_case(), v1::JobEvent::kStateChange);
  EXPECT_EQ(event.state_change().job_id(), "job-000004");
  EXPECT_EQ(event.state_change().from_state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(event.state_change().to_state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(event.state_change().message(), "cancelled by a client");
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(event.state_change().time()), 1700000004321);
}

}  // namespace
}  // namespace ringtrain
