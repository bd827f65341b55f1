// ringctl's conveniences against a real local cluster (coordinator, two agents, real trainers):
// `compare` of equal and unequal jobs (table and exit statuses), `plot` of two jobs (both series
// and a legend), `export` (the records watch shows, byte for byte), `--coordinator` before the
// subcommand and $RINGTRAIN_COORDINATOR, `list --state/--name`, the warnings of `submit` (a key the
// service manages, a clamped warmup) and the clamp in the trainer's log, and relative paths landing
// under the worker's roots.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/local_cluster.h"
#include "tests/integration/svg_check.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A one-rank job of three short steps on the debug model, plus `extra`.
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

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

int Occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Three finished jobs for the suite: two alike (same seed) and one with another seed.
class UxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster(2);
    const std::string config = ConfigPath("debug_model.toml");
    a_ = Named("ux-a", Small({}));
    b_ = Named("ux-b", Small({}));
    c_ = Named("ux-seed7", Small({"training.seed=7"}));
    for (const std::string& id : {a_, b_, c_}) {
      EXPECT_TRUE(cluster_->WaitForJob(id, IsFinal, 120, id + "'s end")) << cluster_->Logs();
      EXPECT_EQ(cluster_->Get(id).state(), v1::JOB_STATE_SUCCEEDED) << cluster_->Logs();
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // Submits the debug config with `overrides` as a job named `name`; its id.
  static std::string Named(const std::string& name, const std::vector<std::string>& overrides) {
    v1::SubmitJobRequest request;
    request.set_config_toml(ReadFile(ConfigPath("debug_model.toml")));
    for (const std::string& o : overrides) request.add_overrides(o);
    request.set_name(name);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::Job job;
    const grpc::Status status = cluster_->stub().SubmitJob(&context, request, &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return job.job_id();
  }

  // ringctl ARGS --coordinator <the cluster>.
  static CommandResult Ringctl(std::vector<std::string> args) {
    args.insert(args.begin(), BinDir() + "/ringctl");
    args.push_back("--coordinator=" + cluster_->address());
    return RunCommand(args);
  }

  static LocalCluster* cluster_;
  static std::string a_, b_, c_;
};

LocalCluster* UxTest::cluster_ = nullptr;
std::string UxTest::a_, UxTest::b_, UxTest::c_;

TEST_F(UxTest, CompareEqualAndUnequalJobs) {
  const CommandResult equal = Ringctl({"compare", a_, b_, "--assert-equal"});
  EXPECT_EQ(equal.exit_code, 0) << equal.output;
  EXPECT_THAT(equal.output, HasSubstr("baseline: " + a_ + " (ux-a), SUCCEEDED, 3 steps"));
  EXPECT_THAT(equal.output, HasSubstr("Baseline Loss"));
  EXPECT_THAT(equal.output, HasSubstr("Verdict: PASS: all 3 steps bitwise equal"));

  const CommandResult unequal = Ringctl({"compare", a_, c_, "--assert-equal"});
  EXPECT_EQ(unequal.exit_code, 1) << unequal.output;
  EXPECT_THAT(unequal.output, HasSubstr("Verdict: FAIL: 3 of 3 steps not bitwise equal"));
  EXPECT_EQ(Occurrences(unequal.output, "  FAIL\n"), 3) << "each step's row is marked";

  // The same pair within a loose tolerance, and as JSON.
  const CommandResult loose = Ringctl({"compare", a_, c_, "--atol", "100", "--output", "json"});
  EXPECT_EQ(loose.exit_code, 0) << loose.output;
  const nlohmann::json j = nlohmann::json::parse(loose.output);
  EXPECT_EQ(j["baseline"], a_);
  EXPECT_EQ(j["test"], c_);
  EXPECT_EQ(j["passed"], true);
  EXPECT_EQ(j["per_step"].size(), 3u);

  // An unknown job is the coordinator refusing (1); bad flags are usage (2).
  const CommandResult unknown = Ringctl({"compare", a_, "job-999999"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("job-999999"));
  EXPECT_EQ(Ringctl({"compare", a_, b_, "--assert-equal", "--atol", "1"}).exit_code, 2);
}

TEST_F(UxTest, PlotOfTwoJobsHasBothSeriesAndALegend) {
  TempDir dir;
  const CommandResult plot = Ringctl({"plot", a_, c_, "--out", dir / "two.svg"});
  ASSERT_EQ(plot.exit_code, 0) << plot.output;
  EXPECT_THAT(plot.output, HasSubstr("(6 steps of 2 jobs)"));
  const std::string svg = ReadFile(dir / "two.svg");
  EXPECT_EQ(CountPoints(dir / "two.svg"), 6);
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"loss series-0\""), 1);
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"loss series-1\""), 1);
  EXPECT_EQ(Occurrences(svg, "class=\"loss-point series-1\""), 3);
  EXPECT_THAT(svg, HasSubstr("<g class=\"legend\""));
  EXPECT_THAT(svg, HasSubstr(">" + a_ + " (ux-a) — SUCCEEDED, steps 1–3 of 3"));
  EXPECT_THAT(svg, HasSubstr(">" + c_ + " (ux-seed7) — SUCCEEDED"));
  // One job still gets the single plot with its learning rate.
  ASSERT_EQ(Ringctl({"plot", a_, "--out", dir / "one.svg"}).exit_code, 0);
  EXPECT_THAT(ReadFile(dir / "one.svg"), HasSubstr("<polyline class=\"lr\""));
}

