// Checkpoint folders: a saved step loads back bitwise (model, optimizer, train state, RNG state),
// only complete step-N folders count, keep_latest_k prunes the oldest, a damaged newest checkpoint
// is skipped for the one before it, and model weights load by name with every mismatch listed and
// the model left unchanged.
#include "worker/engine/checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

Checkpoint MakeCheckpoint(int64_t step) {
  torch::manual_seed(step);
  Checkpoint c;
  c.model = {{"tok_embeddings.weight", torch::randn({4, 3})}, {"norm.weight", torch::randn({3})}};
  c.optimizer = {{"step", torch::tensor({step})}, {"exp_avg.norm.weight", torch::randn({3})}};
  c.train_state.step = step;
  c.train_state.global_sample = step * 8;
  c.train_state.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  return c;
}

void ExpectSameDict(const StateDict& a, const StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

TEST(CheckpointFolderTest, SaveThenLoadIsBitwise) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", /*keep_latest_k=*/0);
  const Checkpoint saved = MakeCheckpoint(5);
  ASSERT_TRUE(folder.Save(saved, "[job]\nmode = \"train\"\n").ok());
  const auto latest = folder.LatestStep();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(*latest, std::optional<int64_t>(5));
  const auto loaded = folder.Load(5);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameDict(loaded->model, saved.model);
  ExpectSameDict(loaded->optimizer, saved.optimizer);
  EXPECT_EQ(loaded->train_state.step, 5);
  EXPECT_EQ(loaded->train_state.global_sample, 40);
  EXPECT_TRUE(torch::equal(loaded->train_state.rng_state, saved.train_state.rng_state));
  EXPECT_TRUE(fs::exists(folder.StepPath(5) + "/config.toml"));
}

TEST(CheckpointFolderTest, OnlyCompleteStepsCountAndOldOnesArePruned) {
  testing::TempDir dir;
  CheckpointFolder empty(dir / "none", 0);
  const auto nothing = empty.LatestStep();
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->has_value());

  CheckpointFolder folder(dir / "ckpt", /*keep_latest_k=*/2);
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(folder.Save(MakeCheckpoint(step), "").ok());
  EXPECT_FALSE(fs::exists(folder.StepPath(1)));
  EXPECT_TRUE(fs::exists(folder.StepPath(2)));
  EXPECT_TRUE(fs::exists(folder.StepPath(3)));
  // A newer folder without train_state.json (an interrupted copy) and a leftover temporary are
  // not checkpoints.
  fs::create_directories(folder.StepPath(9));
  fs::create_directories(dir / "ckpt/.tmp-step-10-1");
  const auto latest = folder.LatestStep();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, std::optional<int64_t>(3));
}

TEST(CheckpointFolderTest, CorruptTrainStateIsDataLoss) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  ASSERT_TRUE(folder.Save(MakeCheckpoint(4), "").ok());
  std::ofstream(folder.StepPath(4) + "/train_state.json") << "{\"step\": ";
  const auto loaded = folder.Load(4);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("train_state.json"));
}

// Every bad train_state.json is DATA_LOSS naming the file and what is wrong, never a throw: a
// field of the wrong type, a negative count, bad hex, and an RNG state of the wrong size (which
// the generator's set_state would reject with an exception).
TEST(CheckpointFolderTest, BadTrainStatesAreDataLossNamingTheFile) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  ASSERT_TRUE(folder.Save(MakeCheckpoint(4), "").ok());
  const std::string path = folder.StepPath(4) + "/train_state.json";
  const std::string rng = "\"torch_rng_state\": \"";
  const struct {
    std::string text, reason;
  } cases[] = {
      {"[1, 2]", "not a JSON object"},
      {"{\"step\": \"4\", \"global_sample\": 32, " + rng + "00\"}", "\"step\" is not a count"},
      {"{\"step\": 4, \"global_sample\": -1, " + rng + "00\"}", "\"global_sample\" is not a count"},
      {"{\"step\": 4, \"global_sample\": 32, \"torch_rng_state\": 7}", "not a hex string"},
      {"{\"step\": 4, \"global_sample\": 32, " + rng + "0g\"}", "bad hex digit"},
      {"{\"step\": 4, \"global_sample\": 32, " + rng + "abc\"}", "odd-length hex"},
      {"{\"step\": 4, \"global_sample\": 32, " + rng + "0011\"}",
       "\"torch_rng_state\" holds 2 bytes; torch's CPU generator state is"},
  };
  for (const auto& c : cases) {
    std::ofstream(path, std::ios::trunc) << c.text;
    const auto loaded = folder.Load(4);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << c.text;
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(path)) << c.text;
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(c.reason)) << c.text;
  }
}

