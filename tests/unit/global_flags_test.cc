// PlaceGlobalFlags (client/global_flags.h): every global flag before or after the subcommand, and
// one precedence for all: the flag over its environment variable over the default.
#include "client/global_flags.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;

// Every subcommand takes every global flag from the environment, except `up` --coordinator.
bool AllButUpsCoordinator(const std::string& subcommand, const std::string& flag) {
  return subcommand != "up" || flag != "--coordinator";
}

std::vector<std::string> Place(const std::vector<std::string>& args,
                               const std::map<std::string, std::string>& env = {}) {
  return PlaceGlobalFlags(
      args,
      [&env](const std::string& name) {
        const auto it = env.find(name);
        return it == env.end() ? std::string() : it->second;
      },
      AllButUpsCoordinator);
}

TEST(GlobalFlagsTest, AFlagBeforeTheSubcommandMovesAfterIt) {
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

TEST(GlobalFlagsTest, EveryCredentialFlagMovesToo) {
  EXPECT_THAT(Place({"--tls-ca", "ca.crt", "--tls-cert=c.crt", "--tls-key", "c.key", "--token-file",
                     "t", "--coordinator", "h:1", "list", "--state", "running"}),
              ElementsAre("list", "--tls-ca", "ca.crt", "--tls-cert=c.crt", "--tls-key", "c.key",
                          "--token-file", "t", "--coordinator", "h:1", "--state", "running"));
  // A name that merely starts like one is not moved.
  EXPECT_THAT(Place({"--tls-cafile", "x", "list"}), ElementsAre("--tls-cafile", "x", "list"));
}

TEST(GlobalFlagsTest, TheEnvironmentIsTheDefaultOnlyWhereNoFlagIsGiven) {
  EXPECT_THAT(Place({"list"}, {{"RINGTRAIN_COORDINATOR", "env:2"}}),
              ElementsAre("list", "--coordinator=env:2"));
  EXPECT_THAT(Place({"list", "--coordinator", "h:1"}, {{"RINGTRAIN_COORDINATOR", "env:2"}}),
              ElementsAre("list", "--coordinator", "h:1"));
  EXPECT_THAT(Place({"--coordinator", "h:1", "list"}, {{"RINGTRAIN_COORDINATOR", "env:2"}}),
              ElementsAre("list", "--coordinator", "h:1"));
  EXPECT_THAT(Place({"list"}, {{"RINGTRAIN_COORDINATOR", ""}}), ElementsAre("list"));
  // A subcommand that does not take it from the environment.
  EXPECT_THAT(Place({"up", "--workers", "2"}, {{"RINGTRAIN_COORDINATOR", "env:2"}}),
              ElementsAre("up", "--workers", "2"));
  // But any subcommand takes the flag in either place.
  EXPECT_THAT(
      Place({"--coordinator", "h:1", "up", "--workers", "2"}, {{"RINGTRAIN_COORDINATOR", "env:2"}}),
      ElementsAre("up", "--coordinator", "h:1", "--workers", "2"));
}

// The issue this was written for: $RINGTRAIN_TLS_CA beat --tls-ca.
TEST(GlobalFlagsTest, EveryFlagBeatsItsVariableWhereverItStands) {
  const std::map<std::string, std::string> env = {{"RINGTRAIN_TLS_CA", "env-ca"},
                                                  {"RINGTRAIN_TLS_CERT", "env-cert"},
                                                  {"RINGTRAIN_TLS_KEY", "env-key"}};
  EXPECT_THAT(Place({"list"}, env),
              ElementsAre("list", "--tls-ca=env-ca", "--tls-cert=env-cert", "--tls-key=env-key"));
  EXPECT_THAT(Place({"list", "--tls-ca", "ca", "--tls-key=key"}, env),
              ElementsAre("list", "--tls-ca", "ca", "--tls-key=key", "--tls-cert=env-cert"));
  EXPECT_THAT(Place({"--tls-cert", "cert", "list"}, env),
              ElementsAre("list", "--tls-cert", "cert", "--tls-ca=env-ca", "--tls-key=env-key"));
}

TEST(GlobalFlagsTest, NoSubcommandIsLeftToTheParser) {
  EXPECT_THAT(Place({"--coordinator", "h:1"}, {{"RINGTRAIN_COORDINATOR", "env:2"}}),
              ElementsAre("--coordinator", "h:1"));
  EXPECT_THAT(Place({}, {{"RINGTRAIN_COORDINATOR", "env:2"}}), ElementsAre());
  // A dangling flag with no value is kept for CLI11 to refuse.
  EXPECT_THAT(Place({"--coordinator"}), ElementsAre("--coordinator"));
  EXPECT_THAT(Place({"--tls-ca"}), ElementsAre("--tls-ca"));
}

}  // namespace
}  // namespace ringtrain
