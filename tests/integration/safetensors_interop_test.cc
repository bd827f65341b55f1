// ringtrain's safetensors code (common/safetensors/) against Hugging Face's own, on the project
// venv (tests/parity/safetensors_reference.py): Python's safetensors reads what WriteSafetensors
// wrote bit for bit and, given the tensors in its own order, writes the same bytes; the index is
// the text transformers writes; PlanShards splits as huggingface_hub does; ParseShardSize reads
// sizes as transformers does.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/safetensors/index.h"
#include "common/safetensors/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

using nlohmann::json;

std::string Script() { return SourceDir() + "/tests/parity/safetensors_reference.py"; }

// Runs the reference; its stdout, or a failed assertion (with the output) when it fails.
std::string RunReferenceText(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {PythonPath(), Script()};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult ran = RunCommand(argv);
  EXPECT_EQ(ran.exit_code, 0) << "the reference needs the venv's safetensors, huggingface_hub and "
                                 "transformers (tests/parity/requirements.txt):\n"
                              << ran.output;
  return ran.exit_code == 0 ? ran.output : "";
}

// The reference's stdout as JSON (null when it failed).
json RunReference(const std::vector<std::string>& args) {
  const std::string output = RunReferenceText(args);
  const size_t start = output.find_first_of("{[");
  return start == std::string::npos ? json() : json::parse(output.substr(start));
}

// A tensor with arbitrary bits (NaNs and infinities included): what is written must come back.
struct Tensor {
  std::string name;
  TensorDtype dtype;
  std::vector<int64_t> shape;
  std::vector<uint32_t> bits;  // one per element, the low 16 bits for BF16/F16
  std::string bytes;           // little-endian, as written

  TensorOut Out() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

Tensor MakeTensor(const std::string& name, TensorDtype dtype, std::vector<int64_t> shape,
                  std::mt19937* rng) {
  Tensor t{name, dtype, std::move(shape), {}, {}};
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  const uint64_t width = TensorDtypeSize(dtype);
  for (int64_t i = 0; i < numel; ++i) {
    const uint32_t bits = width == 4 ? (*rng)() : (*rng)() & 0xFFFF;
    t.bits.push_back(bits);
    t.bytes.append(reinterpret_cast<const char*>(&bits), width);  // little-endian host
  }
  return t;
}

TEST(SafetensorsInteropTest, PythonReadsWhatWeWriteBitForBit) {
  std::mt19937 rng(28);
  const std::vector<Tensor> tensors = {
      MakeTensor("model.layers.0.self_attn.q_proj.weight", TensorDtype::kF32, {3, 5}, &rng),
      MakeTensor("model.norm.weight", TensorDtype::kBF16, {7}, &rng),
      MakeTensor("lm_head.weight", TensorDtype::kF16, {2, 2, 2}, &rng),
      MakeTensor("scalar", TensorDtype::kF32, {}, &rng),
      MakeTensor("empty", TensorDtype::kF16, {0, 4}, &rng),
      MakeTensor("big", TensorDtype::kBF16, {64, 33}, &rng),
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"ringtrain_step", "12"}};
  std::vector<TensorOut> out;
  for (const Tensor& t : tensors) out.push_back(t.Out());
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, out, metadata).ok());

  const json read = RunReference({"read", path});
  ASSERT_TRUE(read.is_object());
  EXPECT_EQ((read["metadata"].get<std::map<std::string, std::string>>()), metadata);
  ASSERT_EQ(read["tensors"].size(), tensors.size());
  for (const Tensor& t : tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(read["tensors"].contains(t.name));
    const json& got = read["tensors"][t.name];
    EXPECT_EQ(got["dtype"].get<std::string>(), TensorDtypeName(t.dtype));
    EXPECT_EQ(got["shape"].get<std::vector<int64_t>>(), t.shape);
    EXPECT_EQ(got["bits"].get<std::vector<uint32_t>>(), t.bits);
  }
}

