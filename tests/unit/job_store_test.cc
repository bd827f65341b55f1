#include "coordinator/job_store.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <cmath>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

std::unique_ptr<JobStore> OpenOrDie(const std::string& path) {
  auto store = JobStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

JobRecord SampleJob(const std::string& name) {
  JobRecord job;
  job.name = name;
  job.config_toml = "[model]\nflavor = \"debug\"\n";
  job.overrides = {"training.steps=10", "parallelism.cp=2"};
  job.degrees = {4, 2, 2, 2};  // world, dp, cp, ulysses
  job.mesh = {{0, "w-a", 0, 0}, {1, "w-a", 0, 0}, {2, "w-b", 1, 1}, {3, "w-b", 1, 1}};
  job.total_steps = 10;
  return job;
}

StepEvent Event(const std::string& job_id, int64_t step, double loss) {
  return {job_id, step,   loss, 0.1 * step,
          3e-4,   1234.5, 0.25, "{\"step\":" + std::to_string(step) + "}"};
}

using testing::TempDir;

TEST(JobStoreTest, CreateGetList) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->NextJobNumber(), 1);
  int64_t before = absl::ToUnixMillis(absl::Now());
  auto a = store->CreateJob(SampleJob("first"));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = store->CreateJob(SampleJob("second"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->job_id, "job-000001");
  EXPECT_EQ(b->job_id, "job-000002");
  EXPECT_EQ(a->state, JobState::kQueued);
  EXPECT_GE(a->submitted_unix_ms, before);
  EXPECT_EQ(a->started_unix_ms, 0);
  EXPECT_EQ(*store->NextJobNumber(), 3);

  auto got = store->GetJob("job-000001");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->name, "first");
  EXPECT_EQ(got->config_toml, SampleJob("x").config_toml);
  EXPECT_EQ(got->overrides, SampleJob("x").overrides);
  ASSERT_EQ(got->mesh.size(), 4u);
  EXPECT_EQ(got->degrees.cp, 2);
  EXPECT_EQ(got->degrees.ulysses, 2);  // placement keeps Ulysses groups on a host after a restart
  EXPECT_EQ(got->mesh[2].worker_id, "w-b");
  EXPECT_EQ(got->mesh[2].cp_group, 1);
  EXPECT_EQ(got->mesh[3].dp_index, 1);
  EXPECT_FALSE(got->error.has_value());
  EXPECT_EQ(got->submitted_unix_ms, a->submitted_unix_ms);

  auto list = store->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "first");
  EXPECT_EQ((*list)[1].name, "second");

  auto changes = store->StateChanges(a->job_id);
  ASSERT_TRUE(changes.ok());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].to, JobState::kQueued);
}

TEST(JobStoreTest, NotFoundNamesTheJob) {
  auto store = OpenOrDie(":memory:");
  auto got = store->GetJob("job-000042");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("job-000042"), absl::string_view::npos);
  EXPECT_EQ(store->TransitionJob("job-000042", JobState::kAssigned, "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->AppendStepEvent(Event("job-000042", 1, 1.0)).status().code(),
            absl::StatusCode::kNotFound);
  JobRecord missing = SampleJob("m");
  missing.job_id = "job-000042";
  EXPECT_EQ(store->UpdateJob(missing).code(), absl::StatusCode::kNotFound);
}

TEST(JobStoreTest, UpdateJobReplacesMutableFields) {
  auto store = OpenOrDie(":memory:");
  auto job = *store->CreateJob(SampleJob("j"));
  job.wait_reason = "needs 4 workers, 2 free";
  job.mesh.pop_back();
  job.error = JobError{3, "w-b", 139, "Segmentation fault", "rank 3 crashed"};
  job.state = JobState::kSucceeded;  // ignored: states move only through TransitionJob
  ASSERT_TRUE(store->UpdateJob(job).ok());
  auto got = *store->GetJob(job.job_id);
  EXPECT_EQ(got.wait_reason, "needs 4 workers, 2 free");
  EXPECT_EQ(got.mesh.size(), 3u);
  ASSERT_TRUE(got.error.has_value());
  EXPECT_EQ(got.error->rank, 3);
  EXPECT_EQ(got.error->exit_status, 139);
  EXPECT_EQ(got.error->stderr_tail, "Segmentation fault");
  EXPECT_EQ(got.state, JobState::kQueued);
}

