// Confined paths end to end: a real coordinator, two real agents (--data-root <dir>/data, the
// checkpoint root under each --work-dir) and real trainers. What the coordinator can tell (a '..'
// that climbs out, an absolute checkpoint folder) is refused at submit; what needs the worker's
// roots fails the job at the worker, the refusal its cause (naming the key and the root, not a
// trainer's exit status), before the file is opened — and no error carries bytes of a file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "TOPSECRET-4c1d";

// A one-rank job of a few short steps on the debug model, plus `extra`.
std::vector<std::string> Small(std::vector<std::string> extra) {
  std::vector<std::string> o = {"parallelism.data_parallel_replicate_degree=1",
                                "parallelism.context_parallel_degree=1",
                                "training.steps=3",
                                "training.seq_len=32",
                                "training.local_batch_size=2",
                                "lr_scheduler.warmup_steps=1",
                                "metrics.log_freq=1000"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

grpc::Status SubmitStatus(LocalCluster& cluster, const std::vector<std::string>& overrides) {
  v1::SubmitJobRequest request;
  request.set_config_toml(ReadFile(ConfigPath("debug_model.toml")));
  for (const std::string& o : overrides) request.add_overrides(o);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Job job;
  return cluster.stub().SubmitJob(&context, request, &job);
}

v1::Job RunToEnd(LocalCluster& cluster, const std::vector<std::string>& overrides) {
  const v1::Job job = cluster.Submit(ConfigPath("debug_model.toml"), overrides);
  EXPECT_TRUE(cluster.WaitForJob(job.job_id(), IsFinal, 120, "the job's end")) << cluster.Logs();
  return cluster.Get(job.job_id());
}

// The text a user sees of a failed job.
std::string ErrorText(const v1::Job& job) {
  return job.error().message() + "\n" + job.error().stderr_tail();
}

// One cluster for the suite (a cluster takes seconds to start and stop); each test's jobs are its
// own.
class PathsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster(2);
    outside_ = cluster_->dir() / "outside";
    fs::create_directories(outside_);
    WriteFile(outside_ + "/secret.txt", std::string(kSecret) + "\n");
    const std::string data = cluster_->data_root();
    fs::create_directories(data + "/corpus");
    std::string text;
    while (text.size() < 20000) text += "the quick brown fox jumps over the lazy dog. ";
    WriteFile(data + "/corpus/fox.txt", text);
    fs::create_symlink(data + "/corpus", data + "/alias");             // stays inside
    fs::create_symlink(outside_ + "/secret.txt", data + "/leak.txt");  // leads out
    fs::create_symlink(outside_, data + "/leakdir");
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static LocalCluster* cluster_;
  static std::string outside_;
};

LocalCluster* PathsTest::cluster_ = nullptr;
std::string PathsTest::outside_;

TEST_F(PathsTest, AbsoluteDataPathsClimbingOutAndControlCharactersAreRefusedAtSubmit) {
  const grpc::Status climb = SubmitStatus(
      *cluster_, Small({"training.dataset=text", "training.dataset_path=../outside/secret.txt"}));
  EXPECT_EQ(climb.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(climb.error_message(),
              HasSubstr("training.dataset_path = \"../outside/secret.txt\""));
  EXPECT_THAT(climb.error_message(), HasSubstr("'..' climbs out"));

  const grpc::Status folder = SubmitStatus(
      *cluster_, Small({"checkpoint.enable=true", "checkpoint.folder=a/../../../elsewhere"}));
  EXPECT_EQ(folder.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(folder.error_message(), HasSubstr("checkpoint.folder"));

  // The job's checkpoint folder is made under <checkpoint-root>/<job id>/: an absolute one can
  // never be there.
  const grpc::Status absolute = SubmitStatus(
      *cluster_, Small({"checkpoint.enable=true", "checkpoint.folder=" + outside_ + "/ckpt"}));
  EXPECT_EQ(absolute.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(absolute.error_message(),
              HasSubstr("checkpoint.folder = \"" + outside_ + "/ckpt\": an absolute path"));

  // An absolute data path, outside the workers' data root or even inside it: each worker has its
  // own --data-root, so the coordinator asks for a path relative to it.
  for (const std::string& path : {outside_ + "/secret.txt", cluster_->data_root() + "/a.txt"}) {
    const grpc::Status data =
        SubmitStatus(*cluster_, Small({"training.dataset=text", "training.dataset_path=" + path}));
    EXPECT_EQ(data.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_THAT(data.error_message(), HasSubstr("training.dataset_path = \"" + path + "\""));
    EXPECT_THAT(data.error_message(), HasSubstr("an absolute path"));
    EXPECT_THAT(data.error_message(), HasSubstr("relative to it"));
  }

  const grpc::Status control =
      SubmitStatus(*cluster_, Small({"checkpoint.initial_load_path=w\x1b[2J.pt"}));
  EXPECT_EQ(control.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(control.error_message(), HasSubstr("checkpoint.initial_load_path"));
  EXPECT_THAT(control.error_message(), Not(HasSubstr("\x1b"))) << "shown escaped";

  // ringctl says the same, plainly.
  const CommandResult absolute_cli = RunCommand(
      {BinDir() + "/ringctl", "submit", ConfigPath("debug_model.toml"), "--coordinator",
       cluster_->address(), "--training.dataset=bin", "--training.dataset_path=/srv/data/a.bin"});
  EXPECT_EQ(absolute_cli.exit_code, 2) << "INVALID_ARGUMENT: " << absolute_cli.output;
  EXPECT_THAT(absolute_cli.output, HasSubstr("training.dataset_path = \"/srv/data/a.bin\""));
  EXPECT_THAT(absolute_cli.output, HasSubstr("e.g. \"a.bin\""));
  const CommandResult cli = RunCommand(
      {BinDir() + "/ringctl", "submit", ConfigPath("debug_model.toml"), "--coordinator",
       cluster_->address(), "--training.dataset=text", "--training.dataset_path=../../etc/passwd"});
  EXPECT_EQ(cli.exit_code, 2) << "INVALID_ARGUMENT: " << cli.output;
  EXPECT_THAT(cli.output, HasSubstr("training.dataset_path"));
  EXPECT_EQ(cluster_->Workers().size(), 2u);
}

TEST_F(PathsTest, TheWorkerRefusesPathsOutOfItsRootsAndNeverEchoesFiles) {
  struct Case {
    std::string what;
    std::vector<std::string> overrides;
    std::string key;
    std::string root;
  };
  const std::string data_flag = "--data-root " + cluster_->data_root();
  const std::vector<Case> cases = {
      {"symlink to a file outside",
       {"training.dataset=text", "training.dataset_path=leak.txt"},
       "training.dataset_path",
       data_flag},
      {"symlink to a folder outside",
       {"checkpoint.initial_load_path=leakdir/secret.txt"},
       "checkpoint.initial_load_path",
       data_flag},
  };
  for (const Case& c : cases) {
    const v1::Job job = RunToEnd(*cluster_, Small(c.overrides));
    EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED) << c.what;
    const std::string error = ErrorText(job);
    // The refusal is the cause, said in the error's own message (no trainer ran, so there is no
    // trainer status to show), and the job is not restarted into the same refusal.
    EXPECT_THAT(job.error().message(), HasSubstr("was refused by its agent before a trainer "
                                                 "started: " +
                                                 c.key))
        << c.what;
    EXPECT_THAT(job.error().message(), HasSubstr(c.root)) << c.what;
    EXPECT_THAT(job.error().message(), Not(HasSubstr("status 12"))) << c.what;
    EXPECT_EQ(job.error().cause(), "rank_refused") << c.what;
    EXPECT_EQ(job.restart_count(), 0) << c.what;
    EXPECT_THAT(error, Not(HasSubstr(kSecret))) << c.what;
    EXPECT_EQ(job.last_step(), 0) << c.what;
    // Refused before a trainer ran: no trainer log mentions the job's files.
    for (int w = 0; w < 2; ++w) {
      const std::string log = cluster_->work_dir(w) + "/" + job.job_id() + "/rank-0/rank.log";
      if (fs::exists(log)) ADD_FAILURE() << c.what << ": a trainer started: " << ReadFile(log);
    }
  }
  EXPECT_FALSE(fs::exists(outside_ + "/ckpt")) << "created outside the checkpoint root";

  // What ringctl shows of such a job: the refusal, not a trainer exit status.
  const v1::Job refused = RunToEnd(
      *cluster_,
      Small({"training.dataset=text", "training.dataset_path=leak.txt", "job.max_restarts=2"}));
  EXPECT_EQ(refused.restart_count(), 0) << "a refusal is not restarted";
  const CommandResult watch = RunCommand(
      {BinDir() + "/ringctl", "watch", refused.job_id(), "--coordinator", cluster_->address()});
  EXPECT_EQ(watch.exit_code, 1) << watch.output;
  EXPECT_THAT(watch.output, HasSubstr("leads out of --data-root")) << watch.output;
  EXPECT_THAT(watch.output, HasSubstr("was refused by its agent (no trainer started)"));
  EXPECT_THAT(watch.output, HasSubstr("not restarted: fix the config"));
  EXPECT_THAT(watch.output, Not(HasSubstr("status 126"))) << watch.output;
  EXPECT_THAT(watch.output, Not(HasSubstr("status 127"))) << watch.output;
  // Nor does plot draw an empty "no steps yet" for it.
  const std::string svg = cluster_->dir() / "refused.svg";
  const CommandResult plot = RunCommand({BinDir() + "/ringctl", "plot", refused.job_id(), "--out",
                                         svg, "--coordinator", cluster_->address()});
  EXPECT_EQ(plot.exit_code, 1) << plot.output;
  EXPECT_THAT(plot.output, HasSubstr(refused.job_id() + " FAILED before its first step, so there "
                                                        "is nothing to plot: rank 0 on "));
  EXPECT_FALSE(fs::exists(svg));

  // A dataset inside the root whose bytes are not tokens of this vocabulary: the error says where,
  // never what ("ZZ" is token 23130 as uint16).
  WriteFile(cluster_->data_root() + "/zz.bin", std::string(4096, 'Z'));
  const v1::Job bin =
      RunToEnd(*cluster_, Small({"training.dataset=bin", "training.dataset_path=zz.bin"}));
  EXPECT_EQ(bin.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(ErrorText(bin), HasSubstr("token offset 0"));
  EXPECT_THAT(ErrorText(bin), HasSubstr("zz.bin"));
  EXPECT_THAT(ErrorText(bin), Not(HasSubstr("23130")));
  EXPECT_THAT(ErrorText(bin), Not(HasSubstr("ZZ")));
}

TEST_F(PathsTest, JobsReadUnderTheDataRootAndCheckpointIntoTheirOwnFolders) {
  const std::vector<std::string> overrides =
      Small({"training.dataset=text", "training.dataset_path=alias/fox.txt", "model.vocab_size=512",
             "checkpoint.enable=true", "checkpoint.folder=outputs/ck"});
  const v1::Job a = RunToEnd(*cluster_, overrides);
  const v1::Job b = RunToEnd(*cluster_, overrides);
  for (const v1::Job* job : {&a, &b}) {
    ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << ErrorText(*job) << cluster_->Logs();
    EXPECT_EQ(job->last_step(), 3);
    int found = 0;
    for (int w = 0; w < 2; ++w) {
      found += fs::is_directory(cluster_->work_dir(w) + "/checkpoints/" + job->job_id() +
                                "/outputs/ck/step-3");
    }
    EXPECT_EQ(found, 1) << job->job_id() << "'s checkpoint is in its own folder, once";
  }
  EXPECT_FALSE(fs::exists("outputs/ck")) << "nothing written relative to the agent's cwd";
}

}  // namespace
}  // namespace ringtrain::testing
