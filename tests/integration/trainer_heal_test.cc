// Healing in place at the trainer's level, without a coordinator (which the e2e tests add): real
// trainers with checkpoint.memory_interval train cp 2 (alone, with FSDP shard 2, with two
// replicas) and cp 4 on two hosts (RINGTRAIN_NODE_NAME: the copies go to the other host); rank 1 is
// killed with SIGKILL in the middle of the run; a replacement rank 1 starts as generation 1 of a
// new rendezvous, and every other rank — the same process throughout — is told to rejoin through
// its control file, the file its agent writes. All finish, and every step rank 0 recorded, before
// and after the heal, is bitwise the step of an uninterrupted run that took no snapshots. On one
// host the buddies share their snapshot buffers; across the two named hosts they send them.
#include <signal.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/record/heal_instruction.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

// A mesh to heal: its world and the options that make it; `nodes`, when given, each rank's
// $RINGTRAIN_NODE_NAME (the host it counts as on), and `buddy_offset` the snapshot_buddy_offset
// the records must then show.
struct Mesh {
  const char* name;
  int world;
  std::vector<std::string> options;
  std::vector<std::string> nodes = {};
  int buddy_offset = 0;
};

std::vector<std::string> Args(const Mesh& mesh, const std::string& jsonl) {
  std::vector<std::string> args = {ConfigPath("debug_model.toml"), "--metrics.jsonl=" + jsonl,
                                   "--training.steps=16", "--checkpoint.memory_interval=3",
                                   "--comm.timeout_seconds=20"};
  args.insert(args.end(), mesh.options.begin(), mesh.options.end());
  return args;
}

Subprocess StartRank(const TempDir& dir, const Mesh& mesh, int rank, int port,
                     const std::string& name, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env = {"RANK=" + std::to_string(rank),
                                  "WORLD_SIZE=" + std::to_string(mesh.world),
                                  "MASTER_ADDR=127.0.0.1",
                                  "MASTER_PORT=" + std::to_string(port),
                                  "OMP_NUM_THREADS=1",
                                  "RINGTRAIN_CONTROL_FILE=" + (dir / (name + ".control"))};
  if (!mesh.nodes.empty()) env.push_back("RINGTRAIN_NODE_NAME=" + mesh.nodes.at(size_t(rank)));
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  return StartCommand(TrainerCommand(Args(mesh, dir / (name + ".jsonl"))), dir / (name + ".log"),
                      "", env);
}

// step → its loss's JSON text, the first record of each step (a step done again after the
// rollback must be the same; mismatches get each one that is not).
std::map<std::string, std::string> LossByStep(const std::string& path,
                                              std::vector<std::string>* mismatches) {
  std::map<std::string, std::string> losses;
  for (const auto& line : ReadJsonl(path)) {
    if (line.count("step") == 0) continue;
    auto [it, inserted] = losses.emplace(line.at("step"), line.at("loss"));
    if (!inserted && it->second != line.at("loss")) {
      mismatches->push_back("step " + line.at("step") + ": " + it->second + " then " +
                            line.at("loss"));
    }
  }
  return losses;
}

class HealTest : public ::testing::TestWithParam<Mesh> {};

