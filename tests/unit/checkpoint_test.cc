// Checkpoint folders: a sharded save (parts by several ranks, an index, COMPLETE) opens back
// bitwise and reads only the byte ranges asked for; sync and async writes give the same bytes; only
// complete steps count and keep_latest_k prunes the oldest; a damaged step (truncated part, bad
// index, missing part, bad train_state.json) is DATA_LOSS naming the file and skipped for the one
// before; a legacy model.pt / optimizer.pt step still opens; model weights load by name with every
// mismatch listed and the model left unchanged.
#include "worker/engine/checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "tests/integration/test_util.h"
#include "worker/engine/checkpoint/checkpoint_writer.h"
#include "worker/engine/checkpoint/sharded_checkpoint.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A small training state: "model.w" (4 × 3), "model.b" (5), "optimizer.exp_avg.w" (4 × 3).
StateDict MakeState(int64_t step) {
  torch::manual_seed(step);
  return {{"model.w", torch::randn({4, 3})},
          {"model.b", torch::randn({5})},
          {"optimizer.exp_avg.w", torch::randn({4, 3})}};
}

TrainState MakeTrainState(int64_t step) {
  TrainState t;
  t.step = step;
  t.global_sample = step * 8;
  t.optimizer_step = step;
  t.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  return t;
}

// Rank r of `writers` holds the r-th of `writers` runs of every tensor.
std::vector<StatePiece> PiecesOf(const StateDict& state, int64_t rank, int64_t writers) {
  std::vector<StatePiece> pieces;
  for (const auto& [name, t] : state) {
    const int64_t n = t.numel(), begin = n * rank / writers, end = n * (rank + 1) / writers;
    if (begin == end) continue;
    pieces.push_back(
        StatePiece{name, t.sizes().vec(), begin, end, t.reshape(-1).narrow(0, begin, end - begin)});
  }
  return pieces;
}

// Saves `step` as `writers` ranks would (the others first: rank 0 waits for their parts).
void SaveStep(const CheckpointFolder& folder, int64_t step, int64_t writers, bool async = false) {
  const StateDict state = MakeState(step);
  for (int64_t rank = writers - 1; rank >= 0; --rank) {
    CheckpointWriter writer(
        folder, CheckpointWriterOptions{rank, writers, "test", async, absl::Seconds(10)});
    ASSERT_TRUE(writer.Save(PiecesOf(state, rank, writers), MakeTrainState(step), "[job]\n").ok());
    absl::StatusOr<std::vector<SaveFigures>> done = writer.Finished(/*wait=*/true);
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->size(), 1u);
    EXPECT_EQ((*done)[0].step, step);
  }
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(CheckpointFolderTest, AShardedSaveOpensBackBitwiseAndReadsOnlyWhatIsAsked) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", /*keep_latest_k=*/0);
  SaveStep(folder, 5, /*writers=*/3);
  for (const char* name :
       {"rank-00000.safetensors", "rank-00001.safetensors", "rank-00002.safetensors", "index.json",
        "train_state.json", "config.toml", "COMPLETE"}) {
    EXPECT_TRUE(fs::exists(folder.StepPath(5) + "/" + name)) << name;
  }
  const auto latest = folder.LatestStep();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(*latest, std::optional<int64_t>(5));
  absl::StatusOr<StoredCheckpoint> opened = folder.Open(5);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->train_state.step, 5);
  EXPECT_EQ(opened->train_state.global_sample, 40);
  EXPECT_EQ(opened->train_state.optimizer_step, 5);
  EXPECT_TRUE(torch::equal(opened->train_state.rng_state, MakeTrainState(5).rng_state));
  const StateDict saved = MakeState(5);
  ASSERT_EQ(opened->state->tensors().size(), saved.size());
  for (const auto& [name, t] : saved) {
    absl::StatusOr<at::Tensor> back = ReadWhole(*opened->state, name);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(torch::equal(*back, t)) << name;
  }
  // Elements 3..10 of w span all three ranks' parts; only those 7 floats are read.
  auto* reader = dynamic_cast<ShardedStateReader*>(opened->state.get());
  ASSERT_NE(reader, nullptr);
  const uint64_t before = reader->bytes_read();
  at::Tensor part = at::empty({7});
  ASSERT_TRUE(reader->Read("model.w", 3, 10, part).ok());
  EXPECT_TRUE(torch::equal(part, saved[0].second.reshape(-1).narrow(0, 3, 7)));
  EXPECT_EQ(reader->bytes_read() - before, 7u * 4);
}

