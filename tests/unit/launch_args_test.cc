// ringtrain-run's command line: flags before CONFIG, everything after it verbatim, defaults, and
// errors that name the flag, the value and what would be accepted.
#include "worker/launcher/launch_args.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

TEST(ParseLaunchArgsTest, FlagsBeforeConfigAndEverythingAfterItVerbatim) {
  const auto o =
      ParseLaunchArgs({"--nproc", "4", "--master-addr=10.0.0.2", "--master-port", "29500",
                       "--threads-per-rank=2", "--trainer", "/opt/t", "--grace-seconds", "0.5",
                       "job.toml", "--training.steps=10", "--nproc=9", "loose"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->help);
  EXPECT_EQ(o->nproc, 4);
  EXPECT_EQ(o->master_addr, "10.0.0.2");
  EXPECT_EQ(o->master_port, 29500);
  EXPECT_EQ(o->threads_per_rank, 2);
  EXPECT_EQ(o->trainer, "/opt/t");
  EXPECT_DOUBLE_EQ(o->grace_seconds, 0.5);
  EXPECT_EQ(o->config, "job.toml");
  EXPECT_EQ(o->trainer_args,
            (std::vector<std::string>{"--training.steps=10", "--nproc=9", "loose"}));
}

TEST(ParseLaunchArgsTest, Defaults) {
  const auto o = ParseLaunchArgs({"--nproc=2", "job.toml"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc, 2);
  EXPECT_EQ(o->master_addr, "127.0.0.1");
  EXPECT_EQ(o->master_port, 0);
  EXPECT_EQ(o->threads_per_rank, 1);
  EXPECT_EQ(o->trainer, "");
  EXPECT_DOUBLE_EQ(o->grace_seconds, 5);
  EXPECT_TRUE(o->trainer_args.empty());
  EXPECT_TRUE(ParseLaunchArgs({"--help"})->help);
  EXPECT_TRUE(ParseLaunchArgs({"--nproc", "2", "-h"})->help);
}

TEST(ParseLaunchArgsTest, RejectsBadCommandLinesWithMessagesNamingTheProblem) {
  struct Case {
    std::vector<std::string> args;
    std::string message_part;
  };
  const Case cases[] = {
      {{"job.toml"}, "--nproc is required"},
      {{"--nproc", "2"}, "missing CONFIG.toml"},
      {{"--nproc", "0", "job.toml"},
       "--nproc: '0' is not valid; expected a whole number in 1..256"},
      {{"--nproc=two", "job.toml"}, "--nproc: 'two'"},
      {{"--nproc"}, "--nproc needs a value"},
      {{"--nproc", "2", "--master-port", "70000", "job.toml"}, "--master-port: '70000'"},
      {{"--nproc", "2", "--threads-per-rank=0", "job.toml"}, "--threads-per-rank: '0'"},
      {{"--nproc", "2", "--grace-seconds=-1", "job.toml"}, "--grace-seconds: '-1'"},
      {{"--nproc", "2", "--trainer=", "job.toml"}, "--trainer needs a non-empty value"},
      {{"--nproc", "2", "--master-addr", "", "job.toml"}, "--master-addr needs a non-empty value"},
      {{"--nnodes", "2", "job.toml"}, "unknown flag '--nnodes'; launcher flags are --nproc"},
      {{"--nproc", "2", "--training.steps=3", "job.toml"},
       "unknown flag '--training.steps'; config overrides go after CONFIG.toml"},
  };
  for (const Case& c : cases) {
    const auto o = ParseLaunchArgs(c.args);
    ASSERT_FALSE(o.ok()) << c.message_part;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(c.message_part), std::string::npos) << o.status();
  }
}

}  // namespace
}  // namespace ringtrain
