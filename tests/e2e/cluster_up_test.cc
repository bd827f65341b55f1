// `ringctl up` as a new user runs it, with the real binaries: each worker folder's agent registers
// under the folder's name (--worker-id), so `ringctl workers`, `top` and the logs name the folders
// on disk; an agent asking for an id a live worker holds is refused, naming the holder's host.
#include <signal.h>

#include <filesystem>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::set<std::string> WorkerIds(const std::string& address) {
  const CommandResult listed =
      RunCommand({BinDir() + "/ringctl", "workers", "--coordinator", address, "--output", "json"});
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  std::set<std::string> ids;
  if (listed.exit_code != 0) return ids;
  for (const auto& w : nlohmann::json::parse(listed.output)) {
    ids.insert(w["worker_id"].get<std::string>());
  }
  return ids;
}

TEST(ClusterUpTest, EachFoldersAgentHasTheFoldersNameAsItsId) {
  TempDir dir;
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  const std::string cluster = dir / "cluster";
  const std::string out = dir / "up.out";
  Subprocess up = StartCommand({BinDir() + "/ringctl", "up", "--workers", "3", "--listen", address,
                                "--dir", cluster, "--bin-dir", BinDir()},
                               out);
  ASSERT_TRUE(WaitFor([&] { return Has(ReadFile(out), "cluster up:"); }, 90)) << ReadFile(out);

  EXPECT_EQ(WorkerIds(address), (std::set<std::string>{"worker-0", "worker-1", "worker-2"}));
  for (int i = 0; i < 3; ++i) {
    const std::string name = "worker-" + std::to_string(i);
    EXPECT_TRUE(std::filesystem::is_directory(cluster + "/" + name));
    // The agent started in folder worker-i (its log is named after the folder) registered as it.
    EXPECT_THAT(ReadFile(cluster + "/logs/" + name + ".log"), HasSubstr("as worker " + name + " "));
  }

  // A fourth agent asking for worker-1: refused while worker-1 lives, with the holder named (it
  // keeps retrying, as an agent does for a coordinator it cannot use yet).
  const std::string extra_out = dir / "extra.out";
  Subprocess extra =
      StartCommand({BinDir() + "/ringtrain-worker", "--coordinator", address, "--worker-id",
                    "worker-1", "--host-label", "intruder", "--work-dir", dir / "extra",
                    "--metrics-address", "127.0.0.1:" + std::to_string(FreePort())},
                   extra_out);
  EXPECT_TRUE(WaitFor(
      [&] {
        return Has(ReadFile(extra_out),
                   "worker id \"worker-1\" is held by a live worker on host \"local\"");
      },
      30))
      << ReadFile(extra_out);
  EXPECT_EQ(WorkerIds(address), (std::set<std::string>{"worker-0", "worker-1", "worker-2"}));
  extra.Signal(SIGTERM);
  EXPECT_EQ(WaitCommand(extra, 30), 0) << ReadFile(extra_out);

  up.Signal(SIGTERM);
  EXPECT_EQ(WaitCommand(up, 30), 0) << ReadFile(out);
}

}  // namespace
}  // namespace ringtrain::testing
