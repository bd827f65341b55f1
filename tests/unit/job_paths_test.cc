// Path confinement: the root-free checks the coordinator makes at submit (config_paths.h) and the
// worker's resolution under its roots (worker/agent/job_paths.h), on a real folder tree with
// symlinks.
#include "worker/agent/job_paths.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "common/config/config_paths.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using ::ringtrain::testing::TempDir;

JobConfig Config(const std::vector<std::string>& overrides) {
  absl::StatusOr<JobConfig> config = ParseJobConfig("", overrides, "test");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : JobConfig{};
}

TEST(ConfigPathsTest, ListsOnlyThePathsTheJobUses) {
  EXPECT_TRUE(ConfigPaths(Config({"training.dataset_path=unused.txt"})).empty());  // synthetic
  const auto paths =
      ConfigPaths(Config({"training.dataset=text", "training.dataset_path=a.txt",
                          "checkpoint.enable=true", "checkpoint.folder=ck",
                          "checkpoint.initial_load_path=w.pt", "validation.dataset_path=v.txt"}));
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0].key, "training.dataset_path");
  EXPECT_EQ(paths[1].key, "checkpoint.initial_load_path");
  EXPECT_EQ(paths[2].key, "checkpoint.folder");
  EXPECT_EQ(paths[2].root, PathRoot::kCheckpoint);
  const auto eval =
      ConfigPaths(Config({"job.mode=eval", "training.dataset=text", "training.dataset_path=a.txt",
                          "validation.dataset_path=v.txt", "checkpoint.enable=true"}));
  ASSERT_EQ(eval.size(), 1u);
  EXPECT_EQ(eval[0].key, "validation.dataset_path");
}

// A training job that validates reads the validation data (once, when it is the training data's
// path); TensorBoard's folder is the job's own, like its checkpoints.
TEST(ConfigPathsTest, ValidationDataAndTheTensorBoardFolder) {
  const auto own = ConfigPaths(
      Config({"training.dataset=bin", "training.dataset_path=a.bin", "validation.enable=true",
              "validation.dataset_path=v.bin", "metrics.enable_tensorboard=true"}));
  ASSERT_EQ(own.size(), 3u);
  EXPECT_EQ(own[1].key, "validation.dataset_path");
  EXPECT_EQ(own[2].key, "metrics.save_tb_folder");
  EXPECT_EQ(own[2].value, "tb");
  EXPECT_EQ(own[2].root, PathRoot::kCheckpoint);
  const auto same = ConfigPaths(
      Config({"training.dataset=bin", "training.dataset_path=a.bin", "validation.enable=true"}));
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].key, "training.dataset_path");
  EXPECT_EQ(ConfigPaths(Config({"training.dataset=bin", "training.dataset_path=a.bin",
                                "validation.dataset_path=v.bin"}))
                .size(),
            1u);  // not validating: not read
}

// A Hugging Face folder is read like the data: under the worker's --data-root.
TEST(ConfigPathsTest, AHuggingFaceFolderIsData) {
  const auto paths = ConfigPaths(
      Config({"model.hf_assets_path=models/llama", "checkpoint.initial_load_path=models/llama",
              "checkpoint.initial_load_in_hf=true"}));
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0].key, "model.hf_assets_path");
  EXPECT_EQ(paths[0].value, "models/llama");
  EXPECT_EQ(paths[0].root, PathRoot::kData);
  EXPECT_EQ(paths[1].key, "checkpoint.initial_load_path");
}

