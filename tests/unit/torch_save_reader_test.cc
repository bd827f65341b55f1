// OpenTorchSaveReader against ReadStateDict on files Python's torch.save writes at test time: every
// range of every floating tensor is the whole read's elements, a row-major run costs exactly its
// bytes, a strided view its storage record, and damage is DATA_LOSS naming the file.
#include "worker/engine/serialize/torch_save_reader.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include "tests/integration/test_util.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {
namespace {

constexpr char kFixtures[] = R"PY(
import os, sys, zipfile
import torch
os.chdir(sys.argv[1])
torch.manual_seed(0)
torch.save({'a': torch.randn(5, 7), 'b16': torch.randn(3, 5).bfloat16(),
            'h': torch.randn(9).half(), 'd': torch.randn(2, 3).double(),
            'ids': torch.arange(4), 'scalar': torch.tensor(2.5), 'empty': torch.empty(0, 3),
            'big': torch.randn(70000)}, 'plain.pt')
w = torch.randn(4, 6)
torch.save({'rows': w[1:3], 'tail_of_t': w.t()[2:], 'odd_cols': w[:, 1::2], 'whole': w,
            'one': w[2, 3]}, 'views.pt')
# The same archive with every record deflated: no byte ranges to read.
with zipfile.ZipFile('plain.pt') as src, \
     zipfile.ZipFile('deflated.pt', 'w', zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        dst.writestr(info.filename, src.read(info))
)PY";

class TorchSaveReaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    std::ofstream(*dir_ / "fixtures.py") << kFixtures;
    const testing::CommandResult made =
        testing::RunCommand({testing::PythonPath(), *dir_ / "fixtures.py", dir_->path()});
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Path(const std::string& name) { return *dir_ / name; }

  static testing::TempDir* dir_;
};

testing::TempDir* TorchSaveReaderTest::dir_ = nullptr;

