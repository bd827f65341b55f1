// The MASTER_PORT pick: a port bound on this machine, and an error naming a foreign address.
#include "worker/launcher/launch_port.h"

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

TEST(PickFreePortTest, BindsOnThisMachineAndNamesAForeignAddress) {
  const auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LE(*port, 65535);
  const auto foreign = PickFreePort("192.0.2.1");  // TEST-NET-1: never an address of this machine
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("'192.0.2.1'"), std::string::npos) << foreign.status();
}

}  // namespace
}  // namespace ringtrain
