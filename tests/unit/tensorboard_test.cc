// The TensorBoard writer (common/tensorboard): CRC-32C against published check values, the mask,
// the TFRecord framing and the hand-encoded Event protos byte for byte, and a step record's
// scalars. Reading the files back with TensorBoard's own reader is
// tests/integration/tensorboard_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/tensorboard/crc32c.h"
#include "common/tensorboard/event_file.h"
#include "common/tensorboard/step_scalars.h"

namespace ringtrain {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c(""), 0x00000000u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
}

TEST(Crc32cTest, MaskRotatesAndAdds) {
  EXPECT_EQ(MaskCrc32c(0), 0xA282EAD8u);
  EXPECT_EQ(MaskCrc32c(0x00008000u), 0xA282EAD9u);  // bit 15 rotates to bit 0
  EXPECT_EQ(MaskCrc32c(0x00000001u), 0xA284EAD8u);  // bit 0 rotates to bit 17
}

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

TEST(EventFileTest, FileVersionEventBytes) {
  // wall_time 1.5 (field 1, fixed64), no step, file_version (field 3) "brain.Event:2".
  const std::string expected =
      Bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1A, 13}) + "brain.Event:2";
  EXPECT_EQ(EncodeFileVersionEvent(1.5), expected);
}

TEST(EventFileTest, ScalarsEventBytes) {
  // step 300 is the varint AC 02; summary (5) { value (1) { tag (1) "lr", simple_value (2) 0.5f }
  // }.
  const std::string value = Bytes({0x0A, 2}) + "lr" + Bytes({0x15, 0, 0, 0, 0x3F});
  const std::string summary = Bytes({0x0A, int(value.size())}) + value;
  const std::string expected =
      Bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x10, 0xAC, 0x02, 0x2A, int(summary.size())}) +
      summary;
  EXPECT_EQ(EncodeScalarsEvent(1.5, 300, {{"lr", 0.5f}}), expected);
}

TEST(EventFileTest, TfRecordFraming) {
  const std::string data = "hello";
  const std::string record = FrameTfRecord(data);
  ASSERT_EQ(record.size(), 8u + 4 + data.size() + 4);
  EXPECT_EQ(record.substr(0, 8), Bytes({5, 0, 0, 0, 0, 0, 0, 0}));
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, record.data() + 8, 4);
  std::memcpy(&data_crc, record.data() + 12 + data.size(), 4);
  EXPECT_EQ(length_crc, MaskCrc32c(Crc32c(record.substr(0, 8))));
  EXPECT_EQ(record.substr(12, data.size()), data);
  EXPECT_EQ(data_crc, MaskCrc32c(Crc32c(data)));
}

TEST(EventFileTest, WriterStartsWithTheVersionAndAppendsEachStep) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "tensorboard_test_run" / "nested";
  std::filesystem::remove_all(dir.parent_path());
  auto writer = EventFileWriter::Open(dir.string());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteScalars(1, 2.0, {{"loss", 3.0f}}).ok());
  const std::string path = (*writer)->path();
  EXPECT_NE(std::filesystem::path(path).filename().string().find("events.out.tfevents."),
            std::string::npos);
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  const std::string first = FrameTfRecord(EncodeFileVersionEvent(0));
  // The first record's wall time is the writer's clock: compare the size, then the second record.
  const std::string second = FrameTfRecord(EncodeScalarsEvent(2.0, 1, {{"loss", 3.0f}}));
  ASSERT_EQ(content.str().size(), first.size() + second.size());
  EXPECT_EQ(content.str().substr(first.size()), second);
  // A second writer in the same folder gets a file of its own.
  auto other = EventFileWriter::Open(dir.string());
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->path(), path);
}

TEST(EventFileTest, UnwritableFolderIsUnavailableNamingIt) {
  auto writer = EventFileWriter::Open("/proc/no-such-folder/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(writer.status().message().find("/proc/no-such-folder/tb"), std::string::npos);
}

TEST(StepScalarsTest, TagsAndValues) {
  StepRecord r;
  r.loss = 2.5;
  r.grad_norm = 0.75;
  r.lr = 1e-3;
  r.tokens_per_second = 1000;
  r.step_seconds = 0.5;
  r.peak_memory_bytes = 2.0 * 1024 * 1024 * 1024;
  std::vector<Scalar> scalars = StepScalars(r);
  ASSERT_EQ(scalars.size(), 6u);
  EXPECT_EQ(scalars[0].tag, "loss_metrics/global_avg_loss");
  EXPECT_EQ(scalars[0].value, 2.5f);
  EXPECT_EQ(scalars[5].tag, "memory/max_rss(GiB)");
  EXPECT_EQ(scalars[5].value, 2.0f);
  r.device_memory_peak_bytes = 1024.0 * 1024 * 1024;
  r.validation_loss = 3.25;
  scalars = StepScalars(r);
  ASSERT_EQ(scalars.size(), 8u);
  EXPECT_EQ(scalars[6].tag, "memory/max_active(GiB)");
  EXPECT_EQ(scalars[6].value, 1.0f);
  EXPECT_EQ(scalars[7].tag, "validation_metrics/loss");
  EXPECT_EQ(scalars[7].value, 3.25f);
  r.mfu_percent = 41.5;
  scalars = StepScalars(r);
  ASSERT_EQ(scalars.size(), 9u);
  EXPECT_EQ(scalars[8].tag, "mfu(%)");
  EXPECT_EQ(scalars[8].value, 41.5f);
}

}  // namespace
}  // namespace ringtrain