TEST(JobStoreTest, TransitionsFollowTheStateMachine) {
  auto store = OpenOrDie(":memory:");
  auto job = *store->CreateJob(SampleJob("j"));
  int64_t before = absl::ToUnixMillis(absl::Now());

  auto bad = store->TransitionJob(job.job_id, JobState::kRunning, "skip");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("QUEUED"), absl::string_view::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("RUNNING"), absl::string_view::npos) << bad.status();

  ASSERT_TRUE(store->TransitionJob(job.job_id, JobState::kAssigned, "placed").ok());
  EXPECT_EQ(store->GetJob(job.job_id)->started_unix_ms, 0);
  auto running = store->TransitionJob(job.job_id, JobState::kRunning, "all ranks up");
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->from, JobState::kAssigned);
  EXPECT_EQ(running->to, JobState::kRunning);
  auto started = *store->GetJob(job.job_id);
  EXPECT_EQ(started.state, JobState::kRunning);
  EXPECT_GE(started.started_unix_ms, before);
  EXPECT_EQ(started.started_unix_ms, running->unix_ms);
  EXPECT_EQ(started.finished_unix_ms, 0);

  // A restart keeps the first start time.
  ASSERT_TRUE(store->TransitionJob(job.job_id, JobState::kRestarting, "rank lost").ok());
  ASSERT_TRUE(store->TransitionJob(job.job_id, JobState::kAssigned, "re-placed").ok());
  ASSERT_TRUE(store->TransitionJob(job.job_id, JobState::kRunning, "resumed").ok());
  EXPECT_EQ(store->GetJob(job.job_id)->started_unix_ms, started.started_unix_ms);

  auto done = store->TransitionJob(job.job_id, JobState::kSucceeded, "done");
  ASSERT_TRUE(done.ok());
  auto finished = *store->GetJob(job.job_id);
  EXPECT_EQ(finished.finished_unix_ms, done->unix_ms);
  EXPECT_GE(finished.finished_unix_ms, finished.started_unix_ms);

  auto after_final = store->TransitionJob(job.job_id, JobState::kCancelled, "too late");
  EXPECT_EQ(after_final.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(after_final.status().message().find("SUCCEEDED"), absl::string_view::npos);
  EXPECT_NE(after_final.status().message().find("CANCELLED"), absl::string_view::npos);

  auto changes = *store->StateChanges(job.job_id);
  std::vector<JobState> to;
  for (const auto& c : changes) to.push_back(c.to);
  EXPECT_EQ(to, (std::vector<JobState>{JobState::kQueued, JobState::kAssigned, JobState::kRunning,
                                       JobState::kRestarting, JobState::kAssigned,
                                       JobState::kRunning, JobState::kSucceeded}));
  EXPECT_EQ(changes[1].message, "placed");
  // Each change has its own increasing seq, so ASSIGNED and RUNNING of a restarted job are
  // distinct events; the change TransitionJob returns carries the seq it was stored with.
  for (size_t i = 1; i < changes.size(); ++i) EXPECT_GT(changes[i].seq, changes[i - 1].seq);
  EXPECT_EQ(changes.back().seq, done->seq);
}

TEST(JobStoreTest, AllowedTransitionTable) {
  using S = JobState;
  EXPECT_TRUE(IsAllowedTransition(S::kQueued, S::kCancelled));
  EXPECT_TRUE(IsAllowedTransition(S::kQueued, S::kFailed));
  EXPECT_TRUE(IsAllowedTransition(S::kAssigned, S::kQueued));
  EXPECT_TRUE(IsAllowedTransition(S::kAssigned, S::kRestarting));  // a rank failed while starting
  EXPECT_TRUE(IsAllowedTransition(S::kRestarting, S::kAssigned));
  EXPECT_FALSE(IsAllowedTransition(S::kQueued, S::kRestarting));
  EXPECT_FALSE(IsAllowedTransition(S::kRestarting, S::kRunning));
  EXPECT_TRUE(IsAllowedTransition(S::kRunning, S::kRunning));  // a heal in place
  EXPECT_FALSE(IsAllowedTransition(S::kAssigned, S::kAssigned));
  EXPECT_FALSE(IsAllowedTransition(S::kQueued, S::kSucceeded));
  for (S final_state : {S::kSucceeded, S::kFailed, S::kCancelled}) {
    EXPECT_TRUE(IsTerminal(final_state));
    EXPECT_FALSE(IsAllowedTransition(final_state, S::kQueued));
  }
  EXPECT_EQ(JobStateFromName("RESTARTING"), S::kRestarting);
  EXPECT_FALSE(JobStateFromName("bogus").has_value());
}