// The Rust crate orders tensors by dtype (F32, then BF16, then F16) then name; given that order
// and one metadata key (its map has no order), both writers must give the same file.
TEST(SafetensorsInteropTest, WritesTheBytesPythonWrites) {
  std::mt19937 rng(3);
  const std::vector<Tensor> tensors = {
      MakeTensor("a.weight", TensorDtype::kF32, {4, 3}, &rng),
      MakeTensor("b", TensorDtype::kF32, {}, &rng),
      MakeTensor("c.weight", TensorDtype::kBF16, {5}, &rng),
      MakeTensor("z.weight", TensorDtype::kBF16, {2, 0}, &rng),
      MakeTensor("m.weight", TensorDtype::kF16, {3, 3}, &rng),
  };
  std::vector<TensorOut> out;
  for (const Tensor& t : tensors) out.push_back(t.Out());
  TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / "ours.safetensors", out, {{"format", "pt"}}).ok());
  RunReferenceText({"resave", dir / "ours.safetensors", dir / "python.safetensors"});
  EXPECT_EQ(ReadFile(dir / "ours.safetensors"), ReadFile(dir / "python.safetensors"));
  // And the C++ reader reads Python's file as it reads its own.
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(dir / "python.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->header().tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& entry = file->header().tensors[i];
    EXPECT_EQ(entry.name, tensors[i].name);
    std::string bytes(entry.end - entry.begin, '\0');
    ASSERT_TRUE(file->Read(entry, bytes.data()).ok());
    EXPECT_EQ(bytes, tensors[i].bytes) << entry.name;
  }
}

TEST(SafetensorsInteropTest, IndexJsonIsWhatTransformersWrites) {
  SafetensorsIndex index;
  index.total_size = 16060522496;
  index.weight_map = {{"model.embed_tokens.weight", ShardFileName(0, 2)},
                      {"model.layers.10.mlp.up_proj.weight", ShardFileName(1, 2)},
                      {"model.layers.2.mlp.up_proj.weight", ShardFileName(0, 2)},
                      {"lm_head.weight", ShardFileName(1, 2)},
                      {"caf\xc3\xa9", ShardFileName(1, 2)}};  // non-ASCII: escaped as \u00e9
  TempDir dir;
  WriteFile(dir / "index.json", index.ToJson());
  EXPECT_EQ(index.ToJson(), RunReferenceText({"index-json", dir / "index.json"}));
}

TEST(SafetensorsInteropTest, PlanShardsSplitsAsHuggingfaceHub) {
  const std::vector<std::pair<uint64_t, std::vector<uint64_t>>> cases = {
      {8, {3, 20, 4, 2}}, {8, {4, 4, 4, 4}}, {100, {1, 2, 3}}, {10, {11, 1, 12, 9, 2, 10, 10}}};
  std::vector<std::string> args = {"plan"};
  for (const auto& [max_bytes, sizes] : cases) {
    args.push_back(std::to_string(max_bytes) + ":" + absl::StrJoin(sizes, ","));
  }
  const json reference = RunReference(args);
  ASSERT_EQ(reference.size(), cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::vector<std::vector<size_t>> plan = PlanShards(cases[c].second, cases[c].first);
    std::map<std::string, std::string> ours;
    for (size_t shard = 0; shard < plan.size(); ++shard) {
      const std::string file =
          plan.size() == 1 ? std::string(kSafetensorsFileName) : ShardFileName(shard, plan.size());
      for (size_t i : plan[shard]) ours["t" + std::to_string(i)] = file;
    }
    EXPECT_EQ(ours, (reference[c].get<std::map<std::string, std::string>>())) << reference[c];
  }
}

// Where transformers gives a positive size ours is the same; where it refuses (or gives 0 or a
// negative size) ours refuses. Ours also reads a plain integer given as text.
TEST(SafetensorsInteropTest, ShardSizeReadsAsTransformers) {
  const std::vector<std::string> texts = {"5GB",   "5gb",  "5Gb",  "500MB", "500mb", "100KB",
                                          "7kb",   "1KiB", "3MiB", "2GiB",  "2gib",  "5 GB",
                                          "1.5GB", "5TB",  "GB",   "-5GB",  "abc",   "0GB"};
  std::vector<std::string> args = {"sizes"};
  args.insert(args.end(), texts.begin(), texts.end());
  const json reference = RunReference(args);
  ASSERT_EQ(reference.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<uint64_t> ours = ParseShardSize(texts[i]);
    if (reference[i].is_number_integer() && reference[i].get<int64_t>() > 0) {
      ASSERT_TRUE(ours.ok()) << texts[i] << ": " << ours.status();
      EXPECT_EQ(*ours, reference[i].get<uint64_t>()) << texts[i];
    } else {
      EXPECT_FALSE(ours.ok()) << texts[i] << " gave " << *ours
                              << "; transformers: " << reference[i];
    }
  }
  EXPECT_EQ(*ParseShardSize("12345"), 12345u);
}

}  // namespace
}  // namespace ringtrain::testing
