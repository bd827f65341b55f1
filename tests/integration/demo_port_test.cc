// scripts/demo.sh when something already answers on its coordinator port: it stops at once with
// an error naming the address and how to choose another port, before installing, building,
// starting or submitting anything.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

TEST(DemoPortTest, StopsWhenThePortAlreadyAnswers) {
  // A listener on a free port, standing in for another cluster's coordinator.
  const int port = FreePort();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);

  TempDir dir;
  Subprocess demo = StartCommand({SourceDir() + "/scripts/demo.sh", "--training.steps=1"},
                                 dir / "demo.txt", "", {"RINGTRAIN_PORT=" + std::to_string(port)});
  EXPECT_EQ(WaitCommand(demo, 30), 1);
  close(fd);
  const std::string output = ReadFile(dir / "demo.txt");
  EXPECT_NE(output.find("something already answers on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("RINGTRAIN_PORT="), std::string::npos) << output;
  // Stopped before anything: no build, no cluster, no job.
  EXPECT_EQ(output.find("demo: building"), std::string::npos) << output;
  EXPECT_EQ(output.find("submitted job-"), std::string::npos) << output;
}

}  // namespace
}  // namespace ringtrain::testing