TEST_F(UxTest, ExportWritesTheRecordsWatchShows) {
  TempDir dir;
  const CommandResult exported = Ringctl({"export", a_, "--out", dir / "a.jsonl"});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_THAT(exported.output, HasSubstr("(3 steps of " + a_ + ", SUCCEEDED)"));
  const std::vector<std::string> records = Lines(ReadFile(dir / "a.jsonl"));
  ASSERT_EQ(records.size(), 3u);

  // watch --output json: each step's "record" is the same text, byte for byte.
  const CommandResult watch = Ringctl({"watch", a_, "--from-step", "0", "--output", "json"});
  ASSERT_EQ(watch.exit_code, 0) << watch.output;
  std::vector<std::string> watched;
  for (const std::string& line : Lines(watch.output)) {
    const size_t at = line.find(",\"record\":");
    if (line.find("\"event\":\"step\"") == std::string::npos || at == std::string::npos) continue;
    watched.push_back(line.substr(at + 10, line.size() - (at + 10) - 1));
  }
  EXPECT_EQ(watched, records);
  // And the store's, as the stream carries them; the JSON objects the trainer writes.
  std::vector<std::string> stored;
  for (const v1::JobEvent& event : cluster_->Watch(a_, 0, 30)) {
    if (event.has_step()) {
      stored.emplace_back(absl::StripAsciiWhitespace(event.step().record_json()));
    }
  }
  EXPECT_EQ(stored, records);
  for (size_t i = 0; i < records.size(); ++i) {
    const nlohmann::json record = nlohmann::json::parse(records[i]);
    EXPECT_EQ(record["step"], i + 1);
    for (const char* key : {"loss", "grad_norm", "lr", "tokens_per_second", "ranks"}) {
      EXPECT_TRUE(record.contains(key)) << key << " in " << records[i];
    }
  }
  // To stdout without --out.
  const CommandResult to_stdout = Ringctl({"export", a_, "--from-step", "3"});
  ASSERT_EQ(to_stdout.exit_code, 0);
  EXPECT_EQ(to_stdout.output, records[2] + "\n");
  // --output: JSON goes on (it is JSONL) with a note; another format is refused; both say why.
  const CommandResult json = Ringctl({"export", a_, "--from-step", "3", "--output", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr("export always writes JSONL, one JSON record per line"));
  EXPECT_THAT(json.output, HasSubstr(records[2] + "\n"));
  const CommandResult table = Ringctl({"export", a_, "--output", "table"});
  EXPECT_EQ(table.exit_code, 2) << table.output;
  EXPECT_THAT(table.output, HasSubstr("--output table is not a format it writes"));
}

TEST_F(UxTest, CoordinatorFlagBeforeTheSubcommandAndFromTheEnvironment) {
  const std::string ringctl = BinDir() + "/ringctl";
  const std::string address = "RINGTRAIN_COORDINATOR=" + cluster_->address();
  const CommandResult before = RunCommand({ringctl, "--coordinator", cluster_->address(), "list"});
  EXPECT_EQ(before.exit_code, 0) << before.output;
  EXPECT_THAT(before.output, HasSubstr(a_));

  const CommandResult env = RunCommand({"/usr/bin/env", address, ringctl, "get", a_});
  EXPECT_EQ(env.exit_code, 0) << env.output;
  EXPECT_THAT(env.output, HasSubstr("SUCCEEDED"));

  // The flag wins over the variable, before or after the subcommand.
  const std::string nowhere = "RINGTRAIN_COORDINATOR=127.0.0.1:1";
  EXPECT_EQ(
      RunCommand({"/usr/bin/env", nowhere, ringctl, "list", "--coordinator", cluster_->address()})
          .exit_code,
      0);
  EXPECT_EQ(
      RunCommand({"/usr/bin/env", nowhere, ringctl, "--coordinator", cluster_->address(), "list"})
          .exit_code,
      0);
  // The variable alone is used: nothing listens there.
  const CommandResult unreachable = RunCommand({"/usr/bin/env", nowhere, ringctl, "list"});
  EXPECT_EQ(unreachable.exit_code, 3) << unreachable.output;
  EXPECT_THAT(unreachable.output, HasSubstr("127.0.0.1:1"));
}

TEST_F(UxTest, ListFiltersByStateAndName) {
  const CommandResult ours = Ringctl({"list", "--state", "succeeded", "--name", "ux-"});
  ASSERT_EQ(ours.exit_code, 0) << ours.output;
  for (const std::string& id : {a_, b_, c_}) EXPECT_THAT(ours.output, HasSubstr(id));

  const CommandResult seed = Ringctl({"list", "--name", "seed7", "--output", "json"});
  ASSERT_EQ(seed.exit_code, 0) << seed.output;
  const nlohmann::json jobs = nlohmann::json::parse(seed.output);
  ASSERT_EQ(jobs.size(), 1u) << seed.output;
  EXPECT_EQ(jobs[0]["job_id"], c_);

  const CommandResult none = Ringctl({"list", "--state", "FAILED,cancelled", "--name", "ux-"});
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_THAT(none.output, HasSubstr("no jobs that match --state/--name"));

  const CommandResult bad = Ringctl({"list", "--state", "done"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--state done: not a job state"));
}

// A job submitted with a key the service manages and the debug config's warmup (10 steps) on a
// 2-step run, reading a relative dataset path and checkpointing to the config's relative folder.
TEST_F(UxTest, SubmitWarnsAndRelativePathsLandUnderTheRoots) {
  std::string text;
  while (text.size() < 20000) text += "the quick brown fox jumps over the lazy dog. ";
  fs::create_directories(cluster_->data_root() + "/corpus");
  WriteFile(cluster_->data_root() + "/corpus/fox.txt", text);

  const CommandResult submit =
      Ringctl({"submit", ConfigPath("debug_model.toml"), "--name", "ux-warn",
               "--metrics.jsonl=mine.jsonl", "--training.steps=2", "--training.seq_len=32",
               "--training.local_batch_size=2", "--parallelism.data_parallel_replicate_degree=1",
               "--training.dataset=text", "--training.dataset_path=corpus/fox.txt",
               "--checkpoint.enable=true", "--checkpoint.interval=2", "--follow"});
  EXPECT_EQ(submit.exit_code, 0) << submit.output << cluster_->Logs();
  EXPECT_THAT(submit.output, HasSubstr("ringctl submit: warning: metrics.jsonl = \"mine.jsonl\" is "
                                       "ignored"));
  EXPECT_THAT(submit.output, HasSubstr("ringctl export JOB"));
  EXPECT_THAT(submit.output, HasSubstr("ringctl submit: warning: lr_scheduler.warmup_steps = 10 is "
                                       "more than training.steps = 2: clamped to 2"));

  // The job's id, from "submitted job-NNNNNN (...)".
  const size_t at = submit.output.find("submitted ");
  ASSERT_NE(at, std::string::npos) << submit.output;
  const std::string id = submit.output.substr(at + 10, submit.output.find(' ', at + 10) - at - 10);
  int found_log = 0, found_checkpoint = 0;
  for (int w = 0; w < 2; ++w) {
    const std::string log = cluster_->work_dir(w) + "/" + id + "/rank-0/rank.log";
    if (fs::exists(log)) {
      ++found_log;
      EXPECT_THAT(ReadFile(log), HasSubstr("lr_scheduler.warmup_steps = 10 is more than "
                                           "training.steps = 2: clamped to 2"));
    }
    // checkpoint.folder = "outputs/checkpoints" (the config's): under the job's own folder.
    found_checkpoint += fs::is_directory(cluster_->work_dir(w) + "/checkpoints/" + id +
                                         "/outputs/checkpoints/step-2");
  }
  EXPECT_EQ(found_log, 1);
  EXPECT_EQ(found_checkpoint, 1) << cluster_->Logs();
  EXPECT_FALSE(fs::exists("mine.jsonl"));
  EXPECT_FALSE(fs::exists("outputs/checkpoints/step-2")) << "nothing relative to the cwd";
}

}  // namespace
}  // namespace ringtrain::testing