TEST(ConfigPathsTest, TokenizerOnlyWhenATextDatasetIsRead) {
  const auto text = ConfigPaths(Config({"training.dataset=text", "training.dataset_path=a.txt",
                                        "training.tokenizer_path=tok/tokenizer.json"}));
  ASSERT_EQ(text.size(), 2u);
  EXPECT_EQ(text[1].key, "training.tokenizer_path");
  EXPECT_EQ(text[1].value, "tok/tokenizer.json");
  EXPECT_EQ(text[1].root, PathRoot::kData);
  EXPECT_EQ(ConfigPaths(Config({"training.dataset=bin", "training.dataset_path=a.bin",
                                "training.tokenizer_path=t.json"}))
                .size(),
            1u);
  // eval reads the validation data: text there needs the tokenizer, bin there does not.
  EXPECT_EQ(ConfigPaths(Config({"job.mode=eval", "training.dataset=bin",
                                "training.dataset_path=a.bin", "validation.dataset=text",
                                "validation.dataset_path=v.txt", "training.tokenizer_path=t.json"}))
                .size(),
            2u);
  EXPECT_EQ(ConfigPaths(Config({"job.mode=eval", "training.dataset=text",
                                "training.dataset_path=a.txt", "validation.dataset=bin",
                                "validation.dataset_path=v.bin", "training.tokenizer_path=t.json"}))
                .size(),
            1u);
  const absl::Status climbs =
      CheckConfigPaths(Config({"training.dataset=text", "training.dataset_path=a.txt",
                               "training.tokenizer_path=../t.json"}));
  EXPECT_TRUE(absl::StrContains(climbs.message(), "training.tokenizer_path")) << climbs;
}

TEST(JobIdTest, OnlyIdsThatNameOneFolderPass) {
  for (const char* id : {"job-000001", "a", "A.b_c-9", "..x", "x.."}) {
    EXPECT_TRUE(CheckJobId(id).ok()) << id;
  }
  for (const char* id : {"", ".", "..", "a/b", "../x", "/abs", "a\\b", "a b", "a\nb", "\xc3\xa9"}) {
    const absl::Status status = CheckJobId(id);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_TRUE(absl::StrContains(status.message(), "letters, digits, '-', '_' or '.'")) << status;
  }
}

TEST(ConfigPathsTest, RefusesWhatCanBeToldWithoutRoots) {
  EXPECT_TRUE(CheckPathText("k", "a/../b").ok());
  EXPECT_TRUE(CheckPathText("k", "./a/b/..").ok());
  EXPECT_TRUE(CheckPathText("k", "/srv/data/x").ok());  // only a worker knows its roots
  for (const std::string bad : {"../x", "a/../../x", "..", "a/b/../../../c"}) {
    const absl::Status s = CheckPathText("training.dataset_path", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(s.message(), "training.dataset_path")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "'..' climbs out")) << s;
  }
  const absl::Status control = CheckPathText("checkpoint.folder", std::string("a\x1b[2Jb\0c", 8));
  EXPECT_EQ(control.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(control.message(), "control characters")) << control;
  EXPECT_FALSE(absl::StrContains(control.message(), "\x1b")) << "the value is shown escaped";

  const absl::Status all =
      CheckConfigPaths(Config({"training.dataset=bin", "training.dataset_path=../a",
                               "checkpoint.enable=true", "checkpoint.folder=x/../../y"}));
  EXPECT_TRUE(absl::StrContains(all.message(), "training.dataset_path")) << all;
  EXPECT_TRUE(absl::StrContains(all.message(), "checkpoint.folder")) << all;

  // A checkpoint folder lies in the job's own folder, which no absolute path can name.
  const absl::Status absolute =
      CheckConfigPaths(Config({"training.dataset=bin", "training.dataset_path=data/a.bin",
                               "checkpoint.enable=true", "checkpoint.folder=/srv/ckpt"}));
  EXPECT_EQ(absolute.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(absolute.message(),
                                "checkpoint.folder = \"/srv/ckpt\": an "
                                "absolute path"))
      << absolute;
  EXPECT_FALSE(absl::StrContains(absolute.message(), "training.dataset_path")) << absolute;
  EXPECT_TRUE(
      CheckConfigPaths(Config({"checkpoint.enable=false", "checkpoint.folder=/srv/ckpt"})).ok());
}

