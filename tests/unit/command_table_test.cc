// ringctl's command table (client/command.h, client/commands.cc): each row registers the
// subcommand it names, the common flags follow its traits, and the coordinator the credentials are
// checked against is the one it calls.
#include "client/command.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ringtrain {
namespace {

// The table registered on one app, as ringctl's main does.
struct Registered {
  CLI::App app{"ringctl"};
  std::vector<Command> commands = Commands();
  std::map<std::string, CLI::App*> subs;  // by row name

  Registered() {
    for (const Command& command : commands) {
      CLI::App* sub = command.add(app);
      AttachCommonFlags(sub, command.traits, command.common.get());
      subs[command.name] = sub;
    }
  }
  const Command& Row(const std::string& name) const {
    return *std::find_if(commands.begin(), commands.end(),
                         [&](const Command& c) { return c.name == name; });
  }
  // Parses `ringctl ARGS...`; returns the parsed row's name ("" when the parse failed).
  std::string Parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
    try {
      app.parse(args);
    } catch (const CLI::ParseError&) {
      return "";
    }
    for (const auto& [name, sub] : subs) {
      if (sub->parsed()) return name;
    }
    return "";
  }
};

TEST(CommandTableTest, EachRowRegistersTheSubcommandItNamesOnce) {
  Registered r;
  std::set<std::string> names;
  for (const Command& command : r.commands) {
    EXPECT_TRUE(names.insert(command.name).second) << command.name << " has two rows";
    EXPECT_EQ(r.subs[command.name]->get_name(), command.name);
  }
  for (const char* name : {"loss-compare", "compare", "export", "submit", "watch", "get", "list",
                           "cancel", "workers", "up", "plot", "logs", "top", "plan"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
}

TEST(CommandTableTest, CommonFlagsFollowTheTraits) {
  Registered r;
  for (const Command& command : r.commands) {
    const CLI::App* sub = r.subs[command.name];
    if (command.traits & kCallsCoordinator) {
      const CLI::Option* coordinator = sub->get_option_no_throw("--coordinator");
      ASSERT_NE(coordinator, nullptr) << command.name;
      EXPECT_EQ(coordinator->get_default_str(), kDefaultCoordinator) << command.name;
    }
    // `export` has an --output of its own that explains it always writes JSONL.
    EXPECT_EQ(sub->get_option_no_throw("--output") != nullptr,
              (command.traits & kOutputFormat) != 0 || command.name == "export")
        << command.name;
    for (const GlobalFlag& flag : kGlobalFlags) {
      if (flag.field == nullptr) continue;
      EXPECT_EQ(sub->get_option_no_throw(flag.name) != nullptr,
                (command.traits & kCredentials) != 0)
          << command.name << " " << flag.name;
      EXPECT_EQ(TakesEnv(command.traits, flag.name), (command.traits & kCredentials) != 0);
    }
    EXPECT_EQ(TakesEnv(command.traits, "--coordinator"), (command.traits & kCallsCoordinator) != 0)
        << command.name;
  }
  // What each command was before the table, kept: `up` and `loss-compare` mean something else by
  // --coordinator and take no variable for it; `plan` contacts nothing.
  EXPECT_EQ(r.Row("up").traits, kCredentials);
  EXPECT_EQ(r.Row("loss-compare").traits, kCoordinatorOptIn | kCredentials);
  EXPECT_EQ(r.Row("plan").traits, kOutputFormat);
  EXPECT_EQ(r.Row("export").traits, kCallsCoordinator | kCredentials);
  EXPECT_EQ(r.Row("plot").traits, kCallsCoordinator | kCredentials);
  for (const char* name :
       {"compare", "submit", "watch", "get", "list", "cancel", "workers", "logs", "top"}) {
    EXPECT_EQ(r.Row(name).traits, kCallsCoordinator | kCredentials | kOutputFormat) << name;
  }
}

TEST(CommandTableTest, ParsedFlagsReachTheRowsCommonFlags) {
  Registered r;
  ASSERT_EQ(
      r.Parse({"list", "--coordinator", "10.0.0.5:1", "--output", "json", "--tls-ca", "ca.pem"}),
      "list");
  const Command& list = r.Row("list");
  EXPECT_EQ(list.common->coordinator, "10.0.0.5:1");
  EXPECT_EQ(list.common->output, "json");
  EXPECT_EQ(list.common->credentials.tls_ca, "ca.pem");
  EXPECT_EQ(CalledCoordinator(*r.subs["list"], list.traits, *list.common), "10.0.0.5:1");
}

TEST(CommandTableTest, AGlobalFlagGivenTwiceTakesTheLast) {
  Registered r;
  ASSERT_EQ(r.Parse({"get", "job-1", "--coordinator", "a:1", "--coordinator", "b:2"}), "get");
  EXPECT_EQ(r.Row("get").common->coordinator, "b:2");
}

TEST(CommandTableTest, TheCalledCoordinator) {
  {
    Registered r;
    ASSERT_EQ(r.Parse({"get", "job-1"}), "get");
    const Command& get = r.Row("get");
    EXPECT_EQ(CalledCoordinator(*r.subs["get"], get.traits, *get.common), kDefaultCoordinator);
  }
  {
    Registered r;
    ASSERT_EQ(r.Parse({"loss-compare", "--steps", "1"}), "loss-compare");
    const Command& row = r.Row("loss-compare");
    EXPECT_EQ(CalledCoordinator(*r.subs["loss-compare"], row.traits, *row.common), "");
  }
  {
    Registered r;
    ASSERT_EQ(r.Parse({"loss-compare", "--steps", "1", "--coordinator", "10.0.0.5:1"}),
              "loss-compare");
    const Command& row = r.Row("loss-compare");
    EXPECT_EQ(CalledCoordinator(*r.subs["loss-compare"], row.traits, *row.common), "10.0.0.5:1");
  }
  {
    Registered r;  // `up` listens at its --coordinator; it sends no credentials there
    ASSERT_EQ(r.Parse({"up", "--workers", "1", "--coordinator", "10.0.0.5:1"}), "up");
    const Command& up = r.Row("up");
    EXPECT_EQ(CalledCoordinator(*r.subs["up"], up.traits, *up.common), "");
  }
  {
    Registered r;
    EXPECT_EQ(r.Parse({"list", "--output", "yaml"}), "");  // refused by CLI11
  }
}

TEST(CommandTableTest, AnUnknownCommandSuggestsTheNearestOne) {
  const std::vector<Command> commands = Commands();
  EXPECT_EQ(UnknownCommandMessage("sumbit", commands),
            "unknown command \"sumbit\"; did you mean \"submit\"?\n"
            "Run 'ringctl --help' for the list of commands.");
  EXPECT_NE(UnknownCommandMessage("wach", commands).find("did you mean \"watch\"?"),
            std::string::npos);
  // Nothing close: no guess, only where the list is.
  EXPECT_EQ(UnknownCommandMessage("frobnicate", commands),
            "unknown command \"frobnicate\"\nRun 'ringctl --help' for the list of commands.");
}

}  // namespace
}  // namespace ringtrain
