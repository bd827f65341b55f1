// The shard index and the shard planning (common/safetensors/index.h).
#include "common/safetensors/index.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gmock/gmock.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

TEST(SafetensorsIndexTest, ParsesWhatTransformersWrites) {
  // transformers 5 adds total_parameters; 4.x writes only total_size.
  absl::StatusOr<SafetensorsIndex> index = SafetensorsIndex::Parse(
      R"({"metadata": {"total_parameters": 3, "total_size": 12},
          "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
                         "model.norm.weight": "model-00001-of-00002.safetensors"}})",
      "m/model.safetensors.index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->total_size, 12u);
  EXPECT_EQ(index->weight_map, (std::map<std::string, std::string>{
                                   {"lm_head.weight", "model-00002-of-00002.safetensors"},
                                   {"model.norm.weight", "model-00001-of-00002.safetensors"}}));
}

TEST(SafetensorsIndexTest, MetadataIsOptional) {
  absl::StatusOr<SafetensorsIndex> index =
      SafetensorsIndex::Parse(R"({"weight_map": {"a": "a.safetensors"}})", "i.json");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->total_size, 0u);
}

TEST(SafetensorsIndexTest, RefusesMalformedIndexes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not JSON"},
      {"[]", "not a JSON object"},
      {R"({"metadata": {}})", "no \"weight_map\""},
      {R"({"weight_map": ["a"]})", "\"weight_map\" is not a JSON object"},
      {R"({"weight_map": {"a": 1}})", "weight_map[\"a\"] is number"},
      {R"({"metadata": 5, "weight_map": {}})", "\"metadata\" is not a JSON object"},
      {R"({"metadata": {"total_size": -1}, "weight_map": {}})", "metadata.total_size is -1"},
      {R"({"metadata": {"total_size": "12"}, "weight_map": {}})", "metadata.total_size"},
      {R"({"weight_map": {"a": "../secret.safetensors"}})", "not the name of a file"},
      {R"({"weight_map": {"a": "sub/x.safetensors"}})", "not the name of a file"},
      {R"({"weight_map": {"a": ".."}})", "not the name of a file"},
      {R"({"weight_map": {"a": "."}})", "not the name of a file"},
      {R"({"weight_map": {"a": ""}})", "not the name of a file"},
      {R"({"weight_map": {"a": "/etc/passwd"}})", "not the name of a file"},
  };
  for (const auto& [text, what] : cases) {
    absl::StatusOr<SafetensorsIndex> index = SafetensorsIndex::Parse(text, "dir/index.json");
    ASSERT_FALSE(index.ok()) << text;
    EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_THAT(std::string(index.status().message()), HasSubstr("dir/index.json")) << text;
    EXPECT_THAT(std::string(index.status().message()), HasSubstr(what)) << text;
  }
}

TEST(SafetensorsIndexTest, ToJsonIsTransformersLayout) {
  SafetensorsIndex index;
  index.total_size = 1234;
  index.weight_map = {{"model.norm.weight", "model-00002-of-00002.safetensors"},
                      {"lm_head.weight", "model-00001-of-00002.safetensors"}};
  EXPECT_EQ(index.ToJson(),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 1234\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"lm_head.weight\": \"model-00001-of-00002.safetensors\",\n"
            "    \"model.norm.weight\": \"model-00002-of-00002.safetensors\"\n"
            "  }\n"
            "}\n");
  absl::StatusOr<SafetensorsIndex> back = SafetensorsIndex::Parse(index.ToJson(), "i.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->total_size, index.total_size);
  EXPECT_EQ(back->weight_map, index.weight_map);
}

TEST(PlanShardsTest, StartsANewShardWhenTheNextTensorWouldExceedTheCap) {
  using Plan = std::vector<std::vector<size_t>>;
  EXPECT_EQ(PlanShards({4, 4, 4, 4}, 8), (Plan{{0, 1}, {2, 3}}));
  EXPECT_EQ(PlanShards({4, 5, 3, 1}, 8), (Plan{{0}, {1, 2}, {3}}));
  EXPECT_EQ(PlanShards({1, 2, 3}, 100), (Plan{{0, 1, 2}}));
  EXPECT_EQ(PlanShards({}, 8), Plan{});
  EXPECT_EQ(PlanShards({0, 0}, 1), (Plan{{0, 1}}));
}

// As huggingface_hub: the big tensor is a shard of its own where it is met, and the shard being
// filled goes on after it.
TEST(PlanShardsTest, PutsATensorOverTheCapAloneWhereItIsMet) {
  using Plan = std::vector<std::vector<size_t>>;
  EXPECT_EQ(PlanShards({3, 20, 4, 2}, 8), (Plan{{1}, {0, 2}, {3}}));
  EXPECT_EQ(PlanShards({20, 30}, 8), (Plan{{0}, {1}}));
}

TEST(ShardFileNameTest, IsTransformersNaming) {
  EXPECT_EQ(ShardFileName(0, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(ShardFileName(11, 12), "model-00012-of-00012.safetensors");
}

TEST(ShardSizeTest, ReadsTransformersSpellings) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"12345", 12345},
      {"100KB", 100000},
      {"500MB", 500000000},
      {"5GB", 5000000000},
      {"5gb", 625000000},  // a lower-case final b is bits, as convert_file_size_to_int reads it
      {"1KiB", 1024},
      {"3MiB", 3u << 20},
      {"2GiB", uint64_t{2} << 30},
      {"2gib", uint64_t{2} << 30},
      {" 10 GB ", 10000000000},
  };
  for (const auto& [text, bytes] : cases) {
    absl::StatusOr<uint64_t> size = ParseShardSize(text);
    ASSERT_TRUE(size.ok()) << text << ": " << size.status();
    EXPECT_EQ(*size, bytes) << text;
  }
}

TEST(ShardSizeTest, RefusesOtherTextNamingIt) {
  for (const char* text : {"", "GB", "5TB", "1.5GB", "-5GB", "0", "0GB", "5 G", "abc",
                           "99999999999999999999", "99999999999GiB"}) {
    absl::StatusOr<uint64_t> size = ParseShardSize(text);
    ASSERT_FALSE(size.ok()) << text;
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(size.status().message()), HasSubstr("\"" + std::string(text) + "\""));
    EXPECT_THAT(std::string(size.status().message()), HasSubstr("GiB"));
  }
}

}  // namespace
}  // namespace ringtrain