// Each floating tensor of `path`, read by the ranges below, equals ReadStateDict's elements;
// returns the bytes each range cost, by tensor name.
void ExpectRangesMatchTheWholeRead(const std::string& path,
                                   std::vector<std::pair<std::string, uint64_t>>* costs) {
  absl::StatusOr<StateDict> whole = ReadStateDict(path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<std::unique_ptr<StateReader>> reader = OpenTorchSaveReader(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->tensors().size(), whole->size());
  for (const auto& [name, tensor] : *whole) {
    const auto stored = (*reader)->tensors().find(name);
    ASSERT_NE(stored, (*reader)->tensors().end()) << name;
    EXPECT_EQ(stored->second.shape, tensor.sizes().vec()) << name;
    EXPECT_EQ(stored->second.floating, tensor.is_floating_point()) << name;
    if (!tensor.is_floating_point()) continue;
    const int64_t n = tensor.numel();
    const std::vector<std::pair<int64_t, int64_t>> ranges = {
        {0, n}, {0, n / 2}, {n / 3, n}, {n / 2, std::min(n, n / 2 + 1)}};
    for (const auto& [begin, end] : ranges) {
      at::Tensor out = at::full({end - begin}, -1.0, at::kDouble);
      const uint64_t before = (*reader)->bytes_read();
      const absl::Status read = (*reader)->Read(name, begin, end, out);
      ASSERT_TRUE(read.ok()) << name << " [" << begin << ", " << end << "): " << read;
      EXPECT_TRUE(at::equal(out, tensor.reshape(-1).narrow(0, begin, end - begin).to(at::kDouble)))
          << name << " [" << begin << ", " << end << ")";
      if (costs != nullptr) costs->emplace_back(name, (*reader)->bytes_read() - before);
    }
  }
}

TEST_F(TorchSaveReaderTest, EveryRangeIsTheWholeReadsElementsAndCostsOnlyItsBytes) {
  std::vector<std::pair<std::string, uint64_t>> costs;
  ExpectRangesMatchTheWholeRead(Path("plain.pt"), &costs);
  const absl::StatusOr<StateDict> whole = ReadStateDict(Path("plain.pt"));
  ASSERT_TRUE(whole.ok());
  std::map<std::string, at::Tensor> by_name(whole->begin(), whole->end());
  std::map<std::string, int> seen;
  for (const auto& [name, bytes] : costs) {
    const int64_t n = by_name.at(name).numel();
    const std::vector<int64_t> lengths = {n, n / 2, n - n / 3, std::min(n, n / 2 + 1) - n / 2};
    EXPECT_EQ(bytes, uint64_t(lengths.at(seen[name]++)) * by_name.at(name).element_size()) << name;
  }
}

TEST_F(TorchSaveReaderTest, ViewsReadTheirOwnRunOrTheirStorageRecord) {
  std::vector<std::pair<std::string, uint64_t>> costs;
  ExpectRangesMatchTheWholeRead(Path("views.pt"), &costs);
  const uint64_t storage_bytes = 4 * 6 * sizeof(float);
  std::map<std::string, uint64_t> largest;
  for (const auto& [name, bytes] : costs) largest[name] = std::max(largest[name], bytes);
  EXPECT_EQ(largest["rows"], 2 * 6 * sizeof(float));  // a row-major run at an offset
  EXPECT_EQ(largest["whole"], storage_bytes);
  EXPECT_EQ(largest["one"], sizeof(float));
  EXPECT_EQ(largest["tail_of_t"], storage_bytes);  // strided: the record
  EXPECT_EQ(largest["odd_cols"], storage_bytes);
}

TEST_F(TorchSaveReaderTest, ACompressedArchiveIsReadWhole) {
  ExpectRangesMatchTheWholeRead(Path("deflated.pt"), nullptr);
}

TEST_F(TorchSaveReaderTest, DamageIsDataLossNamingTheFile) {
  std::ifstream in(Path("plain.pt"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  // Truncated anywhere: opening (or, past the directory, reading) fails.
  const std::string truncated = Path("truncated.pt");
  for (size_t length = 0; length < bytes.size(); length += 1 + length / 16) {
    std::ofstream(truncated, std::ios::binary | std::ios::trunc).write(bytes.data(), length);
    absl::StatusOr<std::unique_ptr<StateReader>> reader = OpenTorchSaveReader(truncated);
    ASSERT_FALSE(reader.ok()) << "length " << length;
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss) << reader.status();
    EXPECT_NE(reader.status().message().find(truncated), absl::string_view::npos);
  }
  // A flipped byte inside tensor 'a''s record: a read of the whole record fails its CRC-32.
  caffe2::serialize::PyTorchStreamReader zip(Path("plain.pt"));
  std::string key;
  for (const std::string& record : zip.getAllRecords()) {
    if (record.rfind("data/", 0) == 0 && zip.getRecordSize(record) == 5 * 7 * sizeof(float)) {
      key = record;
    }
  }
  ASSERT_FALSE(key.empty());
  std::string flipped = bytes;
  flipped[zip.getRecordOffset(key) + 3] ^= 0x40;
  const std::string damaged = Path("flipped.pt");
  std::ofstream(damaged, std::ios::binary | std::ios::trunc).write(flipped.data(), flipped.size());
  absl::StatusOr<std::unique_ptr<StateReader>> reader = OpenTorchSaveReader(damaged);
  ASSERT_TRUE(reader.ok()) << reader.status();
  at::Tensor out = at::empty({35}, at::kFloat);
  const absl::Status read = (*reader)->Read("a", 0, 35, out);
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << read;
  EXPECT_NE(read.message().find("CRC-32"), absl::string_view::npos) << read;
  EXPECT_NE(read.message().find(damaged), absl::string_view::npos) << read;
  // Asked for what it does not hold: NOT_FOUND; outside the tensor: INVALID_ARGUMENT.
  EXPECT_EQ((*reader)->Read("nope", 0, 1, out.narrow(0, 0, 1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*reader)->Read("h", 5, 10, out.narrow(0, 0, 5)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenTorchSaveReader(Path("no_such.pt")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringtrain
