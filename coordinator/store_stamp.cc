#include "coordinator/store_stamp.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

// A stamp is under 200 bytes; anything much larger is not one (and is not read whole).
constexpr std::uintmax_t kMaxStampBytes = 64 * 1024;

std::string JobId(int64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "job-%06lld", static_cast<long long>(number));
  return buf;
}

std::string Utc(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string Jobs(int64_t n) { return absl::StrCat(n, n == 1 ? " job" : " jobs"); }

std::string Errno(int error) { return std::strerror(error); }

// Writes all of `text` to `fd`, retrying short writes.
bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// fsync of the folder holding `path`, so that a rename in it is on disk.
int SyncFolderOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

}  // namespace

bool HasStoreStamp(const std::string& db_path) {
  return !db_path.empty() && db_path != ":memory:" && db_path.rfind("file:", 0) != 0;
}

std::string StoreStampPath(const std::string& db_path) { return db_path + ".stamp"; }

std::string FormatStoreStamp(const StoreStamp& stamp) {
  const int64_t jobs = stamp.next_job_number - 1;
  nlohmann::ordered_json j = {{"next_job_number", stamp.next_job_number},
                              {"jobs", jobs},
                              {"last_job_id", jobs > 0 ? JobId(jobs) : ""},
                              {"written_unix_ms", stamp.written_unix_ms},
                              {"written", Utc(stamp.written_unix_ms)}};
  return j.dump() + "\n";
}

absl::StatusOr<StoreStamp> ParseStoreStamp(absl::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("it is not JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("it is not a JSON object");
  StoreStamp stamp;
  const auto next = j.find("next_job_number");
  if (next == j.end() || !next->is_number_integer() || next->get<int64_t>() < 1) {
    return absl::InvalidArgumentError("next_job_number is missing or not an integer >= 1");
  }
  stamp.next_job_number = next->get<int64_t>();
  const auto written = j.find("written_unix_ms");
  if (written == j.end() || !written->is_number_integer()) {
    return absl::InvalidArgumentError("written_unix_ms is missing or not an integer");
  }
  stamp.written_unix_ms = written->get<int64_t>();
  return stamp;
}

absl::StatusOr<std::optional<StoreStamp>> ReadStoreStamp(const std::string& stamp_path) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(stamp_path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read store stamp '", stamp_path, "': ", ec.message()));
  }
  if (!exists) return std::optional<StoreStamp>();
  const std::uintmax_t size = std::filesystem::file_size(stamp_path, ec);
  if (ec || size > kMaxStampBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("store stamp '", stamp_path, "' is not valid: ",
                     ec ? ec.message() : absl::StrCat("it is ", size, " bytes, not a stamp")));
  }
  std::ifstream in(stamp_path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read store stamp '", stamp_path, "': ", Errno(errno)));
  }
  absl::StatusOr<StoreStamp> stamp = ParseStoreStamp(text.str());
  if (!stamp.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("store stamp '", stamp_path, "' is not valid: ", stamp.status().message()));
  }
  return std::optional<StoreStamp>(*stamp);
}

absl::Status WriteStoreStamp(const std::string& stamp_path, const StoreStamp& stamp) {
  // Unique per write, so that two writers (two stores on one file: a misuse) never share a file.
  static std::atomic<int64_t> writes{0};
  const std::string temp = absl::StrCat(stamp_path, ".tmp.", getpid(), ".", writes++);
  auto failed = [&](const std::string& what, int error) {
    unlink(temp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write store stamp '", stamp_path, "' (", what, "): ", Errno(error)));
  };
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed(absl::StrCat("creating ", temp), errno);
  if (!WriteAll(fd, FormatStoreStamp(stamp)) || fsync(fd) != 0) {
    const int error = errno;
    close(fd);
    return failed(absl::StrCat("writing ", temp), error);
  }
  if (close(fd) != 0) return failed(absl::StrCat("closing ", temp), errno);
  if (rename(temp.c_str(), stamp_path.c_str()) != 0) {
    return failed(absl::StrCat("renaming ", temp), errno);
  }
  if (const int error = SyncFolderOf(stamp_path); error != 0) {
    return absl::InternalError(absl::StrCat("cannot write store stamp '", stamp_path,
                                            "' (syncing its folder): ", Errno(error)));
  }
  return absl::OkStatus();
}

std::string StoreStampMismatch(const std::string& db_path, const std::string& stamp_path,
                               const StoreStamp& stamp, std::optional<int64_t> next_job_number) {
  const int64_t recorded = stamp.next_job_number - 1;
  if (recorded <= 0) return "";
  if (next_job_number && *next_job_number >= stamp.next_job_number) return "";
  const std::string says =
      absl::StrCat("its stamp '", stamp_path, "' says it held ", Jobs(recorded), " (the last ",
                   JobId(recorded), ", stamped ", Utc(stamp.written_unix_ms), ")");
  if (!next_job_number) {
    return absl::StrCat("job store '", db_path, "' is missing, but ", says,
                        ": starting without it would hand out job ids from job-000001 again and "
                        "lose those jobs' history");
  }
  const int64_t held = *next_job_number - 1;
  if (held <= 0) {
    return absl::StrCat("job store '", db_path, "' holds no jobs, but ", says,
                        ": it was emptied or replaced, and taking it would hand out job ids from "
                        "job-000001 again");
  }
  return absl::StrCat("job store '", db_path, "' holds ", Jobs(held), " (the last ", JobId(held),
                      "), but ", says,
                      ": it is an older copy or lost its latest jobs, and taking it would hand "
                      "out job ids from ",
                      JobId(held + 1), " again");
}

absl::StatusOr<StoreStampKeeper> StoreStampKeeper::BeforeOpen(const std::string& db_path,
                                                              bool new_store) {
  StoreStampKeeper keeper;
  if (!HasStoreStamp(db_path)) return keeper;
  keeper.db_path_ = db_path;
  keeper.stamp_path_ = StoreStampPath(db_path);
  keeper.new_store_ = new_store;
  absl::StatusOr<std::optional<StoreStamp>> found = ReadStoreStamp(keeper.stamp_path_);
  if (!found.ok()) {
    keeper.invalid_ = std::string(found.status().message());
    if (!new_store) {
      return absl::FailedPreconditionError(absl::StrCat(
          keeper.invalid_, " (the stamp of job store '", db_path,
          "'). It records how many jobs the store has held, so that a lost store is noticed; "
          "restore it, or start with --new-store to take the store as it is and write a new "
          "stamp."));
    }
    return keeper;  // AfterOpen warns, once it knows what the store holds
  }
  keeper.found_ = *found;
  std::error_code ec;
  if (!keeper.found_ || std::filesystem::exists(db_path, ec)) return keeper;
  const std::string mismatch =
      StoreStampMismatch(db_path, keeper.stamp_path_, *keeper.found_, std::nullopt);
  if (mismatch.empty()) return keeper;
  if (!new_store) {
    return absl::FailedPreconditionError(
        absl::StrCat(mismatch,
                     ". Restore it from a backup, or start with --new-store to begin a new, empty "
                     "store."));
  }
  RT_LOG(Warning) << "--new-store: " << mismatch << "; beginning a new, empty store";
  keeper.found_.reset();  // accepted: AfterOpen writes a new stamp without warning again
  return keeper;
}

absl::Status StoreStampKeeper::AfterOpen(int64_t next_job_number, int64_t now_unix_ms) {
  if (stamp_path_.empty()) return absl::OkStatus();
  if (!invalid_.empty()) {
    RT_LOG(Warning) << "--new-store: " << invalid_ << "; taking job store '" << db_path_
                    << "' as it is (" << Jobs(next_job_number - 1) << ") and writing a new stamp";
  } else if (found_) {
    const std::string mismatch =
        StoreStampMismatch(db_path_, stamp_path_, *found_, next_job_number);
    if (!mismatch.empty() && !new_store_) {
      return absl::FailedPreconditionError(absl::StrCat(
          mismatch, ". Restore it from a backup, or start with --new-store to take it as it is."));
    }
    if (!mismatch.empty()) {
      RT_LOG(Warning) << "--new-store: " << mismatch
                      << "; taking the store as it is and rewriting the stamp";
    } else if (found_->next_job_number == next_job_number) {
      return absl::OkStatus();  // up to date
    }
  } else if (next_job_number > 1) {
    RT_LOG(Warning) << "job store '" << db_path_ << "' holds " << Jobs(next_job_number - 1)
                    << " but has no stamp '" << stamp_path_
                    << "' (the first start since stamps, or the stamp was removed); writing one";
  }
  found_ = StoreStamp{next_job_number, now_unix_ms};
  invalid_.clear();
  absl::Status written = WriteStoreStamp(stamp_path_, *found_);
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat(written.message(), " (the stamp of job store '", db_path_,
                                     "'; is its folder writable?)"));
  }
  return absl::OkStatus();
}

void StoreStampKeeper::Record(int64_t next_job_number, int64_t now_unix_ms) {
  if (stamp_path_.empty()) return;
  absl::Status written = WriteStoreStamp(stamp_path_, {next_job_number, now_unix_ms});
  if (!written.ok()) {
    RT_LOG(Warning) << written.message() << "; job store '" << db_path_ << "' holds "
                    << Jobs(next_job_number - 1)
                    << " and the stamp lags behind it (the next start accepts that)";
  }
}

}  // namespace ringtrain