TEST(ConfigPathsTest, AbsoluteDataPathsAreRefusedNamingTheKeyAndTheRelativeForm) {
  // Each worker has its own --data-root: only a relative path names the same file on each.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"training.dataset=bin", "training.dataset_path=/srv/data/a.bin"}, "training.dataset_path"},
      {{"validation.enable=true", "validation.dataset=bin", "validation.dataset_path=/v/val.bin"},
       "validation.dataset_path"},
      {{"training.dataset=text", "training.dataset_path=c.txt",
        "training.tokenizer_path=/t/tok.json"},
       "training.tokenizer_path"},
      {{"model.hf_assets_path=/models/Llama-3.2-1B"}, "model.hf_assets_path"},
      {{"checkpoint.initial_load_path=/w/init.pt"}, "checkpoint.initial_load_path"},
  };
  for (const auto& [overrides, key] : cases) {
    const absl::Status s = CheckConfigPaths(Config(overrides));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_TRUE(absl::StrContains(s.message(), key + " = \"/")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "an absolute path")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "relative to it")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "--data-root")) << s;
  }
  const absl::Status dataset = CheckConfigPaths(Config(cases[0].first));
  EXPECT_TRUE(absl::StrContains(dataset.message(), "e.g. \"a.bin\" for DIR/a.bin")) << dataset;
  // The same keys, relative, pass; a key the job does not read is not looked at.
  EXPECT_TRUE(CheckConfigPaths(Config({"training.dataset=bin", "training.dataset_path=srv/a.bin",
                                       "checkpoint.initial_load_path=w/init.pt"}))
                  .ok());
  EXPECT_TRUE(
      CheckConfigPaths(Config({"training.dataset=synthetic", "training.dataset_path=/x"})).ok());
}

class JobPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = *CanonicalRoot("--data-root", dir_ / "data", /*create=*/true);
    outside_ = dir_ / "outside";
    fs::create_directories(data_ + "/sub");
    fs::create_directories(outside_);
    std::ofstream(data_ + "/sub/a.txt") << "inside";
    std::ofstream(outside_ + "/secret.txt") << "TOPSECRET";
    fs::create_symlink(outside_ + "/secret.txt", data_ + "/leak.txt");
    fs::create_symlink(outside_, data_ + "/leakdir");
    fs::create_symlink(data_ + "/sub", data_ + "/alias");
    fs::create_symlink(data_ + "/nowhere", data_ + "/dangling");
  }

  absl::StatusOr<std::string> Data(const std::string& value) {
    return ResolveUnderRoot("training.dataset_path", value, data_, "--data-root");
  }

  TempDir dir_;
  std::string data_;
  std::string outside_;
};

TEST_F(JobPathsTest, RelativeAndAbsoluteInsideTheRootResolve) {
  EXPECT_EQ(*Data("sub/a.txt"), data_ + "/sub/a.txt");
  EXPECT_EQ(*Data("./sub/../sub/a.txt"), data_ + "/sub/a.txt");
  EXPECT_EQ(*Data(data_ + "/sub/a.txt"), data_ + "/sub/a.txt");
  EXPECT_EQ(*Data("alias/a.txt"), data_ + "/sub/a.txt");  // a symlink that stays inside
  EXPECT_EQ(*Data("sub/not-yet/x"), data_ + "/sub/not-yet/x");
  EXPECT_EQ(*Data("sub/"), data_ + "/sub");
}

TEST_F(JobPathsTest, EscapesAreRefusedNamingKeyValueAndRoot) {
  for (const std::string& bad : {outside_ + "/secret.txt", std::string("../outside/secret.txt"),
                                 data_ + "/../outside/secret.txt", std::string("leak.txt"),
                                 std::string("leakdir/secret.txt"), std::string("leakdir/new/file"),
                                 std::string("dangling"), std::string("/")}) {
    const absl::StatusOr<std::string> r = Data(bad);
    ASSERT_FALSE(r.ok()) << bad << " resolved to " << *r;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "training.dataset_path = \"" + bad + "\""))
        << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "--data-root " + data_)) << r.status();
    EXPECT_FALSE(absl::StrContains(r.status().message(), "TOPSECRET")) << "no file contents";
  }
}

TEST_F(JobPathsTest, NoDataRootRefusesEveryFileNamingTheFlag) {
  const absl::StatusOr<std::string> r =
      ResolveUnderRoot("checkpoint.initial_load_path", "w.pt", "", "--data-root");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "checkpoint.initial_load_path"))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "start ringtrain-worker with --data-root"))
      << r.status();
}

