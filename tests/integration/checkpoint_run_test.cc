// Sharded checkpoints end to end (ringtrain-run, two or four trainer ranks over Gloo): async saves
// train bitwise like sync saves and write the same files; a trainer killed in the middle of an
// async write leaves no checkpoint that resume would choose, and the rerun resumes from the one
// before, bitwise like the uninterrupted run; at shard 4 a rank's save and load add at most its own
// shards (async staging) plus one parameter to its CPU tensor memory, never the whole model.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

// The debug model on 2 ranks, shard 2, 12 steps, checkpoints every 4 into dir/folder.
std::vector<std::string> Sharded2(const TempDir& dir, const std::string& folder,
                                  const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {
      ConfigPath("debug_model.toml"),          "--training.steps=12",
      "--lr_scheduler.warmup_steps=2",         "--parallelism.data_parallel_shard_degree=2",
      "--training.local_batch_size=4",         "--checkpoint.enable=true",
      "--checkpoint.folder=" + (dir / folder), "--checkpoint.interval=4",
      "--checkpoint.keep_latest_k=0",          "--metrics.jsonl=" + (dir / (folder + ".jsonl"))};
  args.insert(args.end(), extra.begin(), extra.end());
  return LauncherCommand(2, args);
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string> Column(const std::string& jsonl, const std::string& key) {
  std::vector<std::string> values;
  for (const auto& record : ReadJsonl(jsonl)) values.push_back(record.at(key));
  return values;
}

TEST(CheckpointRunTest, AsyncSavesTrainAndWriteExactlyLikeSyncSaves) {
  TempDir dir;
  const auto sync = RunCommand(Sharded2(dir, "sync"));
  ASSERT_EQ(sync.exit_code, 0) << sync.output;
  const auto async = RunCommand(Sharded2(dir, "async", {"--checkpoint.async_mode=async"}));
  ASSERT_EQ(async.exit_code, 0) << async.output;
  EXPECT_EQ(Column(dir / "async.jsonl", "loss"), Column(dir / "sync.jsonl", "loss"));
  for (const char* step : {"step-4", "step-8", "step-12"}) {
    for (const char* file : {"rank-00000.safetensors", "rank-00001.safetensors", "index.json",
                             "train_state.json", "COMPLETE"}) {
      const std::string a = (fs::path(dir / "sync") / step / file).string();
      const std::string b = (fs::path(dir / "async") / step / file).string();
      ASSERT_TRUE(fs::exists(b)) << b;
      EXPECT_EQ(Bytes(a), Bytes(b)) << step << "/" << file;
    }
  }
  // Every save's stall is in its step's record; each write time in the record of the step by which
  // it finished (the last one waited for: step 12).
  const auto records = ReadJsonl(dir / "async.jsonl");
  ASSERT_EQ(records.size(), 12u);
  double writes = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const double stall = std::stod(records[i].at("checkpoint_stall_seconds"));
    EXPECT_EQ(stall > 0, (i + 1) % 4 == 0) << "step " << i + 1;
    writes += std::stod(records[i].at("checkpoint_write_seconds"));
  }
  EXPECT_GT(std::stod(records[11].at("checkpoint_write_seconds")), 0);
  EXPECT_GT(writes, 0);
}

TEST(CheckpointRunTest, AKilledAsyncWriteLeavesNoCheckpointAndTheRerunResumesBitwise) {
  TempDir dir;
  const auto full = RunCommand(Sharded2(dir, "full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;

  // Step 8's write stops after the ranks' parts (the fault hook); training goes on to step 12,
  // whose save waits for it: the run is killed there.
  {
    Subprocess run =
        StartCommand(Sharded2(dir, "ckpt", {"--checkpoint.async_mode=async"}), dir / "killed.log",
                     "", {"RINGTRAIN_TEST_HANG_CHECKPOINT_AT_STEP=8"});
    ASSERT_TRUE(WaitFor(
        [&] {
          return fs::exists(dir / "ckpt.jsonl") && ReadJsonl(dir / "ckpt.jsonl").size() >= 11;
        },
        120))
        << Bytes(dir / "killed.log");
    EXPECT_EQ(WaitCommand(run, /*timeout_seconds=*/0), -1);  // SIGKILL to the whole group
  }
  EXPECT_TRUE(fs::exists(dir / "ckpt/step-4/COMPLETE"));
  EXPECT_FALSE(fs::exists(dir / "ckpt/step-8"));
  bool leftover = false;
  for (const auto& entry : fs::directory_iterator(dir / "ckpt")) {
    leftover |= entry.path().filename().string().rfind(".tmp-step-8-", 0) == 0;
  }
  EXPECT_TRUE(leftover) << "the killed save's temporary folder";

  const auto rerun = RunCommand(Sharded2(dir, "ckpt", {"--checkpoint.async_mode=async"}));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("resumed from " + (dir / "ckpt/step-4")), std::string::npos)
      << rerun.output;
  for (const auto& entry : fs::directory_iterator(dir / "ckpt")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u)
        << "left over: " << entry.path();
  }
  // The killed run's records then the rerun's (steps 5–12): the rerun's equal the full run's.
  const std::vector<std::string> losses = Column(dir / "ckpt.jsonl", "loss");
  const std::vector<std::string> want = Column(dir / "full.jsonl", "loss");
  ASSERT_EQ(want.size(), 12u);
  ASSERT_GE(losses.size(), 8u);
  const std::vector<std::string> rerun_tail(losses.end() - 8, losses.end());
  EXPECT_EQ(rerun_tail, std::vector<std::string>(want.begin() + 4, want.end()));
}

