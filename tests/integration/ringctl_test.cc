// `ringctl loss-compare` as a process, against a fake ringtrain-run: a shell script that writes a
// JSONL with fixed losses to the path in its --metrics.jsonl= argument, and can perturb or fail the
// test side. Checks the exit codes, the printed table and the files in the output folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

// The fake launcher. $MODE (baked in by WriteFake) says what the test side does:
// "same" writes the baseline's losses, "perturb" changes step 3 by a few ulps, "fail" exits 3.
// Its body; WriteFile puts the shebang and MODE first.
constexpr char kFakeRunBody[] = R"(jsonl=; steps=
for arg in "$@"; do
  case "$arg" in
    --metrics.jsonl=*) jsonl="${arg#--metrics.jsonl=}" ;;
    --training.steps=*) steps="${arg#--training.steps=}" ;;
  esac
done
echo "$*" >> "$(dirname "$0")/calls.txt"
echo "[rank 0] fake trainer, $steps steps"
side=baseline
case "$jsonl" in */test.jsonl) side=test ;; esac
if [ "$side" = test ] && [ "$MODE" = fail ]; then
  echo "[rank 0] E boom: rank 0 failed" >&2
  exit 3
fi
: > "$jsonl"
i=1
while [ "$i" -le "$steps" ]; do
  loss="$((10 - i)).7041950225830078"
  if [ "$side" = test ] && [ "$MODE" = perturb ] && [ "$i" -eq 3 ]; then
    loss="$((10 - i)).7041950225830087"
  fi
  echo "{\"step\": $i, \"loss\": $loss, \"grad_norm\": 1.5, \"ranks\": [{\"rank\": 0}]}" >> "$jsonl"
  i=$((i + 1))
done
)";

class RingctlTest : public ::testing::Test {
 protected:
  // Writes the fake launcher with MODE=mode and a config file for it to be given.
  void WriteFake(const std::string& mode) {
    WriteFile(fake_, "#!/bin/sh\nMODE=" + mode + "\n" + kFakeRunBody);
    std::filesystem::permissions(fake_, std::filesystem::perms::owner_all);
    WriteFile(config_, "# any config: the fake ignores it\n");
  }

  CommandResult LossCompare(std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinDir() + "/ringctl",
                                     "loss-compare",
                                     "--run=" + fake_,
                                     "--baseline-config=" + config_,
                                     "--steps=5",
                                     "--output-folder=" + out_,
                                     "--test-options=--parallelism.context_parallel_degree=4"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  }

  TempDir dir_;
  const std::string fake_ = dir_ / "ringtrain-run";
  const std::string config_ = dir_ / "debug.toml";
  const std::string out_ = dir_ / "out";
};

