#include "worker/engine/checkpoint/checkpoint_writer.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/checkpoint/sharded_checkpoint.h"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool WritableAsIs(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

}  // namespace

CheckpointWriter::CheckpointWriter(const CheckpointFolder& folder, CheckpointWriterOptions options)
    : folder_(folder), options_(std::move(options)) {}

CheckpointWriter::~CheckpointWriter() { (void)Join(); }

absl::Status CheckpointWriter::Join() {
  if (!thread_.joinable()) return absl::OkStatus();
  thread_.join();
  absl::Status status = thread_status_;
  if (status.ok() && in_flight_) finished_.push_back(*in_flight_);
  in_flight_.reset();
  return status;
}

absl::Status CheckpointWriter::Write(const std::vector<StatePiece>& pieces,
                                     const TrainState& train_state,
                                     const std::string& config_toml) {
  const std::string tmp = folder_.TemporaryPath(train_state.step, options_.tag);
  std::error_code ec;
  std::filesystem::create_directories(tmp, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create checkpoint folder '", tmp, "': ", ec.message()));
  }
  if (options_.rank < options_.writers) {
    RT_RETURN_IF_ERROR(WriteRankPart(tmp, options_.rank, pieces));
  }
  // Fault injection for the tests: the write of this step stops here (its part written, the step
  // not committed) until the process is killed — a trainer killed in the middle of a save.
  if (const char* hang = std::getenv("RINGTRAIN_TEST_HANG_CHECKPOINT_AT_STEP");
      hang != nullptr && std::atoll(hang) == train_state.step) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (options_.rank != 0) return absl::OkStatus();
  return folder_.Commit(train_state, config_toml, options_.tag, options_.writers,
                        options_.commit_timeout);
}

absl::StatusOr<double> CheckpointWriter::Save(const std::vector<StatePiece>& pieces,
                                              const TrainState& train_state,
                                              const std::string& config_toml) {
  const auto start = Clock::now();
  RT_RETURN_IF_ERROR(Join());  // the previous save's write, if still going
  SaveFigures figures;
  figures.step = train_state.step;
  for (const StatePiece& piece : pieces) figures.bytes += uint64_t(piece.end - piece.begin) * 4;

  bool as_is = !options_.async;
  for (const StatePiece& piece : pieces) as_is &= WritableAsIs(piece.data);
  std::vector<StatePiece> staged = pieces;
  if (!as_is) {
    torch::NoGradGuard no_grad;
    bool reuse = staging_.size() == pieces.size();
    for (size_t i = 0; reuse && i < pieces.size(); ++i)
      reuse = staging_[i].numel() == pieces[i].data.numel();
    if (!reuse) {
      staging_.clear();
      for (const StatePiece& piece : pieces) {
        staging_.push_back(
            at::empty({piece.data.numel()},
                      at::TensorOptions(at::kFloat).pinned_memory(!piece.data.device().is_cpu())));
      }
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
      staging_[i].copy_(pieces[i].data.reshape({-1}));
      staged[i].data = staging_[i];
    }
  }
  if (!options_.async) {
    const auto write_start = Clock::now();
    RT_RETURN_IF_ERROR(Write(staged, train_state, config_toml));
    figures.write_seconds = SecondsSince(write_start);
    figures.stall_seconds = SecondsSince(start);
    finished_.push_back(figures);
    return figures.stall_seconds;
  }
  figures.stall_seconds = SecondsSince(start);
  in_flight_ = figures;
  thread_status_ = absl::OkStatus();
  write_done_ = false;
  thread_ = std::thread([this, staged = std::move(staged), train_state, config_toml] {
    const auto write_start = Clock::now();
    thread_status_ = Write(staged, train_state, config_toml);
    in_flight_->write_seconds = SecondsSince(write_start);
    write_done_ = true;
  });
  return figures.stall_seconds;
}

absl::StatusOr<std::vector<SaveFigures>> CheckpointWriter::Finished(bool wait) {
  // A write still going is left alone unless asked to wait for it.
  if (thread_.joinable() && (wait || write_done_)) RT_RETURN_IF_ERROR(Join());
  std::vector<SaveFigures> done;
  done.swap(finished_);
  return done;
}

}  // namespace ringtrain
