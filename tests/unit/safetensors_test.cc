// The safetensors reader and writer (common/safetensors/safetensors.h): every check of a corrupt
// header, a round trip, and a file written by Python's safetensors (tests/unit/fixtures/
// safetensors/make_fixture.py) read with the values it holds.
#include "common/safetensors/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gmock/gmock.h"

#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

// A file: the 8-byte length, `json` as the header, then `data_bytes` zero bytes.
std::string File(const std::string& json, uint64_t data_bytes = 0) {
  std::string out(8, '\0');
  const uint64_t length = json.size();
  std::memcpy(out.data(), &length, 8);
  return out + json + std::string(data_bytes, '\0');
}

absl::StatusOr<SafetensorsHeader> Parse(const std::string& file) {
  return ParseSafetensorsHeader(file, file.size(), "x.safetensors");
}

// The header must be refused as DATA_LOSS, naming the file and saying `what`.
void ExpectCorrupt(const std::string& file, const std::string& what) {
  absl::StatusOr<SafetensorsHeader> header = Parse(file);
  ASSERT_FALSE(header.ok()) << file.substr(8);
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss) << header.status();
  EXPECT_THAT(std::string(header.status().message()), HasSubstr("x.safetensors"));
  EXPECT_THAT(std::string(header.status().message()), HasSubstr(what));
}

std::string F32(const std::string& name, const std::string& shape, uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST(SafetensorsHeaderTest, ParsesEntriesSortedByOffset) {
  const std::string file =
      File("{\"__metadata__\":{\"format\":\"pt\"}," + F32("b", "[2]", 8, 16) + "," +
               F32("a", "[1,2]", 0, 8) + "," +
               "\"c\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[16,18]},"
               "\"d\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[18,18]}}  ",
           18);
  absl::StatusOr<SafetensorsHeader> header = Parse(file);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->data_start, file.size() - 18);
  EXPECT_EQ(header->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(header->tensors.size(), 4u);
  EXPECT_EQ(header->tensors[0].name, "a");
  EXPECT_EQ(header->tensors[0].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(header->tensors[1].name, "b");
  EXPECT_EQ(header->tensors[1].begin, 8u);
  EXPECT_EQ(header->tensors[2].name, "c");
  EXPECT_EQ(header->tensors[2].dtype, TensorDtype::kBF16);
  EXPECT_TRUE(header->tensors[2].shape.empty());
  EXPECT_EQ(header->tensors[3].name, "d");
  EXPECT_EQ(header->tensors[3].dtype, TensorDtype::kF16);
  EXPECT_EQ(header->tensors[3].end, 18u);
}

TEST(SafetensorsHeaderTest, AcceptsNoTensorsAndNullMetadata) {
  EXPECT_TRUE(Parse(File("{}")).ok());
  EXPECT_TRUE(Parse(File("{\"__metadata__\":null}")).ok());
}

TEST(SafetensorsHeaderTest, RefusesFewerThanEightBytes) { ExpectCorrupt("{}", "fewer than the 8"); }

TEST(SafetensorsHeaderTest, RefusesAHeaderOverTheCap) {
  std::string bytes(8, '\0');
  const uint64_t length = kMaxSafetensorsHeaderBytes + 1;
  std::memcpy(bytes.data(), &length, 8);
  absl::StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader(bytes, uint64_t{1} << 40, "x.safetensors");
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(header.status().message()), HasSubstr("over the limit"));
}

TEST(SafetensorsHeaderTest, RefusesAHeaderLongerThanTheFile) {
  ExpectCorrupt(File("{}").substr(0, 9), "truncated");
}

TEST(SafetensorsHeaderTest, RefusesBytesShorterThanTheHeader) {
  const std::string file = File("{}");
  absl::StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader(file.substr(0, 9), file.size(), "x.safetensors");
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(header.status().message()), HasSubstr("were read"));
}

TEST(SafetensorsHeaderTest, RefusesAHeaderThatIsNotAnObject) {
  ExpectCorrupt(File("[1, 2]"), "not a JSON object");
  ExpectCorrupt(File(" {}"), "not a JSON object");
  ExpectCorrupt(File(""), "not a JSON object");
}