TEST_F(RingctlTest, IdenticalLossesPassAssertEqual) {
  WriteFake("same");
  const CommandResult result = LossCompare({"--assert-equal"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("Step |"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("Test Loss | Difference"), std::string::npos);
  EXPECT_NE(result.output.find("9.7041950225830078 |"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("PASS: all 5 steps bitwise equal"), std::string::npos);

  // Both runs got the user's options first and the shared settings last.
  const std::string calls = ReadFile(dir_ / "calls.txt");
  EXPECT_NE(calls.find("--nproc 1 " + config_ + " --training.steps=5 --metrics.jsonl=" + out_ +
                       "/baseline.jsonl --checkpoint.enable=false --training.seed=42"),
            std::string::npos)
      << calls;
  EXPECT_NE(calls.find("--parallelism.context_parallel_degree=4 --training.steps=5 "
                       "--metrics.jsonl=" +
                       out_ +
                       "/test.jsonl --checkpoint.enable=false "
                       "--training.seed=42"),
            std::string::npos)
      << calls;

  EXPECT_NE(ReadFile(out_ + "/baseline.log").find("fake trainer, 5 steps"), std::string::npos);
  EXPECT_NE(ReadFile(out_ + "/test.log").find("fake trainer, 5 steps"), std::string::npos);
  const nlohmann::json summary = nlohmann::json::parse(ReadFile(out_ + "/summary.json"));
  EXPECT_EQ(summary["passed"], true);
  EXPECT_EQ(summary["mode"], "assert_equal");
  ASSERT_EQ(summary["per_step"].size(), 5u);
  EXPECT_EQ(summary["per_step"][0]["baseline_loss"].get<double>(), 9.7041950225830078);
}

TEST_F(RingctlTest, PerturbedTestSideFailsAssertEqualButPassesAtol) {
  WriteFake("perturb");
  const CommandResult equal = LossCompare({"--assert-equal"});
  EXPECT_EQ(equal.exit_code, 1) << equal.output;
  EXPECT_NE(equal.output.find("Step |"), std::string::npos) << equal.output;
  EXPECT_NE(equal.output.find("FAIL: 1 of 5 steps not bitwise equal (steps 3)"), std::string::npos)
      << equal.output;
  const nlohmann::json summary = nlohmann::json::parse(ReadFile(out_ + "/summary.json"));
  EXPECT_EQ(summary["passed"], false);
  EXPECT_EQ(summary["failed_steps"], nlohmann::json::array({3}));

  const CommandResult close = LossCompare({"--atol=1e-12"});
  EXPECT_EQ(close.exit_code, 0) << close.output;
}

TEST_F(RingctlTest, FailedRunIsAnErrorPointingAtItsLog) {
  WriteFake("fail");
  const CommandResult result = LossCompare({});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("test run failed (exit 3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(out_ + "/test.log"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("boom: rank 0 failed"), std::string::npos) << result.output;
}

TEST_F(RingctlTest, ConflictingFlagsAreAUsageError) {
  WriteFake("same");
  const CommandResult result = LossCompare({"--assert-equal", "--rtol=1e-5"});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("--assert-equal cannot be combined"), std::string::npos);
  EXPECT_EQ(RunCommand({BinDir() + "/ringctl", "loss-compare"}).exit_code, 2);  // no --steps
  EXPECT_FALSE(std::filesystem::exists(dir_ / "calls.txt"));
}

// A mistyped subcommand is named with the nearest one, before or after the global flags.
TEST(RingctlHelpTest, AMistypedSubcommandSuggestsTheNearest) {
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{BinDir() + "/ringctl", "sumbit", "configs/debug_model.toml"},
        std::vector<std::string>{BinDir() + "/ringctl", "--coordinator", "127.0.0.1:1",
                                 "sumbit"}}) {
    const CommandResult r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("unknown command \"sumbit\"; did you mean \"submit\"?"),
              std::string::npos)
        << r.output;
  }
}

// Every subcommand's --help ends with an example (CLI11's footer), found from `ringctl --help`'s
// list of subcommands, so a subcommand added later is held to it too.
TEST(RingctlHelpTest, EverySubcommandsHelpGivesAnExample) {
  const CommandResult top = RunCommand({BinDir() + "/ringctl", "--help"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  EXPECT_NE(top.output.find("RINGTRAIN_COORDINATOR"), std::string::npos) << top.output;
  const size_t list = top.output.find("Subcommands:");
  ASSERT_NE(list, std::string::npos) << top.output;
  std::istringstream lines(top.output.substr(list));
  std::vector<std::string> names;
  std::string header;
  std::getline(lines, header);  // "Subcommands:"
  for (std::string line; std::getline(lines, line) && !line.empty();) {
    // "  submit                      Submit a job: ..."; the list ends at a blank line
    if (line.size() < 3 || line[0] != ' ' || line[2] == ' ') continue;
    // "  top, ranks   …": a subcommand with an alias lists both; the name ends at ',' or ' '
    names.push_back(line.substr(2, line.find_first_of(", ", 2) - 2));
  }
  EXPECT_GE(names.size(), 12u) << top.output;
  for (const std::string& name : names) {
    const CommandResult help = RunCommand({BinDir() + "/ringctl", name, "--help"});
    EXPECT_EQ(help.exit_code, 0) << name << ": " << help.output;
    EXPECT_NE(help.output.find("Example"), std::string::npos) << name << ": " << help.output;
    EXPECT_NE(help.output.find("ringctl " + name), std::string::npos)
        << name << "'s example runs it: " << help.output;
  }
}

}  // namespace
}  // namespace ringtrain::testing