TEST(CheckpointFolderTest, AsyncAndSyncSavesWriteTheSameBytes) {
  testing::TempDir dir;
  CheckpointFolder sync_folder(dir / "sync", 0), async_folder(dir / "async", 0);
  SaveStep(sync_folder, 3, 2, /*async=*/false);
  SaveStep(async_folder, 3, 2, /*async=*/true);
  for (const char* name :
       {"rank-00000.safetensors", "rank-00001.safetensors", "index.json", "train_state.json"}) {
    EXPECT_EQ(Bytes(sync_folder.StepPath(3) + "/" + name),
              Bytes(async_folder.StepPath(3) + "/" + name))
        << name;
  }
}

TEST(CheckpointFolderTest, OnlyCompleteStepsCountAndOldOnesArePruned) {
  testing::TempDir dir;
  CheckpointFolder empty(dir / "none", 0);
  const auto nothing = empty.LatestStep();
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->has_value());

  CheckpointFolder folder(dir / "ckpt", /*keep_latest_k=*/2);
  for (int64_t step : {1, 2, 3}) SaveStep(folder, step, 1);
  EXPECT_FALSE(fs::exists(folder.StepPath(1)));
  EXPECT_TRUE(fs::exists(folder.StepPath(2)));
  EXPECT_TRUE(fs::exists(folder.StepPath(3)));
  // A newer step without COMPLETE (killed between the rename and the marker), a bare folder and a
  // save in progress are not checkpoints.
  SaveStep(folder, 9, 1);
  fs::remove(folder.StepPath(9) + "/COMPLETE");
  fs::create_directories(folder.StepPath(10));
  fs::create_directories(folder.TemporaryPath(11, "other"));
  fs::create_directories(folder.TemporaryPath(12, "mine"));
  const auto latest = folder.LatestStep();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, std::optional<int64_t>(3));
  // A new run removes the saves that never completed, except its own.
  folder.RemoveIncomplete("mine");
  EXPECT_FALSE(fs::exists(folder.TemporaryPath(11, "other")));
  EXPECT_TRUE(fs::exists(folder.TemporaryPath(12, "mine")));
}

TEST(CheckpointFolderTest, AMissingPartTimesOutNamingTheRank) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  CheckpointWriter writer(folder,
                          CheckpointWriterOptions{0, 3, "t", false, absl::Milliseconds(50)});
  const absl::StatusOr<double> saved =
      writer.Save(PiecesOf(MakeState(2), 0, 3), MakeTrainState(2), "");
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(saved.status().message()), HasSubstr("rank(s) 1, 2"));
  EXPECT_FALSE(fs::exists(folder.StepPath(2)));
  EXPECT_FALSE(fs::exists(folder.TemporaryPath(2, "t")));
}

// Every bad train_state.json is DATA_LOSS naming the file and what is wrong, never a throw: a
// field of the wrong type, a negative count, bad hex, and an RNG state of the wrong size (which
// the generator's set_state would reject with an exception).
TEST(CheckpointFolderTest, BadTrainStatesAreDataLossNamingTheFile) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  SaveStep(folder, 4, 1);
  const std::string path = folder.StepPath(4) + "/train_state.json";
  const std::string rng = "\"torch_rng_state\": \"";
  const struct {
    std::string text, reason;
  } cases[] = {
      {"{\"step\": ", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {"{\"step\": \"4\", \"global_sample\": 32, " + rng + "00\"}", "\"step\" is not a count"},
      {"{\"step\": 4, \"global_sample\": -1, " + rng + "00\"}", "\"global_sample\" is not a count"},
      {"{\"step\": 4, \"global_sample\": 3, \"optimizer_step\": 1.5, " + rng + "00\"}",
       "\"optimizer_step\" is not a count"},
      {"{\"step\": 4, \"global_sample\": 32, \"torch_rng_state\": 7}", "not a hex string"},
      {"{\"step\": 4, \"global_sample\": 32, " + rng + "0g\"}", "bad hex digit"},
      {"{\"step\": 4, \"global_sample\": 32, " + rng + "abc\"}", "odd-length hex"},
      {"{\"step\": 4, \"global_sample\": 32, " + rng + "0011\"}",
       "\"torch_rng_state\" holds 2 bytes; torch's CPU generator state is"},
  };
  for (const auto& c : cases) {
    std::ofstream(path, std::ios::trunc) << c.text;
    const auto loaded = folder.Open(4);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << c.text;
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(path)) << c.text;
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(c.reason)) << c.text;
  }
}

