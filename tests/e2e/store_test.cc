// The crash-safe job store against the real ringtrain-coordinator (no workers: submitted jobs stay
// QUEUED): a store that is damaged, lost a table or jobs, is missing or emptied between two starts
// is refused — the process
// exits non-zero within seconds, one line on stderr naming the file and the fix — `--new-store`
// starts anyway, and a normal restart keeps every job.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "coordinator/sqlite_db.h"
#include "ringtrain/v1/job_service.grpc.pb.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

std::chrono::system_clock::time_point In(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One ringtrain-coordinator at a time (no workers), its output kept in `log_dir`. A process still
// running when the object dies is killed: its store is not looked at again.
class Coordinator {
 public:
  struct Ended {
    int exit_code = -1;  // -1: still running after the deadline (then killed)
    std::string err;     // its stderr
  };

  explicit Coordinator(std::string log_dir) : log_dir_(std::move(log_dir)) {}

  // Starts it on `db` and waits until it serves.
  void StartServing(const std::string& db, const std::vector<std::string>& flags = {}) {
    process_ = StartCommand(Argv(db, flags), out_, err_);
    ASSERT_TRUE(
        WaitFor([&] { return !process_.running() || Contains(Err(), "listening on"); }, 15));
    ASSERT_TRUE(process_.Poll() == std::nullopt) << "the coordinator exited at start: " << Err();
    stub_ =
        v1::JobService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  // Starts it on `db` expecting it to end by itself within 10 s.
  Ended StartExpectingExit(const std::string& db, const std::vector<std::string>& flags = {}) {
    process_ = StartCommand(Argv(db, flags), out_, err_);
    Ended ended;
    ended.exit_code = WaitCommand(process_, 10);
    ended.err = Err();
    return ended;
  }

  void Stop() {
    ASSERT_TRUE(process_.Signal(SIGTERM));
    EXPECT_EQ(WaitCommand(process_, 15), 0) << Err();
  }

  // Submits a one-rank job; its id, or "" (after a test failure).
  std::string Submit() {
    v1::SubmitJobRequest request;
    request.set_config_toml("[training]\nsteps = 2\n");
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::Job job;
    const grpc::Status s = stub_->SubmitJob(&context, request, &job);
    EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << Err();
    return job.job_id();
  }

  std::vector<v1::Job> ListJobs() {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::ListJobsResponse response;
    const grpc::Status s = stub_->ListJobs(&context, v1::ListJobsRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << Err();
    return {response.jobs().begin(), response.jobs().end()};
  }

  // The stderr of the latest start.
  std::string Err() const { return ReadFile(err_); }

 private:
  std::vector<std::string> Argv(const std::string& db, const std::vector<std::string>& flags) {
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    std::vector<std::string> argv = {BinDir() + "/ringtrain-coordinator",
                                     "--listen",
                                     address_,
                                     "--db",
                                     db,
                                     "--metrics-address",
                                     "127.0.0.1:" + std::to_string(FreePort()),
                                     "--pool-size-hint",
                                     "1",
                                     "--worker-timeout",
                                     "600"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const std::string name = log_dir_ + "/coordinator-" + std::to_string(starts_++);
    out_ = name + ".out";
    err_ = name + ".err";
    return argv;
  }

  const std::string log_dir_;
  Subprocess process_;
  int starts_ = 0;
  std::string address_, out_, err_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

class StoreTest : public ::testing::Test {
 protected:
  using Ended = Coordinator::Ended;

  // Made once (a coordinator takes seconds to stop): a store holding two QUEUED jobs with its
  // stamp, and a fresh store that never held one, each left by a coordinator that stopped.
  static void SetUpTestSuite() {
    made_ = new TempDir;
    Coordinator maker(made_->path());
    maker.StartServing(*made_ / "two-jobs.db");
    EXPECT_EQ(maker.Submit(), "job-000001");
    EXPECT_EQ(maker.Submit(), "job-000002");
    maker.Stop();
    maker.StartServing(*made_ / "fresh.db");
    maker.Stop();
  }
  static void TearDownTestSuite() {
    delete made_;
    made_ = nullptr;
  }

  // Each test starts from a copy of the store with two jobs.
  void SetUp() override {
    fs::copy_file(*made_ / "two-jobs.db", db_);
    fs::copy_file(*made_ / "two-jobs.db.stamp", stamp_);
  }

  void RemoveDb() {
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_ + suffix);
  }

  // The refusal: exit 1 and one line (after the prefix), no crash.
  static void ExpectOneLine(const Ended& ended) {
    EXPECT_EQ(ended.exit_code, 1) << ended.err;
    ASSERT_FALSE(ended.err.empty());
    EXPECT_EQ(ended.err.rfind("ringtrain-coordinator: ", 0), 0u) << ended.err;
    EXPECT_EQ(ended.err.find('\n'), ended.err.size() - 1) << ended.err;
  }

  static TempDir* made_;
  TempDir dir_;
  const std::string db_ = dir_ / "ringtrain.db";
  const std::string stamp_ = db_ + ".stamp";
  Coordinator coordinator_{dir_.path()};
};

TempDir* StoreTest::made_ = nullptr;

TEST_F(StoreTest, ANormalRestartKeepsTheJobs) {
  ASSERT_NO_FATAL_FAILURE(coordinator_.StartServing(db_));
  const std::vector<v1::Job> jobs = coordinator_.ListJobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job_id(), "job-000002");  // newest first
  EXPECT_EQ(jobs[1].job_id(), "job-000001");
  for (const v1::Job& job : jobs) EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(coordinator_.Submit(), "job-000003");
  EXPECT_FALSE(Contains(coordinator_.Err(), "stamp")) << coordinator_.Err();  // nothing to say
}

TEST_F(StoreTest, ADamagedStoreIsRefused) {
  ASSERT_FALSE(fs::exists(*made_ / "two-jobs.db-wal")) << "a clean stop leaves all in the file";
  const auto size = static_cast<std::streamoff>(fs::file_size(db_));
  ASSERT_GT(size, 4096);
  {
    std::fstream f(db_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);  // pages 2..N
    std::mt19937 random(11);
    for (std::streamoff i = 4096; i < size; ++i) f.put(static_cast<char>(random()));
  }
  const auto started = std::chrono::steady_clock::now();
  Ended ended = coordinator_.StartExpectingExit(db_);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  ExpectOneLine(ended);
  EXPECT_TRUE(Contains(ended.err, "job store '" + db_ + "' is damaged: SQLite says")) << ended.err;
  EXPECT_TRUE(Contains(ended.err, "Restore it from a backup")) << ended.err;

  // --new-store does not take a damaged file.
  ended = coordinator_.StartExpectingExit(db_, {"--new-store"});
  ExpectOneLine(ended);
  EXPECT_TRUE(Contains(ended.err, "is damaged")) << ended.err;
}

// Rows and tables removed from a sound file (SQLite finds nothing wrong) are damage too;
// --new-store does not take such a file, and nothing is made again in it.
TEST_F(StoreTest, AStoreThatLostAJobOrATableIsRefused) {
  auto edit = [&](const std::string& sql) {
    auto db = SqliteDb::Open(db_, absl::Seconds(5));
    ASSERT_TRUE(db.ok()) << db.status();
    ASSERT_TRUE((*db)->Exec(sql).ok()) << sql;
  };
  ASSERT_NO_FATAL_FAILURE(edit("DELETE FROM jobs WHERE job_id = 'job-000002'"));
  for (const std::vector<std::string>& flags : {std::vector<std::string>{}, {"--new-store"}}) {
    Ended ended = coordinator_.StartExpectingExit(db_, flags);
    ExpectOneLine(ended);
    EXPECT_TRUE(
        Contains(ended.err, "job store '" + db_ +
                                "' is damaged: it lacks 1 of the 2 jobs "
                                "its job counter says it took: job-000002. Restore it from a "
                                "backup, or move it away"))
        << ended.err;
  }

  RemoveDb();
  fs::copy_file(*made_ / "two-jobs.db", db_);
  ASSERT_NO_FATAL_FAILURE(edit("DROP TABLE step_events"));
  for (const std::vector<std::string>& flags : {std::vector<std::string>{}, {"--new-store"}}) {
    Ended ended = coordinator_.StartExpectingExit(db_, flags);
    ExpectOneLine(ended);
    EXPECT_TRUE(Contains(ended.err, "job store '" + db_ +
                                        "' is damaged: it lacks the table "
                                        "step_events (the jobs' step events). Restore it"))
        << ended.err;
  }
}

TEST_F(StoreTest, AMissingStoreIsRefusedUntilNewStore) {
  RemoveDb();
  Ended ended = coordinator_.StartExpectingExit(db_);
  ExpectOneLine(ended);
  EXPECT_TRUE(Contains(ended.err, "job store '" + db_ + "' is missing, but its stamp '" + stamp_ +
                                      "' says it held 2 jobs (the last job-000002"))
      << ended.err;
  EXPECT_TRUE(Contains(ended.err, "start with --new-store to begin a new, empty store"))
      << ended.err;
  EXPECT_FALSE(fs::exists(db_));

  // --new-store starts an empty store and serves; it says what it accepted.
  ASSERT_NO_FATAL_FAILURE(coordinator_.StartServing(db_, {"--new-store"}));
  EXPECT_TRUE(coordinator_.ListJobs().empty());
  EXPECT_TRUE(Contains(coordinator_.Err(), "--new-store: job store '" + db_ + "' is missing"))
      << coordinator_.Err();
  EXPECT_EQ(coordinator_.Submit(), "job-000001");
  ASSERT_NO_FATAL_FAILURE(coordinator_.Stop());
  // The stamp was rewritten: the next plain start is a normal one.
  ASSERT_NO_FATAL_FAILURE(coordinator_.StartServing(db_));
  EXPECT_EQ(coordinator_.ListJobs().size(), 1u);
}

TEST_F(StoreTest, AnEmptiedStoreIsRefusedUntilNewStore) {
  // A fresh store made by another coordinator replaces ours.
  RemoveDb();
  fs::copy_file(*made_ / "fresh.db", db_);

  Ended ended = coordinator_.StartExpectingExit(db_);
  ExpectOneLine(ended);
  EXPECT_TRUE(Contains(ended.err, "job store '" + db_ + "' holds no jobs, but its stamp '" +
                                      stamp_ + "' says it held 2 jobs"))
      << ended.err;
  EXPECT_TRUE(Contains(ended.err, "--new-store to take it as it is")) << ended.err;

  ASSERT_NO_FATAL_FAILURE(coordinator_.StartServing(db_, {"--new-store"}));
  EXPECT_TRUE(coordinator_.ListJobs().empty());
}

}  // namespace
}  // namespace ringtrain::testing
