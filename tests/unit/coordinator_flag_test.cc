// PlaceCoordinatorFlag (client/coordinator_flag.h): --coordinator before or after the subcommand,
// and $RINGTRAIN_COORDINATOR as the default of the subcommands that take it.
#include "client/coordinator_flag.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;

bool AllButUp(const std::string& subcommand) { return subcommand != "up"; }

std::vector<std::string> Place(const std::vector<std::string>& args, const std::string& env = "") {
  return PlaceCoordinatorFlag(args, env, AllButUp);
}

TEST(CoordinatorFlagTest, AFlagBeforeTheSubcommandMovesAfterIt) {
  EXPECT_THAT(Place({"--coordinator", "h:1", "list", "--state", "running"}),
              ElementsAre("list", "--coordinator", "h:1", "--state", "running"));
  EXPECT_THAT(Place({"--coordinator=h:1", "submit", "c.toml", "--training.steps=2"}),
              ElementsAre("submit", "--coordinator=h:1", "c.toml", "--training.steps=2"));
  // After it already: untouched.
  EXPECT_THAT(Place({"get", "job-1", "--coordinator", "h:1"}),
              ElementsAre("get", "job-1", "--coordinator", "h:1"));
  // Other options before the subcommand (--help) stay where they are.
  EXPECT_THAT(Place({"--help", "--coordinator", "h:1", "list"}),
              ElementsAre("--help", "list", "--coordinator", "h:1"));
}

TEST(CoordinatorFlagTest, TheEnvironmentIsTheDefaultOnlyWhereNoFlagIsGiven) {
  EXPECT_THAT(Place({"list"}, "env:2"), ElementsAre("list", "--coordinator=env:2"));
  EXPECT_THAT(Place({"list", "--coordinator", "h:1"}, "env:2"),
              ElementsAre("list", "--coordinator", "h:1"));
  EXPECT_THAT(Place({"--coordinator", "h:1", "list"}, "env:2"),
              ElementsAre("list", "--coordinator", "h:1"));
  EXPECT_THAT(Place({"list"}, ""), ElementsAre("list"));
  // A subcommand that does not take it from the environment.
  EXPECT_THAT(Place({"up", "--workers", "2"}, "env:2"), ElementsAre("up", "--workers", "2"));
  // But any subcommand takes the flag in either place.
  EXPECT_THAT(Place({"--coordinator", "h:1", "up", "--workers", "2"}, "env:2"),
              ElementsAre("up", "--coordinator", "h:1", "--workers", "2"));
}

TEST(CoordinatorFlagTest, NoSubcommandIsLeftToTheParser) {
  EXPECT_THAT(Place({"--coordinator", "h:1"}, "env:2"), ElementsAre("--coordinator", "h:1"));
  EXPECT_THAT(Place({}, "env:2"), ElementsAre());
  // A dangling flag with no value is kept for CLI11 to refuse.
  EXPECT_THAT(Place({"--coordinator"}), ElementsAre("--coordinator"));
}

}  // namespace
}  // namespace ringtrain