TEST_P(HealTest, AKilledRankIsReplacedFromItsBuddysMemoryAndEveryStepMatchesAnUninterruptedRun) {
  const Mesh& mesh = GetParam();
  TempDir dir;
  // The reference takes no snapshots: they must not change a number.
  std::vector<std::string> reference_args = Args(mesh, dir / "reference.jsonl");
  reference_args.push_back("--checkpoint.memory_interval=0");
  const CommandResult reference = RunCommand(LauncherCommand(mesh.world, reference_args));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  const int port = FreePort();
  std::vector<Subprocess> ranks;
  for (int r = 0; r < mesh.world; ++r) {
    ranks.push_back(StartRank(dir, mesh, r, port, "rank" + std::to_string(r)));
  }
  std::vector<pid_t> pids;
  for (const Subprocess& r : ranks) pids.push_back(r.pid());
  const auto logs = [&] {
    std::string text;
    for (int r = 0; r < mesh.world; ++r) {
      text += "rank " + std::to_string(r) + ":\n" +
              ReadFile(dir / ("rank" + std::to_string(r) + ".log"));
    }
    return text + "replacement:\n" + ReadFile(dir / "replacement.log");
  };
  // Killed once step 8 is recorded: snapshots of steps 3 and 6 exist, 6 committed.
  ASSERT_TRUE(WaitFor([&] { return ReadJsonl(dir / "rank0.jsonl").size() >= 8; }, 120)) << logs();
  ranks[1].Signal(SIGKILL);
  EXPECT_EQ(WaitCommand(ranks[1], 10), 128 + SIGKILL);

  const int new_port = FreePort();
  Subprocess replacement =
      StartRank(dir, mesh, 1, new_port, "replacement", {"RINGTRAIN_HEAL_GENERATION=1"});
  HealInstruction heal;
  heal.generation = 1;
  heal.master_addr = "127.0.0.1";
  heal.master_port = new_port;
  for (int r = 0; r < mesh.world; ++r) {
    if (r == 1) continue;
    ASSERT_TRUE(WriteHealInstruction(dir / ("rank" + std::to_string(r) + ".control"), heal).ok());
  }

  EXPECT_EQ(WaitCommand(replacement, 120), 0) << logs();
  for (int r = 0; r < mesh.world; ++r) {
    if (r == 1) continue;
    EXPECT_EQ(WaitCommand(ranks[size_t(r)], 60), 0) << "rank " << r << "\n" << logs();
    EXPECT_EQ(ranks[size_t(r)].pid(), pids[size_t(r)]);
  }
  const std::string log0 = ReadFile(dir / "rank0.log");
  const size_t heal_line = log0.find("healed in place (generation 1");
  ASSERT_NE(heal_line, std::string::npos) << log0;
  std::printf("%s, rank 0: %s\n", mesh.name,
              log0.substr(heal_line, log0.find('\n', heal_line) - heal_line).c_str());
  EXPECT_NE(ReadFile(dir / "replacement.log").find("replaces the lost rank"), std::string::npos)
      << logs();

  std::vector<std::string> mismatches;
  const std::map<std::string, std::string> expected =
      LossByStep(dir / "reference.jsonl", &mismatches);
  const std::map<std::string, std::string> healed = LossByStep(dir / "rank0.jsonl", &mismatches);
  EXPECT_EQ(expected.size(), 16u);
  EXPECT_EQ(healed, expected) << logs();
  EXPECT_TRUE(mismatches.empty()) << mismatches.front();
  // Steps after the rolled-back-to snapshot were recorded twice, the same both times.
  EXPECT_GT(ReadJsonl(dir / "rank0.jsonl").size(), 16u);
  if (mesh.buddy_offset > 0) {
    for (const auto& record : ReadJsonl(dir / "rank0.jsonl")) {
      EXPECT_EQ(record.at("snapshot_buddy_offset"), std::to_string(mesh.buddy_offset))
          << "step " << record.at("step");
    }
    EXPECT_NE(log0.find("on another host"), std::string::npos) << log0;
  } else {
    // One host: the buddy maps rank 0's snapshot buffers (shared_floats.h), before and after the
    // heal.
    EXPECT_NE(log0.find("on the same host, through shared memory"), std::string::npos) << log0;
  }
  EXPECT_EQ(logs().find("over the network, not through shared memory"), std::string::npos)
      << logs();
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, HealTest,
    ::testing::Values(Mesh{"cp2", 2, {"--parallelism.context_parallel_degree=2"}},
                      // FSDP: rank 1's shards are its own; its buddy is rank 3.
                      Mesh{"fsdp2_cp2",
                           4,
                           {"--parallelism.context_parallel_degree=2",
                            "--parallelism.data_parallel_shard_degree=2"}},
                      // Two replicas: rank 1's buddy (rank 3) is in the other one.
                      Mesh{"dp2_cp2",
                           4,
                           {"--parallelism.context_parallel_degree=2",
                            "--parallelism.data_parallel_replicate_degree=2",
                            "--training.local_batch_size=4"}},
                      // cp 4 on two hosts of two ranks: the next rank would often be on the same
                      // host, so every copy goes 2 ranks on (SnapshotOffset): rank 1's to rank 3.
                      Mesh{"cp4_two_hosts",
                           4,
                           {"--parallelism.context_parallel_degree=4"},
                           {"node-a", "node-a", "node-b", "node-b"},
                           2}),
    [](const ::testing::TestParamInfo<Mesh>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ringtrain::testing
