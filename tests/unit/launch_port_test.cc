// The MASTER_PORT pick: a port bound on this machine, and an error naming a foreign address.
#include "worker/launcher/launch_port.h"

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

TEST(PickFreePortTest, BindsOnThisMachineAndNamesAForeignAddress) {
  const auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  // Below the ephemeral range, where no outgoing connection takes it before rank 0 binds it.
  EXPECT_GE(*port, 10000);
  EXPECT_LT(*port, EphemeralPortsStart());
  const auto foreign = PickFreePort("192.0.2.1");  // TEST-NET-1: never an address of this machine
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("'192.0.2.1'"), std::string::npos) << foreign.status();
}

}  // namespace
}  // namespace ringtrain