TEST_F(JobPathsTest, CheckpointFoldersArePerJob) {
  const std::string ckpt = *CanonicalRoot("--checkpoint-root", dir_ / "ckpt", true);
  const JobRoots roots{data_, ckpt};
  const JobConfig config = Config({"training.dataset=text", "training.dataset_path=sub/a.txt",
                                   "checkpoint.enable=true", "checkpoint.folder=outputs/ck"});
  const auto a = ResolveJobPaths(config, roots, "job-000001");
  const auto b = ResolveJobPaths(config, roots, "job-000002");
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(*a,
            (std::vector<std::string>{"--training.dataset_path=" + data_ + "/sub/a.txt",
                                      "--checkpoint.folder=" + ckpt + "/job-000001/outputs/ck"}));
  EXPECT_EQ((*b)[1], "--checkpoint.folder=" + ckpt + "/job-000002/outputs/ck");
  EXPECT_TRUE(fs::is_directory(ckpt + "/job-000001"));
  EXPECT_FALSE(fs::exists(ckpt + "/job-000001/outputs")) << "the trainer creates the folder";

  // Another job's folder, or the data root, is not this job's.
  for (const std::string& bad : {ckpt + "/job-000002/outputs/ck", data_ + "/ck"}) {
    const auto r = ResolveJobPaths(Config({"checkpoint.enable=true", "checkpoint.folder=" + bad}),
                                   roots, "job-000001");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "checkpoint.folder")) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), ckpt + "/job-000001")) << r.status();
  }
  // The first refused path stops everything: no job folder is made for it.
  const auto refused = ResolveJobPaths(
      Config({"training.dataset=text", "training.dataset_path=leak.txt", "checkpoint.enable=true"}),
      roots, "job-000003");
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(fs::exists(ckpt + "/job-000003"));
}

TEST_F(JobPathsTest, RootsMustExistOrBeCreatable) {
  EXPECT_EQ(CanonicalRoot("--data-root", dir_ / "missing", false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CanonicalRoot("--data-root", data_ + "/sub/a.txt", false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*CanonicalRoot("--data-root", data_ + "/alias", false), data_ + "/sub");
}

}  // namespace
}  // namespace ringtrain

namespace ringtrain {
namespace {

// Another job's checkpoint (Assignment.load): its complete step folder under the worker's own
// --checkpoint-root, as the trainer's overrides; refused when it is not there, not complete, or
// its folder leaves the source job's.
class CheckpointLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::canonical(dir_.path()).string();
    fs::create_directories(root_ + "/job-000001/ck/step-4");
    fs::create_directories(root_ + "/job-000001/ck/step-8");
    std::ofstream(root_ + "/job-000001/ck/step-4/COMPLETE").put('\n');
  }
  TempDir dir_;
  std::string root_;
};

TEST_F(CheckpointLoadTest, ACompleteStepBecomesTheTrainersInitialLoad) {
  absl::StatusOr<std::vector<std::string>> overrides =
      ResolveCheckpointLoad("job-000001", "ck", 4, /*model_only=*/false, root_);
  ASSERT_TRUE(overrides.ok()) << overrides.status();
  ASSERT_EQ(overrides->size(), 3u);
  EXPECT_EQ((*overrides)[0], "--checkpoint.initial_load_path=" + root_ + "/job-000001/ck/step-4");
  EXPECT_EQ((*overrides)[1], "--checkpoint.initial_load_in_hf=false");
  EXPECT_EQ((*overrides)[2], "--checkpoint.initial_load_model_only=false");
  overrides = ResolveCheckpointLoad("job-000001", "ck", 4, /*model_only=*/true, root_);
  ASSERT_TRUE(overrides.ok()) << overrides.status();
  EXPECT_EQ((*overrides)[2], "--checkpoint.initial_load_model_only=true");
}

TEST_F(CheckpointLoadTest, RefusesWhatIsNotACompleteStepHere) {
  const absl::Status incomplete =
      ResolveCheckpointLoad("job-000001", "ck", 8, true, root_).status();
  EXPECT_EQ(incomplete.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(incomplete.message(), "not a complete checkpoint"))
      << incomplete.message();
  const absl::Status elsewhere = ResolveCheckpointLoad("job-000002", "ck", 4, true, root_).status();
  EXPECT_EQ(elsewhere.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(elsewhere.message(), "share one --checkpoint-root"))
      << elsewhere.message();
  EXPECT_EQ(ResolveCheckpointLoad("job-000001", "../../etc", 4, true, root_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveCheckpointLoad("..", "ck", 4, true, root_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain
