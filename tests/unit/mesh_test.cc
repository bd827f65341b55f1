// ResolveMesh (common/config/mesh.h): -1 filling the world, explicit degrees, FSDP's shard degree,
// gradient accumulation, and every problem named with what would work.
#include "common/config/mesh.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ResolveMeshTest, MinusOneFillsTheWorld) {
  JobConfig config;
  config.parallelism.context_parallel_degree = 2;
  EXPECT_TRUE(ResolveMesh(config, 8).ok());
  EXPECT_EQ(ResolveMesh(config, 8)->dp(), 4);
  config.parallelism.context_parallel_degree = 1;
  EXPECT_TRUE(ResolveMesh(config, 1).ok());
  EXPECT_EQ(ResolveMesh(config, 1)->dp(), 1);
}

TEST(ResolveMeshTest, ExplicitDegreesMustMultiplyToTheWorld) {
  JobConfig config;
  config.parallelism.data_parallel_replicate_degree = 2;
  config.parallelism.context_parallel_degree = 2;
  EXPECT_TRUE(ResolveMesh(config, 4).ok());
  EXPECT_EQ(ResolveMesh(config, 4)->dp(), 2);
  const absl::Status status = ResolveMesh(config, 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr(
          "parallelism: data_parallel_replicate_degree (2) × data_parallel_shard_degree (1) × "
          "context_parallel_degree (2) = 4 but the world size is 3"));
}

TEST(ResolveMeshTest, ShardDegreeSplitsTheDataParallelRanks) {
  JobConfig config;
  config.parallelism.data_parallel_shard_degree = 2;
  config.parallelism.context_parallel_degree = 2;
  ASSERT_TRUE(ResolveMesh(config, 8).ok());
  const MeshDegrees mesh = *ResolveMesh(config, 8);
  EXPECT_EQ(mesh.replicate, 2);
  EXPECT_EQ(mesh.shard, 2);
  EXPECT_EQ(mesh.dp(), 4);
  EXPECT_EQ(mesh.fsdp(), 4);
  // -1 shard fills the world; an unset replicate then means 1, as in torchtitan.
  config.parallelism.data_parallel_shard_degree = -1;
  ASSERT_TRUE(ResolveMesh(config, 8).ok());
  EXPECT_EQ(ResolveMesh(config, 8)->shard, 4);
  EXPECT_EQ(ResolveMesh(config, 8)->replicate, 1);
  config.parallelism.data_parallel_replicate_degree = 2;
  EXPECT_EQ(ResolveMesh(config, 8)->shard, 2);
}

TEST(ResolveMeshTest, ShardDegreeThatDoesNotDivideTheWorldIsNamed) {
  JobConfig config;
  config.parallelism.data_parallel_shard_degree = 3;
  EXPECT_THAT(std::string(ResolveMesh(config, 4).status().message()),
              HasSubstr("data_parallel_replicate_degree = -1 cannot fill the world size 4: it is "
                        "not divisible by "
                        "data_parallel_shard_degree (3) × context_parallel_degree (1) = 3"));
  config.parallelism.data_parallel_replicate_degree = 1;
  EXPECT_THAT(std::string(ResolveMesh(config, 4).status().message()),
              HasSubstr("data_parallel_replicate_degree (1) × data_parallel_shard_degree (3) × "
                        "context_parallel_degree (1) = 3 but the world size is 4"));
}

TEST(ResolveMeshTest, GlobalBatchMustBeWholeMicroBatchesOfTheMesh) {
  JobConfig config;
  config.training.local_batch_size = 2;
  config.training.global_batch_size = 8;
  ASSERT_TRUE(ResolveMesh(config, 2).ok());
  EXPECT_EQ(ResolveMesh(config, 2)->accumulation, 2);
  EXPECT_EQ(ResolveMesh(config, 1)->accumulation, 4);
  EXPECT_THAT(
      std::string(ResolveMesh(config, 3).status().message()),
      HasSubstr(
          "training.global_batch_size = 8 must be a multiple of the data-parallel degree (3) × "
          "training.local_batch_size (2) = 6"));
  config.training.global_batch_size = -1;
  EXPECT_EQ(ResolveMesh(config, 3)->accumulation, 1);  // unset: one micro-batch per step
}

TEST(ResolveMeshTest, MinusOneNeedsCpToDivideTheWorld) {
  JobConfig config;
  config.parallelism.context_parallel_degree = 4;
  const absl::Status status = ResolveMesh(config, 6).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(status.message()),
      AllOf(HasSubstr(
                "data_parallel_replicate_degree = -1 cannot fill the world size 6: it is not "
                "divisible by data_parallel_shard_degree (1) × context_parallel_degree (4) = 4"),
            HasSubstr("divisors of 6: 1, 2, 3, 6")));
}

TEST(ResolveMeshTest, WorldSizeMustBePositive) {
  EXPECT_THAT(std::string(ResolveMesh(JobConfig{}, 0).status().message()),
              HasSubstr("world size = 0: must be > 0"));
}

TEST(ResolveMeshTest, SeqLenMustSplitIntoCpChunks) {
  JobConfig config;
  config.training.seq_len = 250;
  config.parallelism.context_parallel_degree = 2;
  const absl::Status status = ResolveMesh(config, 2).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(StartsWith("invalid mesh for world size 2:\n  "),
                    HasSubstr("training.seq_len = 250 must be divisible by 2 × "
                              "parallelism.context_parallel_degree = "
                              "2 × 2 = 4"),
                    HasSubstr("try training.seq_len = 248 or 252")));
  config.parallelism.context_parallel_load_balancer = LoadBalancer::kNone;
  EXPECT_TRUE(ResolveMesh(config, 2).ok());
}

TEST(ResolveMeshTest, ReportsMeshAndSeqLenTogether) {
  JobConfig config;
  config.training.seq_len = 250;
  config.parallelism.data_parallel_replicate_degree = 3;
  config.parallelism.context_parallel_degree = 2;
  const std::string message(ResolveMesh(config, 4).status().message());
  EXPECT_THAT(message, HasSubstr("= 6 but the world size is 4"));
  EXPECT_THAT(message, HasSubstr("training.seq_len = 250"));
}

TEST(ResolveMeshTest, ResolvedMeshCarriesWorldAndAccumulation) {
  JobConfig config;
  config.parallelism.context_parallel_degree = 2;
  config.training.local_batch_size = 2;
  config.training.global_batch_size = 8;
  const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(config, 4);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->world, 4);
  EXPECT_EQ(mesh->dp(), 2);
  EXPECT_EQ(mesh->accumulation, 2);
  EXPECT_EQ(RequestedWorldSize(config), 2);
}

}  // namespace
}  // namespace ringtrain
