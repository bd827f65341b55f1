// TensorBoard event files, written without protobuf: each record is an `Event` message
// (tensorflow/core/util/event.proto) encoded by hand — wall_time (field 1, double), step (2,
// varint), then file_version (3, string) for the first record or summary (5, a `Summary` whose
// repeated `value` (1) each hold a tag (1, string) and a simple_value (2, float)) — framed as a
// TFRecord: the length as a little-endian uint64, its masked CRC-32C, the bytes, their masked
// CRC-32C. That is all TensorBoard's scalar dashboard reads.
#ifndef RINGTRAIN_COMMON_TENSORBOARD_EVENT_FILE_H_
#define RINGTRAIN_COMMON_TENSORBOARD_EVENT_FILE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

struct Scalar {
  std::string tag;  // "loss_metrics/global_avg_loss"
  float value = 0;  // simple_value is a float in the proto
};

// The version every event file starts with.
inline constexpr char kEventFileVersion[] = "brain.Event:2";

// One Event message: the file_version record.
std::string EncodeFileVersionEvent(double wall_time);
// One Event message: a Summary of `scalars` at `step`.
std::string EncodeScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars);
// `data` framed as one TFRecord.
std::string FrameTfRecord(absl::string_view data);

// One event file in a run folder (TensorBoard shows each folder of event files as a run). Not
// thread-safe: one writer per file, used by one thread.
class EventFileWriter {
 public:
  // Creates `run_dir` (and its parents) when missing, and a new file in it named as TensorBoard's
  // writers name theirs, events.out.tfevents.<seconds>.<host>.<pid>.<n>, starting with the
  // file_version record. UNAVAILABLE naming the folder or file when it cannot be made.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& run_dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one Summary event and flushes, so TensorBoard sees each step as it is written.
  // UNAVAILABLE naming the file when the write fails.
  absl::Status WriteScalars(int64_t step, double wall_time, const std::vector<Scalar>& scalars);

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Append(const std::string& event);

  std::string path_;
  std::FILE* file_;
};

// Seconds since the Unix epoch, as an Event's wall_time.
double WallTimeNow();

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TENSORBOARD_EVENT_FILE_H_