TEST(JobStoreTest, StepEventsAreIdempotentAndOrdered) {
  auto store = OpenOrDie(":memory:");
  auto job = *store->CreateJob(SampleJob("j"));
  const double loss3 = 10.123456789012345;  // needs all 17 digits
  for (int64_t step : {3, 1, 2, 5, 4}) {
    auto added = store->AppendStepEvent(Event(job.job_id, step, step == 3 ? loss3 : 1.0 / step));
    ASSERT_TRUE(added.ok()) << added.status();
    EXPECT_TRUE(*added);
  }
  // A replayed report (say, after a coordinator restart) changes nothing.
  auto again = store->AppendStepEvent(Event(job.job_id, 3, 99.0));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);

  auto all = *store->StepEvents(job.job_id, 0, 0);
  ASSERT_EQ(all.size(), 5u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].step, static_cast<int64_t>(i + 1));
  EXPECT_EQ(all[2].loss, loss3);  // exact
  EXPECT_EQ(all[2].grad_norm, 0.1 * 3);
  EXPECT_EQ(all[2].record_json, "{\"step\":3}");

  auto from3 = *store->StepEvents(job.job_id, 3, 0);
  ASSERT_EQ(from3.size(), 3u);
  EXPECT_EQ(from3.front().step, 3);
  auto limited = *store->StepEvents(job.job_id, 2, 2);
  ASSERT_EQ(limited.size(), 2u);
  EXPECT_EQ(limited[0].step, 2);
  EXPECT_EQ(limited[1].step, 3);

  // Progress follows the highest step, even though step 4 arrived last.
  auto got = *store->GetJob(job.job_id);
  EXPECT_EQ(got.last_step, 5);
  EXPECT_EQ(got.last_loss, 1.0 / 5);
}

TEST(JobStoreTest, ReopenFindsEverything) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/jobs.db";
  std::string id;
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(std::filesystem::exists(path + "-wal"));  // WAL journal
    store->CreateJob(SampleJob("a")).IgnoreError();
    auto job = *store->CreateJob(SampleJob("b"));
    id = job.job_id;
    ASSERT_TRUE(store->TransitionJob(id, JobState::kAssigned, "placed").ok());
    ASSERT_TRUE(store->TransitionJob(id, JobState::kRunning, "up").ok());
    for (int64_t step = 1; step <= 3; ++step) {
      ASSERT_TRUE(store->AppendStepEvent(Event(id, step, 2.0 / step)).ok());
    }
  }
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->NextJobNumber(), 3);
  auto jobs = *store->ListJobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[1].job_id, id);
  EXPECT_EQ(jobs[1].state, JobState::kRunning);
  EXPECT_EQ(jobs[1].last_step, 3);
  EXPECT_EQ(jobs[1].mesh.size(), 4u);
  EXPECT_EQ(store->StateChanges(id)->size(), 3u);
  EXPECT_EQ(store->StepEvents(id, 2, 0)->size(), 2u);
  EXPECT_FALSE(*store->AppendStepEvent(Event(id, 2, 5.0)));  // the replay is recognised
  auto next = store->CreateJob(SampleJob("c"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->job_id, "job-000003");
}

