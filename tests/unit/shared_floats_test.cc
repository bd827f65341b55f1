// Shared snapshot buffers (worker/trainer/shared_floats.h): what the owner writes is what the
// buddy's mapping reads, the buddy's mapping outlives the owner's and the name, and a name that
// is taken, missing or of another size is an error rather than a wrong buffer.
#include "worker/trainer/shared_floats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <random>

namespace ringtrain {
namespace {

// A name no other test process uses.
std::string TestName(int slot) {
  static const int64_t nonce = int64_t(std::random_device{}() & 0x7fffffff);
  return SharedFloatsName(getpid(), nonce, slot);
}

TEST(SharedFloatsTest, TheBuddyReadsWhatTheOwnerWroteAfterTheOwnerAndTheNameAreGone) {
  const std::string name = TestName(0);
  absl::StatusOr<at::Tensor> owner = CreateSharedFloats(name, 1000);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->numel(), 1000);
  absl::StatusOr<at::Tensor> buddy = OpenSharedFloats(name, 1000);
  ASSERT_TRUE(buddy.ok()) << buddy.status();
  UnlinkSharedFloats(name);
  EXPECT_FALSE(OpenSharedFloats(name, 1000).ok()) << "unlinked";

  const at::Tensor values = at::randn({1000});
  owner->copy_(values);
  EXPECT_TRUE(at::equal(*buddy, values)) << "one memory, not a copy";
  *owner = at::Tensor();  // the owner's mapping goes, as when its process is killed
  EXPECT_TRUE(at::equal(*buddy, values));
}

TEST(SharedFloatsTest, ATakenMissingOrMisSizedNameIsRefusedNamingIt) {
  const std::string name = TestName(1);
  absl::StatusOr<at::Tensor> owner = CreateSharedFloats(name, 64);
  ASSERT_TRUE(owner.ok()) << owner.status();
  const absl::StatusOr<at::Tensor> again = CreateSharedFloats(name, 64);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find(name), std::string::npos) << again.status();

  const absl::StatusOr<at::Tensor> other_size = OpenSharedFloats(name, 65);
  ASSERT_FALSE(other_size.ok());
  EXPECT_NE(other_size.status().message().find("256 bytes, not the 260 expected"),
            std::string::npos)
      << other_size.status();
  UnlinkSharedFloats(name);

  const absl::StatusOr<at::Tensor> missing = OpenSharedFloats(TestName(2), 64);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(TestName(2)), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace ringtrain
