// Shared snapshot buffers (worker/trainer/shared_floats.h): what the owner writes is what another
// mapping of its path reads, that mapping outlives the owner's, and a path that is missing or of
// another size is an error naming it rather than a wrong buffer.
#include "worker/trainer/shared_floats.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace ringtrain {
namespace {

TEST(SharedFloatsTest, TheBuddyReadsWhatTheOwnerWroteAfterTheOwnersMappingIsGone) {
  absl::StatusOr<SharedFloats> owner = CreateSharedFloats(1000);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->floats.numel(), 1000);
  const std::string path = SharedFloatsPath(getpid(), owner->fd);
  EXPECT_EQ(path.rfind("/proc/", 0), 0u) << path;
  absl::StatusOr<at::Tensor> buddy = OpenSharedFloats(path, 1000);
  ASSERT_TRUE(buddy.ok()) << buddy.status();

  const at::Tensor values = at::randn({1000});
  owner->floats.copy_(values);
  EXPECT_TRUE(at::equal(*buddy, values)) << "one memory, not a copy";
  owner->floats = at::Tensor();  // the owner's mapping and fd go, as when its process is killed
  EXPECT_TRUE(at::equal(*buddy, values));
  EXPECT_FALSE(OpenSharedFloats(path, 1000).ok()) << "its fd is closed";
}

TEST(SharedFloatsTest, AMissingOrMisSizedBufferIsRefusedNamingIt) {
  absl::StatusOr<SharedFloats> owner = CreateSharedFloats(64);
  ASSERT_TRUE(owner.ok()) << owner.status();
  const std::string path = SharedFloatsPath(getpid(), owner->fd);
  const absl::StatusOr<at::Tensor> other_size = OpenSharedFloats(path, 65);
  ASSERT_FALSE(other_size.ok());
  EXPECT_NE(other_size.status().message().find(path + " holds 256 bytes, not the 260"),
            std::string::npos)
      << other_size.status();

  const absl::StatusOr<at::Tensor> missing = OpenSharedFloats("/proc/self/fd/100000", 64);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("opening /proc/self/fd/100000"), std::string::npos)
      << missing.status();
  EXPECT_FALSE(CreateSharedFloats(0).ok());
}

}  // namespace
}  // namespace ringtrain