// The checkpoint a job starts from, and the checkpoints its records announce: a save that began,
// then committed (complete stays complete, whatever comes after), kept across a reopen.
TEST(JobStoreTest, CheckpointsAndLoadSourceSurviveReopen) {
  TempDir dir;
  const std::string path = dir / "jobs.db";
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    JobRecord job = SampleJob("resumed");
    job.load_from = CheckpointLoad{"job-000009", "ck", 40, /*model_only=*/false};
    ASSERT_TRUE(store->CreateJob(job).ok());
    ASSERT_TRUE(store->NoteCheckpoint("job-000001", 8, false, "/ckpt").ok());
    ASSERT_TRUE(store->NoteCheckpoint("job-000001", 4, true, "/ckpt").ok());
    ASSERT_TRUE(store->NoteCheckpoint("job-000001", 8, true, "/other").ok());
    ASSERT_TRUE(store->NoteCheckpoint("job-000001", 4, false, "/ckpt").ok());  // a later save
    EXPECT_EQ(store->NoteCheckpoint("job-000002", 4, true, "/ckpt").code(),
              absl::StatusCode::kNotFound);
  }
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  auto job = store->GetJob("job-000001");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->load_from.has_value());
  EXPECT_EQ(job->load_from->job_id, "job-000009");
  EXPECT_EQ(job->load_from->folder, "ck");
  EXPECT_EQ(job->load_from->step, 40);
  EXPECT_FALSE(job->load_from->model_only);
  auto saved = store->Checkpoints("job-000001");
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(saved->size(), 2u);
  EXPECT_EQ((*saved)[0].step, 4);
  EXPECT_TRUE((*saved)[0].complete);
  EXPECT_EQ((*saved)[1].step, 8);
  EXPECT_TRUE((*saved)[1].complete);
  EXPECT_EQ((*saved)[1].checkpoint_root, "/ckpt");  // the first noted
  JobRecord plain = SampleJob("plain");
  auto created = store->CreateJob(plain);
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(store->GetJob(created->job_id)->load_from.has_value());
}

TEST(JobStoreTest, WorkerCredentialsAreReplacedDeletedAndSurviveReopen) {
  TempDir dir;
  const std::string path = dir / "workers.db";
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(*store->WorkerCredential("worker-1"), "");
    ASSERT_TRUE(store->PutWorkerCredential("worker-1", "digest-a").ok());
    ASSERT_TRUE(store->PutWorkerCredential("worker-2", "digest-b").ok());
    ASSERT_TRUE(store->PutWorkerCredential("worker-1", "digest-c").ok());  // re-registered
    EXPECT_EQ(*store->WorkerCredential("worker-1"), "digest-c");
  }
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->WorkerIds(), (std::vector<std::string>{"worker-1", "worker-2"}));
  EXPECT_EQ(*store->WorkerCredential("worker-1"), "digest-c");
  ASSERT_TRUE(store->DeleteWorker("worker-1").ok());
  ASSERT_TRUE(store->DeleteWorker("worker-1").ok());  // already gone: still OK
  EXPECT_EQ(*store->WorkerIds(), std::vector<std::string>{"worker-2"});
  EXPECT_EQ(*store->WorkerCredential("worker-1"), "");
}

TEST(JobStoreTest, MissingDirectoryIsAClearError) {
  TempDir dir;
  const std::string path = dir.path() + "/no/such/dir/jobs.db";
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(path), absl::string_view::npos) << store.status();
}

TEST(JobStoreTest, ConcurrentAppendsAllLand) {
  TempDir dir;
  auto store = OpenOrDie(dir.path() + "/jobs.db");
  ASSERT_NE(store, nullptr);
  auto job = *store->CreateJob(SampleJob("j"));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int64_t step = 1 + t + int64_t{kThreads} * i;
        auto added = store->AppendStepEvent(Event(job.job_id, step, 1.0));
        EXPECT_TRUE(added.ok() && *added) << added.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  auto events = *store->StepEvents(job.job_id, 0, 0);
  ASSERT_EQ(events.size(), static_cast<size_t>(kThreads * kPerThread));
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].step, static_cast<int64_t>(i + 1));
  EXPECT_EQ(store->GetJob(job.job_id)->last_step, kThreads * kPerThread);
}

}  // namespace
}  // namespace ringtrain

namespace ringtrain {
namespace {

TEST(JobStoreTest, NanLossAndDeviceKindRoundTrip) {
  auto store = OpenOrDie(":memory:");
  JobRecord job = SampleJob("diverging");
  job.device_kind = "cuda";
  JobRecord created = *store->CreateJob(job);
  EXPECT_EQ(store->GetJob(created.job_id)->device_kind, "cuda");
  // A diverged step (the trainer writes a NaN loss as null) is stored, not refused.
  ASSERT_TRUE(store->AppendStepEvent(Event(created.job_id, 1, std::nan(""))).ok());
  auto events = *store->StepEvents(created.job_id, 0, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::isnan(events[0].loss));
  EXPECT_TRUE(std::isnan(store->GetJob(created.job_id)->last_loss));
}

}  // namespace
}  // namespace ringtrain
