// The smallest cp or shard degree whose plan fits a device (common/plan/fitting_degrees.h),
// checked against the plan itself: the degree fits, the one below it does not.
#include "common/plan/fitting_degrees.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

JobConfig Load(const std::string& name, const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"parallelism.data_parallel_replicate_degree=1",
                                  "parallelism.data_parallel_shard_degree=1",
                                  "parallelism.context_parallel_degree=1"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  absl::StatusOr<JobConfig> config = LoadJobConfig(testing::ConfigPath(name), all);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : JobConfig{};
}

// The plan of `config` with `cp` and `shard` set, on the world they make with replicate 1; nullopt
// when that mesh is not valid.
std::optional<MemoryPlan> PlanWith(JobConfig config, int64_t cp, int64_t shard) {
  config.parallelism.context_parallel_degree = cp;
  config.parallelism.data_parallel_shard_degree = shard;
  const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(config, cp * shard);
  if (!mesh.ok()) return std::nullopt;
  return PlanMemory(config, *mesh);
}

FittingDegrees Fit(const JobConfig& config, int64_t device) {
  const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(config, 1);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_FALSE(PlanMemory(config, *mesh).Fits(device)) << "the case must not fit as it is";
  return SmallestFittingDegrees(config, *mesh, PlanDevice::kCuda, device);
}

// `found` (a cp degree when `is_cp`, else a shard degree) fits, and no valid degree from 2 below
// it does.
void ExpectSmallestFitting(const JobConfig& config, int64_t device, int64_t found, bool is_cp) {
  for (int64_t d = 2; d <= found; ++d) {
    const std::optional<MemoryPlan> plan = is_cp ? PlanWith(config, d, 1) : PlanWith(config, 1, d);
    if (d == found) {
      ASSERT_TRUE(plan.has_value()) << d;
      EXPECT_TRUE(plan->Fits(device)) << d;
    } else if (plan.has_value()) {
      EXPECT_FALSE(plan->Fits(device)) << d;
    }
  }
}

// The debug model at 64k tokens on 1 GiB: activations dominate, so splitting the sequence helps;
// the first cp that fits is found, and every valid smaller one does not fit.
TEST(FittingDegreesTest, TheSmallestCpThatFits) {
  const JobConfig config =
      Load("debug_model.toml", {"training.seq_len=65536", "model.max_seq_len=65536"});
  const int64_t device = int64_t{1} << 30;
  const FittingDegrees fit = Fit(config, device);
  ASSERT_GT(fit.cp.degree, 1);
  EXPECT_EQ(fit.cp.world, fit.cp.degree);
  ExpectSmallestFitting(config, device, fit.cp.degree, /*is_cp=*/true);
  std::printf("debug model, seq 65536, 1 GiB: smallest cp %lld, smallest shard %lld\n",
              static_cast<long long>(fit.cp.degree), static_cast<long long>(fit.shard.degree));
}

// Llama 3 8B replicated needs 16 bytes a parameter for its float32 weights, gradients and AdamW
// state, more than 80 GiB: no cp helps (every CP rank holds them all), sharding does.
TEST(FittingDegreesTest, TheSmallestShardThatFits) {
  const JobConfig config =
      Load("llama3_8b.toml", {"training.seq_len=4096", "training.local_batch_size=1"});
  const int64_t device = int64_t{80} << 30;
  const FittingDegrees fit = Fit(config, device);
  EXPECT_EQ(fit.cp.degree, 0);
  ASSERT_GT(fit.shard.degree, 1);
  EXPECT_EQ(fit.shard.world, fit.shard.degree);
  ExpectSmallestFitting(config, device, fit.shard.degree, /*is_cp=*/false);
  std::printf("8B, seq 4096, 80 GiB: smallest shard %lld\n",
              static_cast<long long>(fit.shard.degree));
}

TEST(FittingDegreesTest, NoneWhenNothingCould) {
  const JobConfig config = Load("llama3_8b.toml", {});
  const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(config, 1);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const FittingDegrees fit = SmallestFittingDegrees(config, *mesh, PlanDevice::kCuda, 1024);
  EXPECT_EQ(fit.cp.degree, 0);
  EXPECT_EQ(fit.shard.degree, 0);
}

}  // namespace
}  // namespace ringtrain