TEST(SafetensorsHeaderTest, RefusesAHeaderThatIsNotJson) {
  ExpectCorrupt(File("{\"a\":"), "not JSON");
  ExpectCorrupt(File("{} x"), "not JSON");
  ExpectCorrupt(File("{\"\xff\":1}"), "not JSON");  // not UTF-8
}

TEST(SafetensorsHeaderTest, RefusesMetadataThatIsNotAStringMap) {
  ExpectCorrupt(File("{\"__metadata__\":[1]}"), "__metadata__ is not a JSON object");
  ExpectCorrupt(File("{\"__metadata__\":{\"format\":1}}"), "not a string");
}

TEST(SafetensorsHeaderTest, RefusesAnEntryThatIsNotAnObject) {
  ExpectCorrupt(File("{\"a\":[0,4]}"), "tensor 'a' is not a JSON object");
}

TEST(SafetensorsHeaderTest, RefusesAnEntryWithoutEachField) {
  ExpectCorrupt(File("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "has no \"dtype\"");
  ExpectCorrupt(File("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), "has no \"shape\"");
  ExpectCorrupt(File("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), "has no \"data_offsets\"");
}

TEST(SafetensorsHeaderTest, RefusesADtypeThatIsNotAString) {
  ExpectCorrupt(File("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "dtype is not a string");
}

TEST(SafetensorsHeaderTest, RefusesAnUnknownDtype) {
  ExpectCorrupt(File("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "unknown dtype \"F33\"");
}

TEST(SafetensorsHeaderTest, RefusesOtherDtypesNamingTheTensor) {
  for (const char* dtype : {"F64", "I64", "I32", "U8", "BOOL", "F8_E4M3"}) {
    const std::string file = File(
        std::string("{\"w\":{\"dtype\":\"") + dtype + "\",\"shape\":[1],\"data_offsets\":[0,8]}}",
        8);
    absl::StatusOr<SafetensorsHeader> header = Parse(file);
    EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument) << dtype;
    const std::string message(header.status().message());
    EXPECT_THAT(message, HasSubstr("tensor 'w' is " + std::string(dtype)));
    EXPECT_THAT(message, HasSubstr("F32, BF16 and F16"));
  }
}

TEST(SafetensorsHeaderTest, RefusesAShapeThatIsNotNonNegativeIntegers) {
  ExpectCorrupt(File("{" + F32("a", "4", 0, 4) + "}", 4), "shape is not an array");
  for (const char* shape : {"[-1]", "[2.0]", "[\"2\"]", "[[2]]", "[18446744073709551615]"}) {
    ExpectCorrupt(File("{" + F32("a", shape, 0, 8) + "}", 8), "not a list of non-negative");
  }
}

// The offsets [0, 0] match what a wrapped-around count would give, so only the check refuses.
TEST(SafetensorsHeaderTest, RefusesAnElementCountOverflow) {
  ExpectCorrupt(File("{" + F32("a", "[4294967296,4294967296]", 0, 0) + "}"),
                "more elements than 2^64");
  ExpectCorrupt(File("{" + F32("a", "[4611686018427387904]", 0, 0) + "}"), "more bytes than");
}

TEST(SafetensorsHeaderTest, RefusesOffsetsThatAreNotAPair) {
  for (const char* offsets : {"4", "[4]", "[0,4,8]", "[-1,3]", "[0,\"4\"]", "[0.0,4]"}) {
    ExpectCorrupt(File(std::string("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":") +
                           offsets + "}}",
                       4),
                  "is not [begin, end]");
  }
}

TEST(SafetensorsHeaderTest, RefusesOffsetsThatEndBeforeTheyBegin) {
  ExpectCorrupt(File("{" + F32("a", "[0]", 4, 0) + "}", 4), "end before they begin");
}

TEST(SafetensorsHeaderTest, RefusesOffsetsThatDoNotMatchTheShape) {
  ExpectCorrupt(File("{" + F32("a", "[3]", 0, 8) + "}", 8), "hold 8 bytes but F32 [3] needs 12");
}

TEST(SafetensorsHeaderTest, RefusesOffsetsBeyondTheFile) {
  ExpectCorrupt(File("{" + F32("a", "[2]", 0, 8) + "}", 4), "the file holds 4 bytes of data");
}

TEST(SafetensorsHeaderTest, RefusesBytesAfterTheLastTensor) {
  ExpectCorrupt(File("{" + F32("a", "[1]", 0, 4) + "}", 8), "4 bytes after the last tensor");
}

TEST(SafetensorsHeaderTest, RefusesOverlappingTensors) {
  ExpectCorrupt(File("{" + F32("a", "[2]", 0, 8) + "," + F32("b", "[2]", 4, 12) + "}", 12),
                "tensor 'b' [4, 12) overlaps tensor 'a' [0, 8)");
  // The same range twice.
  ExpectCorrupt(File("{" + F32("a", "[1]", 0, 4) + "," + F32("b", "[1]", 0, 4) + "}", 4),
                "overlaps");
}

TEST(SafetensorsHeaderTest, RefusesHoles) {
  ExpectCorrupt(File("{" + F32("a", "[1]", 0, 4) + "," + F32("b", "[1]", 8, 12) + "}", 12),
                "bytes [4, 8) of the data belong to no tensor");
  ExpectCorrupt(File("{" + F32("a", "[1]", 4, 8) + "}", 8), "bytes [0, 4)");
}

TEST(SafetensorsHeaderTest, RefusesDuplicateNames) {
  ExpectCorrupt(File("{" + F32("a", "[1]", 0, 4) + "," + F32("a", "[1]", 0, 4) + "}", 4),
                "names 'a' twice");
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(SafetensorsFileTest, WritesWhatItReadsBack) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.1f, -0.0f, 1e-30f};
  const std::vector<uint16_t> b = {0x3f80, 0xc049, 0x7f80};
  const std::vector<uint16_t> h = {0x3c00};
  const std::vector<TensorOut> out = {
      {"w", TensorDtype::kF32, {2, 3}, w.data(), w.size() * 4},
      {"b", TensorDtype::kBF16, {3}, b.data(), b.size() * 2},
      {"empty", TensorDtype::kF32, {0, 4}, nullptr, 0},
      {"h", TensorDtype::kF16, {}, h.data(), 2},
  };
  const std::string path = dir_ / "m.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, out, {{"format", "pt"}, {"step", "7"}}).ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsHeader& header = file->header();
  EXPECT_EQ(header.data_start % 8, 0u) << "the header is padded to 8 bytes";
  EXPECT_EQ(header.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}}));
  ASSERT_EQ(header.tensors.size(), 4u);  // in data order: the order written
  EXPECT_EQ(header.tensors[0].name, "w");
  EXPECT_EQ(header.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(header.tensors[1].name, "b");
  EXPECT_EQ(header.tensors[1].dtype, TensorDtype::kBF16);
  // "empty" and "h" start at the same offset; ties sort by end.
  EXPECT_EQ(header.tensors[2].name, "empty");
  EXPECT_EQ(header.tensors[3].name, "h");
  EXPECT_TRUE(header.tensors[3].shape.empty());

  std::vector<float> w_in(6);
  ASSERT_TRUE(file->Read(header.tensors[0], w_in.data()).ok());
  EXPECT_EQ(std::memcmp(w_in.data(), w.data(), 24), 0);
  std::vector<uint16_t> b_in(3);
  ASSERT_TRUE(file->Read(header.tensors[1], b_in.data()).ok());
  EXPECT_EQ(b_in, b);
  uint16_t h_in = 0;
  ASSERT_TRUE(file->Read(header.tensors[3], &h_in).ok());
  EXPECT_EQ(h_in, 0x3c00);

  // The same input gives the same bytes.
  const std::string again = dir_ / "again.safetensors";
  ASSERT_TRUE(WriteSafetensors(again, out, {{"step", "7"}, {"format", "pt"}}).ok());
  EXPECT_EQ(testing::ReadFile(path), testing::ReadFile(again));
}

TEST_F(SafetensorsFileTest, RefusesToWriteBadTensors) {
  const float x[2] = {1, 2};
  const std::vector<std::vector<TensorOut>> bad = {
      {{"a", TensorDtype::kF32, {2}, x, 8}, {"a", TensorDtype::kF32, {2}, x, 8}},
      {{"__metadata__", TensorDtype::kF32, {2}, x, 8}},
      {{"a", TensorDtype::kF32, {3}, x, 8}},
      {{"a", TensorDtype::kF32, {-2}, x, 8}},
      {{"a\xff", TensorDtype::kF32, {2}, x, 8}},
  };
  for (const std::vector<TensorOut>& tensors : bad) {
    absl::Status status = WriteSafetensors(dir_ / "bad.safetensors", tensors, {});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << tensors[0].name;
  }
}

TEST_F(SafetensorsFileTest, OpenSaysNotFoundForAMissingFile) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(dir_ / "missing.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("missing.safetensors"));
}

TEST_F(SafetensorsFileTest, OpenRefusesATruncatedFile) {
  const float x[4] = {1, 2, 3, 4};
  const std::string path = dir_ / "t.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"x", TensorDtype::kF32, {4}, x, 16}}, {}).ok());
  const std::string bytes = testing::ReadFile(path);
  for (size_t keep : {size_t{0}, size_t{5}, size_t{20}, bytes.size() - 1}) {
    testing::WriteFile(path, bytes.substr(0, keep));
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << keep;
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
  }
}

TEST_F(SafetensorsFileTest, ReadSaysDataLossWhenTheFileShrankAfterOpen) {
  const float x[4] = {1, 2, 3, 4};
  const std::string path = dir_ / "t.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"x", TensorDtype::kF32, {4}, x, 16}}, {}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(::truncate(path.c_str(), file->header().data_start + 10), 0);
  float in[4];
  absl::Status status = file->Read(file->header().tensors[0], in);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensor 'x'"));
}

// fixture.safetensors was written by Python's safetensors 0.8.0 (make_fixture.py beside it); the
// expected values are the bits torch gave those numbers in each dtype.
TEST(SafetensorsFixtureTest, ReadsWhatPythonWrote) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(
      testing::SourceDir() + "/tests/unit/fixtures/safetensors/fixture.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->header().metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "ringtrain fixture"}}));
  std::map<std::string, TensorEntry> by_name;
  for (const TensorEntry& t : file->header().tensors) by_name[t.name] = t;
  ASSERT_EQ(by_name.size(), 5u);

  const TensorEntry& embed = by_name["model.embed_tokens.weight"];
  EXPECT_EQ(embed.dtype, TensorDtype::kF32);
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{2, 3}));
  std::vector<uint32_t> f32(6);
  ASSERT_TRUE(file->Read(embed, f32.data()).ok());
  EXPECT_EQ(f32, (std::vector<uint32_t>{0x3dcccccd, 0xc0200000, 0x40400000, 0x3a83126f, 0x80000000,
                                        0x477fe000}));
  const std::vector<float> expected = {0.1f, -2.5f, 3.0f, 1e-3f, -0.0f, 65504.0f};
  EXPECT_EQ(std::memcmp(f32.data(), expected.data(), 24), 0);

  const TensorEntry& norm = by_name["model.norm.weight"];
  EXPECT_EQ(norm.dtype, TensorDtype::kBF16);
  EXPECT_EQ(norm.shape, (std::vector<int64_t>{4}));
  std::vector<uint16_t> bf16(4);
  ASSERT_TRUE(file->Read(norm, bf16.data()).ok());
  EXPECT_EQ(bf16, (std::vector<uint16_t>{0x3f80, 0x3dcd, 0xc049, 0x3a83}));

  const TensorEntry& head = by_name["lm_head.weight"];
  EXPECT_EQ(head.dtype, TensorDtype::kF16);
  EXPECT_EQ(head.shape, (std::vector<int64_t>{2, 2}));
  std::vector<uint16_t> f16(4);
  ASSERT_TRUE(file->Read(head, f16.data()).ok());
  EXPECT_EQ(f16, (std::vector<uint16_t>{0x3800, 0xae66, 0x6800, 0x03ef}));

  const TensorEntry& scale = by_name["scale"];
  EXPECT_TRUE(scale.shape.empty());
  float s = 0;
  ASSERT_TRUE(file->Read(scale, &s).ok());
  EXPECT_EQ(s, 7.25f);

  const TensorEntry& empty = by_name["empty"];
  EXPECT_EQ(empty.dtype, TensorDtype::kBF16);
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty.begin, empty.end);
}

}  // namespace
}  // namespace ringtrain