TEST(CheckpointFolderTest, TruncatedStateDictIsDataLossNamingTheFile) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  ASSERT_TRUE(folder.Save(MakeCheckpoint(4), "").ok());
  for (const char* name : {"model.pt", "optimizer.pt"}) {
    ASSERT_TRUE(folder.Save(MakeCheckpoint(4), "").ok());
    const std::string path = folder.StepPath(4) + "/" + name;
    fs::resize_file(path, fs::file_size(path) / 2);
    const auto loaded = folder.Load(4);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(path)) << name;
  }
}

// A damaged newest checkpoint gives way to the one before it, with a line naming the file; when
// every one is damaged the load is DATA_LOSS naming the folder; an empty folder is no checkpoint.
TEST(CheckpointFolderTest, ADamagedNewestCheckpointIsSkippedForTheOneBefore) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  std::vector<std::string> skipped;
  absl::StatusOr<std::optional<Checkpoint>> none = folder.LoadNewestUsable(&skipped);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  for (int64_t step : {2, 4, 6}) ASSERT_TRUE(folder.Save(MakeCheckpoint(step), "").ok());
  // step-6: a truncated optimizer.pt; step-4: a missing model.pt.
  const std::string truncated = folder.StepPath(6) + "/optimizer.pt";
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  fs::remove(folder.StepPath(4) + "/model.pt");
  absl::StatusOr<std::optional<Checkpoint>> loaded = folder.LoadNewestUsable(&skipped);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->train_state.step, 2);
  ExpectSameDict((*loaded)->model, MakeCheckpoint(2).model);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_THAT(skipped[0], HasSubstr(truncated));
  EXPECT_THAT(skipped[1], HasSubstr(folder.StepPath(4) + "/model.pt"));

  // step-2's train_state.json is not JSON: nothing is usable.
  std::ofstream(folder.StepPath(2) + "/train_state.json") << "{";
  skipped.clear();
  loaded = folder.LoadNewestUsable(&skipped);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("no usable checkpoint in '" + (dir / "ckpt") + "'"));
  EXPECT_EQ(skipped.size(), 3u);
}

struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    w = register_parameter("w", torch::ones({2, 3}));
    b = register_parameter("b", torch::zeros({3}));
  }
  at::Tensor w, b;
};

TEST(ModelWeightsTest, LoadsByNameAndListsEveryMismatch) {
  TinyImpl model;
  const StateDict dict = ModelStateDict(model);
  ASSERT_EQ(dict.size(), 2u);
  EXPECT_EQ(dict[0].first, "w");
  EXPECT_EQ(dict[1].first, "b");

  const StateDict good = {{"b", torch::full({3}, 2.0)},
                          {"w", torch::full({2, 3}, 3.0, torch::kBFloat16)}};
  ASSERT_TRUE(LoadModelWeights(model, good, "good.pt").ok());
  EXPECT_TRUE(torch::equal(model.w, torch::full({2, 3}, 3.0)));  // converted from bfloat16
  EXPECT_TRUE(torch::equal(model.b, torch::full({3}, 2.0)));

  const StateDict bad = {{"w", torch::zeros({3, 2})}, {"extra", torch::zeros({1})}};
  const absl::Status status = LoadModelWeights(model, bad, "bad.pt");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("'bad.pt'"));
  EXPECT_THAT(message, HasSubstr("missing: b"));
  EXPECT_THAT(message, HasSubstr("unexpected: extra"));
  EXPECT_THAT(message, HasSubstr("wrong shape: w"));
  EXPECT_TRUE(torch::equal(model.w, torch::full({2, 3}, 3.0))) << "the model must be unchanged";
}

}  // namespace
}  // namespace ringtrain