// A truncated part, a corrupt index and a missing part: each DATA_LOSS naming the file.
TEST(CheckpointFolderTest, DamagedPartsAndIndexesAreDataLossNamingTheFile) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  const std::string step = folder.StepPath(4);
  const struct {
    std::function<void()> damage;
    std::string names;
  } cases[] = {
      {[&] { fs::resize_file(step + "/rank-00001.safetensors", 100); }, "rank-00001.safetensors"},
      {[&] { std::ofstream(step + "/index.json", std::ios::trunc) << "{\"format\": 1"; },
       "index.json"},
      {[&] { fs::remove(step + "/rank-00000.safetensors"); }, "rank-00000.safetensors"},
      {[&] { fs::remove(step + "/index.json"); }, "index.json"},
  };
  for (const auto& c : cases) {
    SaveStep(folder, 4, 2);
    c.damage();
    const auto loaded = folder.Open(4);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << c.names;
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(c.names));
  }
}

// A damaged newest checkpoint gives way to the one before it, with a line naming the file; when
// every one is damaged the load is DATA_LOSS naming the folder; an empty folder is no checkpoint.
TEST(CheckpointFolderTest, ADamagedNewestCheckpointIsSkippedForTheOneBefore) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  std::vector<std::string> skipped;
  absl::StatusOr<std::optional<StoredCheckpoint>> none = folder.OpenNewestUsable(&skipped);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  for (int64_t step : {2, 4, 6}) SaveStep(folder, step, 2);
  // step-6: a truncated part; step-4: a missing part.
  const std::string truncated = folder.StepPath(6) + "/rank-00001.safetensors";
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  fs::remove(folder.StepPath(4) + "/rank-00000.safetensors");
  absl::StatusOr<std::optional<StoredCheckpoint>> loaded = folder.OpenNewestUsable(&skipped);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->train_state.step, 2);
  EXPECT_TRUE(torch::equal(*ReadWhole(*(*loaded)->state, "model.w"), MakeState(2)[0].second));
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_THAT(skipped[0], HasSubstr(truncated));
  EXPECT_THAT(skipped[1], HasSubstr(folder.StepPath(4) + "/rank-00000.safetensors"));

  // step-2's train_state.json is not JSON: nothing is usable.
  std::ofstream(folder.StepPath(2) + "/train_state.json") << "{";
  skipped.clear();
  loaded = folder.OpenNewestUsable(&skipped);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("no usable checkpoint in '" + (dir / "ckpt") + "'"));
  EXPECT_EQ(skipped.size(), 3u);
}

// A step saved before sharded checkpoints (model.pt, optimizer.pt, train_state.json) still opens,
// under the same names, with AdamW's step from optimizer.pt.
TEST(CheckpointFolderTest, ALegacyStepOpens) {
  testing::TempDir dir;
  CheckpointFolder folder(dir / "ckpt", 0);
  const std::string step = folder.StepPath(7);
  fs::create_directories(step);
  const at::Tensor w = torch::randn({4, 3}), m = torch::randn({4, 3});
  ASSERT_TRUE(WriteStateDict(step + "/model.pt", {{"w", w}}).ok());
  ASSERT_TRUE(WriteStateDict(step + "/optimizer.pt",
                             {{"step", torch::tensor(int64_t{7})}, {"exp_avg.w", m}})
                  .ok());
  TrainState t = MakeTrainState(7);
  t.optimizer_step = 0;  // a legacy train_state.json has none
  std::ofstream(step + "/train_state.json") << TrainStateJson(t);
  absl::StatusOr<StoredCheckpoint> opened = folder.Open(7);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->train_state.optimizer_step, 7);
  EXPECT_TRUE(torch::equal(*ReadWhole(*opened->state, "model.w"), w));
  EXPECT_TRUE(torch::equal(*ReadWhole(*opened->state, "optimizer.exp_avg.w"), m));
  fs::resize_file(step + "/optimizer.pt", fs::file_size(step + "/optimizer.pt") / 2);
  EXPECT_EQ(folder.Open(7).status().code(), absl::StatusCode::kDataLoss);
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