// Parses "rank R <what> ... CPU tensor memory +N bytes" lines: N per rank.
std::vector<int64_t> MemoryLines(const std::string& output, const std::string& what) {
  std::vector<int64_t> extra;
  const std::regex line("rank (\\d+) " + what + "[^\\n]*CPU tensor memory \\+(\\d+) bytes");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    extra.push_back(std::stoll((*it)[2]));
  }
  return extra;
}

TEST(CheckpointRunTest, AtShard4ASaveAndALoadNeverHoldTheWholeModel) {
  TempDir dir;
  // dim 256, 4 layers, vocab 2048: millions of parameters, tens of MB of parameters and moments,
  // a quarter per rank; the largest parameter (the embedding, 2048 × 256) is 2 MB.
  const int64_t largest_parameter = 2048 * 256 * 4;
  auto run = [&](const std::string& folder, int steps, const std::string& mode) {
    const auto r = RunCommand(LauncherCommand(
        4,
        {ConfigPath("debug_model.toml"), "--model.dim=256", "--model.vocab_size=2048",
         "--training.seq_len=64", "--training.local_batch_size=1",
         "--training.steps=" + std::to_string(steps), "--parallelism.data_parallel_shard_degree=4",
         "--checkpoint.enable=true", "--checkpoint.folder=" + (dir / folder),
         "--checkpoint.interval=2", "--checkpoint.async_mode=" + mode}));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string sync = run("sync", 2, "disabled");
  std::smatch model;
  ASSERT_TRUE(std::regex_search(sync, model, std::regex("model: (\\d+) parameters"))) << sync;
  const int64_t full_state = 3 * 4 * std::stoll(model[1]);  // parameters and two moments
  const std::vector<int64_t> sync_save = MemoryLines(sync, "saving its part");
  ASSERT_EQ(sync_save.size(), 4u) << sync;
  for (int64_t extra : sync_save) EXPECT_LE(extra, largest_parameter);

  const std::string async = run("async", 2, "async");
  const std::vector<int64_t> async_save = MemoryLines(async, "saving its part");
  ASSERT_EQ(async_save.size(), 4u) << async;
  for (int64_t extra : async_save) EXPECT_LE(extra, full_state / 4 + largest_parameter);

  const std::string resumed = run("sync", 4, "disabled");  // loads step-2, saves step-4
  const std::vector<int64_t> load = MemoryLines(resumed, "loaded its part");
  ASSERT_EQ(load.size(), 4u) << resumed;
  for (int64_t extra : load) EXPECT_LE(extra, largest_parameter);

  // The saved weights as one torch.save file, then initial weights of a shard-4 run: each rank
  // reads a quarter of the parameters' bytes.
  const std::string model_pt = dir / "model.pt";
  const auto converted =
      RunCommand({BinDir() + "/ringtrain-convert", "to-pt", dir / "sync/step-2", model_pt});
  ASSERT_EQ(converted.exit_code, 0) << converted.output;
  const auto started = RunCommand(LauncherCommand(
      4, {ConfigPath("debug_model.toml"), "--model.dim=256", "--model.vocab_size=2048",
          "--training.seq_len=64", "--training.local_batch_size=1", "--training.steps=1",
          "--parallelism.data_parallel_shard_degree=4",
          "--checkpoint.initial_load_path=" + model_pt}));
  ASSERT_EQ(started.exit_code, 0) << started.output;
  const std::vector<int64_t> initial =
      MemoryLines(started.output, "loaded its part of the initial");
  ASSERT_EQ(initial.size(), 4u) << started.output;
  for (int64_t extra : initial) EXPECT_LE(extra, largest_parameter);
  const std::regex read_line("rank \\d+ loaded its part of the initial[^\\n]* (\\d+) bytes read");
  int64_t total_read = 0;
  for (std::sregex_iterator it(started.output.begin(), started.output.end(), read_line), end;
       it != end; ++it) {
    const int64_t bytes = std::stoll((*it)[1]);
    EXPECT_LE(bytes, full_state / 3 / 4 + 4 * 64) << "a rank read more than its quarter";
    total_read += bytes;
  }
  EXPECT_EQ(total_read, full_state / 3) << "the ranks together read each parameter byte once";
  std::printf("CPU tensor memory added per rank (bytes; the whole state is %lld):\n",
              static_cast<long long>(full_state));
  for (size_t r = 0; r < 4; ++r) {
    std::printf(
        "  rank %zu: sync save +%lld, async save +%lld, load +%lld, initial weights +%lld\n", r,
        static_cast<long long>(sync_save[r]), static_cast<long long>(async_save[r]),
        static_cast<long long>(load[r]), static_cast<long long>(initial[r]));
  }
}

}  // namespace
}  // namespace ringtrain::testing
