// Every binary's --version: "<name> <version> (commit <commit>)", exit 0, the commit the source
// tree is at (common/version/version.h; written at build time by cmake/build_info.cmake).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "absl/strings/strip.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

// The commit the source tree is at, as the build writes it (12 hex digits); "" when git cannot say.
std::string SourceCommit() {
  const CommandResult head =
      RunCommand({"/usr/bin/git", "-C", SourceDir(), "rev-parse", "--short=12", "HEAD"});
  if (head.exit_code != 0) return "";
  return std::string(absl::StripAsciiWhitespace(head.output));
}

TEST(VersionTest, EveryBinaryPrintsTheVersionAndTheCommit) {
  const std::string commit = SourceCommit();
  const std::regex line(
      R"(([a-z-]+) (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown)(-modified)?\)\n)");
  for (const std::string name :
       {"ringctl", "ringtrain-coordinator", "ringtrain-worker", "ringtrain-trainer",
        "ringtrain-run", "ringtrain-tokenize", "ringtrain-health", "ringtrain-convert",
        "ringtrain-generate", "ringtrain-gpu-check", "ringtrain-bench"}) {
    const CommandResult result = RunCommand({BinDir() + "/" + name, "--version"});
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(result.output, m, line)) << name << ": " << result.output;
    EXPECT_EQ(m[1], name);
    if (!commit.empty()) EXPECT_EQ(m[3], commit) << name << " was built at another commit";
  }
}

}  // namespace
}  // namespace ringtrain::testing
