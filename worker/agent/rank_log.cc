#include "worker/agent/rank_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

constexpr char kTimeFormat[] = "%Y-%m-%dT%H:%M:%E6SZ";
constexpr size_t kTimeLength = 27;  // "2026-12-02T11:25:56.123456Z"

// Closes an fd when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::StatusOr<int> OpenForReading(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) return fd;
  const std::string why = std::strerror(errno);
  if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no log '", path, "'"));
  return absl::InternalError(absl::StrCat("cannot open '", path, "': ", why));
}

// Reads up to `size` bytes at `offset`; fewer at the end of the file.
absl::StatusOr<std::string> ReadAt(int fd, int64_t offset, size_t size, const std::string& path) {
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = pread(fd, out.data() + got, size - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::InternalError(absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace

std::string FormatRankLogLine(absl::Time time, absl::string_view stream, absl::string_view text) {
  return absl::StrCat(absl::FormatTime(kTimeFormat, time, absl::UTCTimeZone()), " ", stream, " ",
                      text, "\n");
}

RankLogLine ParseRankLogLine(absl::string_view line) {
  RankLogLine parsed;
  const size_t stream_end = line.find(' ', kTimeLength + 1);
  absl::Time time;
  std::string error;
  if (line.size() > kTimeLength && line[kTimeLength] == ' ' && stream_end != line.npos &&
      absl::ParseTime(kTimeFormat, line.substr(0, kTimeLength), absl::UTCTimeZone(), &time,
                      &error)) {
    parsed.time_unix_micros = absl::ToUnixMicros(time);
    parsed.stream = std::string(line.substr(kTimeLength + 1, stream_end - kTimeLength - 1));
    parsed.text = std::string(line.substr(stream_end + 1));
  } else {
    parsed.text = std::string(line);
  }
  return parsed;
}

absl::StatusOr<RankLogRead> ReadRankLog(const std::string& path, int64_t offset, size_t max_bytes) {
  absl::StatusOr<int> opened = OpenForReading(path);
  if (!opened.ok()) return opened.status();
  const Fd fd(*opened);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat '", path, "': ", std::strerror(errno)));
  }
  const int64_t size = st.st_size;
  if (offset < 0 || offset > size) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset, " is outside the log '", path, "' (", size, " bytes)"));
  }
  RankLogRead read;
  read.next_offset = offset;
  int64_t pos = offset;
  size_t want = std::max<size_t>(max_bytes, 1);
  while (pos < size) {
    absl::StatusOr<std::string> bytes =
        ReadAt(fd.get(), pos, static_cast<size_t>(std::min<int64_t>(want, size - pos)), path);
    if (!bytes.ok()) return bytes.status();
    const size_t last_newline = bytes->rfind('\n');
    if (last_newline == std::string::npos) {
      // No whole line yet: one longer than `want` (read more), or one still being written.
      if (pos + static_cast<int64_t>(bytes->size()) >= size || !read.lines.empty()) break;
      want *= 2;
      continue;
    }
    absl::string_view whole(bytes->data(), last_newline + 1);
    size_t start = 0;
    for (size_t nl; (nl = whole.find('\n', start)) != absl::string_view::npos; start = nl + 1) {
      RankLogLine line = ParseRankLogLine(whole.substr(start, nl - start));
      line.offset = pos + static_cast<int64_t>(start);
      read.lines.push_back(std::move(line));
    }
    pos += static_cast<int64_t>(last_newline + 1);
    read.next_offset = pos;
    break;
  }
  read.at_end = read.next_offset == size;
  return read;
}

absl::StatusOr<int64_t> RankLogTailOffset(const std::string& path, int64_t lines) {
  absl::StatusOr<int> opened = OpenForReading(path);
  if (!opened.ok()) return opened.status();
  const Fd fd(*opened);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat '", path, "': ", std::strerror(errno)));
  }
  const int64_t size = st.st_size;
  if (lines <= 0) return size;
  // Scan back from the end, skipping the last byte (the newline that ends the last line), for the
  // newline that ends the line before the first one wanted.
  constexpr int64_t kBlock = 64 * 1024;
  int64_t end = size - 1;
  int64_t found = 0;
  while (end > 0) {
    const int64_t start = std::max<int64_t>(0, end - kBlock);
    absl::StatusOr<std::string> block = ReadAt(fd.get(), start, end - start, path);
    if (!block.ok()) return block.status();
    for (int64_t i = static_cast<int64_t>(block->size()) - 1; i >= 0; --i) {
      if ((*block)[i] == '\n' && ++found == lines) return start + i + 1;
    }
    end = start;
  }
  return 0;
}

void RankLogWriter::Write(absl::string_view stream, absl::string_view text) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  do {
    const absl::string_view piece = text.substr(0, kMaxRankLogText);
    text.remove_prefix(piece.size());
    const std::string record = FormatRankLogLine(now, stream, piece);
    const char* data = record.data();
    size_t left = record.size();
    while (left > 0) {
      const ssize_t n = write(fd_, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;  // a full disk costs the log, never the trainer
      data += n;
      left -= static_cast<size_t>(n);
    }
  } while (!text.empty());
}

}  // namespace ringtrain
