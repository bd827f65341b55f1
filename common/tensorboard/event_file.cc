#include "common/tensorboard/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tensorboard/crc32c.h"

namespace ringtrain {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutKey(uint32_t field, uint32_t wire_type, std::string* out) {
  PutVarint((uint64_t{field} << 3) | wire_type, out);
}

template <class T>
void PutLittleEndian(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian
  out->append(bytes, sizeof(T));
}

void PutBytes(uint32_t field, absl::string_view bytes, std::string* out) {
  PutKey(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

// Event's wall_time (1) and step (2); proto3 leaves a zero step out.
std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  PutKey(1, kFixed64, &event);
  PutLittleEndian(wall_time, &event);
  if (step != 0) {
    PutKey(2, kVarint, &event);
    PutVarint(static_cast<uint64_t>(step), &event);
  }
  return event;
}

// Opens a new file in `dir` that no other writer has: O_EXCL, with the counter raised on a clash.
absl::StatusOr<std::pair<std::string, std::FILE*>> CreateEventFile(const std::string& dir) {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const int64_t seconds = static_cast<int64_t>(WallTimeNow());
  for (int n = 0; n < 1000; ++n) {
    const std::string path =
        absl::StrFormat("%s/events.out.tfevents.%010d.%s.%d.%d", dir, seconds, host, getpid(), n);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("cannot create the TensorBoard event file ", path,
                                                 ": ", std::strerror(errno)));
    }
    return std::make_pair(path, fdopen(fd, "wb"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot create a new TensorBoard event file in ", dir, ": 1000 names taken"));
}

}  // namespace

double WallTimeNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string event = EventHeader(wall_time, 0);
  PutBytes(3, kEventFileVersion, &event);
  return event;
}

std::string EncodeScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& scalar : scalars) {
    std::string value;
    PutBytes(1, scalar.tag, &value);  // tag
    PutKey(2, kFixed32, &value);      // simple_value
    PutLittleEndian(scalar.value, &value);
    PutBytes(1, value, &summary);  // Summary.value
  }
  std::string event = EventHeader(wall_time, step);
  PutBytes(5, summary, &event);  // Event.summary
  return event;
}

std::string FrameTfRecord(absl::string_view data) {
  std::string length;
  PutLittleEndian(uint64_t{data.size()}, &length);
  std::string record = length;
  PutLittleEndian(MaskCrc32c(Crc32c(length)), &record);
  record.append(data.data(), data.size());
  PutLittleEndian(MaskCrc32c(Crc32c(data)), &record);
  return record;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& run_dir) {
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the TensorBoard folder ", run_dir, ": ", error.message()));
  }
  absl::StatusOr<std::pair<std::string, std::FILE*>> file = CreateEventFile(run_dir);
  if (!file.ok()) return file.status();
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(file->first, file->second));
  absl::Status status = writer->Append(EncodeFileVersionEvent(WallTimeNow()));
  if (!status.ok()) return status;
  return writer;
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status EventFileWriter::WriteScalars(int64_t step, double wall_time,
                                           const std::vector<Scalar>& scalars) {
  return Append(EncodeScalarsEvent(wall_time, step, scalars));
}

absl::Status EventFileWriter::Append(const std::string& event) {
  const std::string record = FrameTfRecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write the TensorBoard event file ", path_,
                                               ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ringtrain
