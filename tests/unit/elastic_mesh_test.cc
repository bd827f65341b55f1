// ElasticMeshFor (coordinator/elastic_mesh.h): the mesh of an elastic restart onto fewer workers —
// cp kept, the largest data-parallel degree that fits and divides the global batch, FSDP's shard
// degree kept when it can be, and a clear error when nothing smaller fits.
#include "coordinator/elastic_mesh.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/config/mesh.h"
#include "tests/unit/tiny_job_config.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kConfig = kTinyJobConfig;

// The config with `overrides` then `mesh.overrides`, checked to be the mesh it says.
void ExpectValid(const std::vector<std::string>& overrides, const ElasticMesh& mesh) {
  std::vector<std::string> all = overrides;
  all.insert(all.end(), mesh.overrides.begin(), mesh.overrides.end());
  absl::StatusOr<JobConfig> config = ParseJobConfig(kConfig, all, "test");
  ASSERT_TRUE(config.ok()) << config.status();
  const absl::StatusOr<MeshDegrees> resolved = ResolveMesh(*config, mesh.degrees.world);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->dp(), mesh.degrees.dp);
  EXPECT_EQ(config->parallelism.context_parallel_degree, mesh.degrees.cp);
}

TEST(ElasticMeshTest, TheJobsOwnMeshWhenItFits) {
  const std::vector<std::string> o = {"parallelism.data_parallel_replicate_degree=2",
                                      "parallelism.context_parallel_degree=2"};
  absl::StatusOr<ElasticMesh> mesh = ElasticMeshFor(kConfig, o, 4);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->degrees.world, 4);
  EXPECT_TRUE(mesh->overrides.empty());
  EXPECT_TRUE(mesh->description.empty());
  EXPECT_EQ(ElasticMeshFor(kConfig, o, 9)->degrees.world, 4);
}

TEST(ElasticMeshTest, FewerReplicasWithTheSameGlobalBatchAndTheSameCp) {
  const std::vector<std::string> o = {"parallelism.data_parallel_replicate_degree=4",
                                      "parallelism.context_parallel_degree=2"};
  // 7 workers: dp 3 × cp 2 = 6 fits, but 3 × 2 does not divide the global batch 8; dp 2 does.
  absl::StatusOr<ElasticMesh> mesh = ElasticMeshFor(kConfig, o, 7);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->degrees.world, 4);
  EXPECT_EQ(mesh->degrees.dp, 2);
  EXPECT_EQ(mesh->degrees.cp, 2);
  EXPECT_THAT(mesh->overrides, ElementsAre("parallelism.data_parallel_replicate_degree=2",
                                           "parallelism.data_parallel_shard_degree=1",
                                           "training.global_batch_size=8"));
  EXPECT_EQ(mesh->description,
            "elastic: data parallel 4 -> 2 (world 8 -> 4, cp 2 kept); global batch 8 kept as 2 "
            "micro-batches of 2 per rank");
  ExpectValid(o, *mesh);
  absl::StatusOr<JobConfig> config = ParseJobConfig(
      kConfig, {o[0], o[1], mesh->overrides[0], mesh->overrides[1], mesh->overrides[2]}, "test");
  EXPECT_EQ(ResolveMesh(*config, 4)->accumulation, 2);
}

TEST(ElasticMeshTest, AnExplicitGlobalBatchIsKept) {
  const std::vector<std::string> o = {"parallelism.data_parallel_replicate_degree=2",
                                      "training.global_batch_size=8"};
  absl::StatusOr<ElasticMesh> mesh = ElasticMeshFor(kConfig, o, 1);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->degrees.dp, 1);
  EXPECT_EQ(mesh->overrides.back(), "training.global_batch_size=8");
  ExpectValid(o, *mesh);
}

TEST(ElasticMeshTest, FsdpKeepsItsShardDegreeWhenItCanElseShardsOverAllRanks) {
  const std::vector<std::string> keep = {"parallelism.data_parallel_replicate_degree=2",
                                         "parallelism.data_parallel_shard_degree=2"};
  absl::StatusOr<ElasticMesh> kept = ElasticMeshFor(kConfig, keep, 3);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->degrees.dp, 2);
  EXPECT_THAT(kept->overrides, ElementsAre("parallelism.data_parallel_replicate_degree=1",
                                           "parallelism.data_parallel_shard_degree=2",
                                           "training.global_batch_size=8"));
  ExpectValid(keep, *kept);

  const std::vector<std::string> shard4 = {"parallelism.data_parallel_replicate_degree=1",
                                           "parallelism.data_parallel_shard_degree=4"};
  absl::StatusOr<ElasticMesh> resharded = ElasticMeshFor(kConfig, shard4, 3);
  ASSERT_TRUE(resharded.ok()) << resharded.status();
  EXPECT_EQ(resharded->degrees.dp, 2);
  EXPECT_THAT(resharded->overrides, ElementsAre("parallelism.data_parallel_replicate_degree=1",
                                                "parallelism.data_parallel_shard_degree=2",
                                                "training.global_batch_size=8"));
  ExpectValid(shard4, *resharded);

  // A filled shard degree (-1) fills again: only the replicas are named.
  const std::vector<std::string> filled = {"parallelism.data_parallel_replicate_degree=2",
                                           "parallelism.data_parallel_shard_degree=-1",
                                           "parallelism.context_parallel_degree=2"};
  absl::StatusOr<ElasticMesh> fill = ElasticMeshFor(kConfig, filled, 2);
  ASSERT_TRUE(fill.ok()) << fill.status();
  EXPECT_EQ(fill->degrees.world, 2);
  EXPECT_THAT(fill->overrides, ElementsAre("parallelism.data_parallel_replicate_degree=1",
                                           "training.global_batch_size=4"));
  ExpectValid(filled, *fill);
}

TEST(ElasticMeshTest, NoSmallerMeshIsAClearError) {
  // cp 4 is never shrunk: 3 workers cannot hold one ring.
  const std::vector<std::string> ring = {"parallelism.data_parallel_replicate_degree=2",
                                         "parallelism.context_parallel_degree=4",
                                         "training.seq_len=64"};
  absl::StatusOr<ElasticMesh> none = ElasticMeshFor(kConfig, ring, 3);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("no smaller mesh fits 3 workers: cp 4 is kept"));
  EXPECT_EQ(ElasticMeshFor("[model\n", {}, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ElasticMeshTest, ADegreeThatDoesNotDivideTheGlobalBatchIsSkipped) {
  // Global batch 9 in micro-batches of 3: dp 2 would need 6 a micro-step; dp 1 takes 3 of 3.
  const std::vector<std::string> odd = {"parallelism.data_parallel_replicate_degree=3",
                                        "training.local_batch_size=3",
                                        "training.global_batch_size=9"};
  absl::StatusOr<ElasticMesh> mesh = ElasticMeshFor(kConfig, odd, 2);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->degrees.dp, 1);
  EXPECT_THAT(mesh->description, HasSubstr("global batch 9 kept as 3 micro-batches of 3"));
  ExpectValid(odd, *mesh);
}

}  // namespace
}  // namespace ringtrain
