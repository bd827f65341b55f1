// Activation checkpointing end to end: ringtrain-run with two CP ranks (ring attention over Gloo)
// on the debug config; full, selective 2 and selective op train bitwise like no checkpointing, and
// the log names the mode.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

// The losses, as written (%.17g), of 4 cp = 2 steps under `options`; the run's output in `log`.
std::vector<std::string> Cp2Losses(const TempDir& dir, const std::string& name,
                                   const std::vector<std::string>& options, std::string* log) {
  std::vector<std::string> args = {
      ConfigPath("debug_model.toml"), "--parallelism.context_parallel_degree=2",
      "--training.steps=4",           "--lr_scheduler.warmup_steps=2",
      "--lr_scheduler.decay_ratio=0", "--metrics.jsonl=" + (dir / name)};
  args.insert(args.end(), options.begin(), options.end());
  const CommandResult r = RunCommand(LauncherCommand(2, args));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  *log = r.output;
  return ReadJsonlColumn(dir / name, "loss");
}

TEST(ActivationCheckpointRunTest, Cp2FullSelectiveAndOpTrainBitwiseLikeNone) {
  TempDir dir;
  std::string log;
  const auto none = Cp2Losses(dir, "none.jsonl", {}, &log);
  ASSERT_EQ(none.size(), 4u) << log;
  EXPECT_NE(log.find("activation checkpointing: none"), std::string::npos) << log;
  struct Mode {
    std::string name;
    std::vector<std::string> options;
    std::string logged;
  };
  const std::vector<Mode> modes = {
      {"full", {"--activation_checkpoint.mode=full"}, "activation checkpointing: full"},
      {"selective2",
       {"--activation_checkpoint.mode=selective", "--activation_checkpoint.selective_ac_option=2"},
       "activation checkpointing: selective 2"},
      {"op",
       {"--activation_checkpoint.mode=selective", "--activation_checkpoint.selective_ac_option=op"},
       "activation checkpointing: selective op"}};
  for (const Mode& m : modes) {
    SCOPED_TRACE(m.name);
    const auto losses = Cp2Losses(dir, m.name + ".jsonl", m.options, &log);
    EXPECT_EQ(losses, none) << log;
    EXPECT_NE(log.find(m.logged), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace ringtrain::testing
