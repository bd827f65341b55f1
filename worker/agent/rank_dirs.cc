#include "worker/agent/rank_dirs.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "worker/agent/rank_log.h"
#include "worker/agent/trainer_pid_file.h"

namespace ringtrain {

namespace fs = std::filesystem;
namespace {

bool IsRankDirName(const std::string& name) {
  if (!absl::StartsWith(name, "rank-") || name.size() == 5) return false;
  return std::all_of(name.begin() + 5, name.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

// Whether `path` is `root` or lies below it (both lexically normal and absolute).
bool Inside(const fs::path& path, const fs::path& root) {
  if (root.empty()) return false;
  auto [r, p] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return r == root.end();
}

}  // namespace

std::vector<std::string> PruneRankDirs(const std::string& work_dir, int keep,
                                       const std::string& spare,
                                       const std::string& checkpoint_root) {
  std::vector<std::string> removed;
  std::error_code ec;
  const fs::path spare_path = fs::path(spare).lexically_normal();
  const fs::path checkpoints = fs::path(checkpoint_root).lexically_normal();
  std::vector<std::pair<fs::file_time_type, fs::path>> dirs;
  for (const fs::directory_entry& job : fs::directory_iterator(work_dir, ec)) {
    if (!job.is_directory(ec) || job.is_symlink(ec) || Inside(job.path(), checkpoints)) continue;
    std::error_code inner;
    for (const fs::directory_entry& rank : fs::directory_iterator(job.path(), inner)) {
      if (!rank.is_directory(inner) || rank.is_symlink(inner) ||
          !IsRankDirName(rank.path().filename().string()) ||
          rank.path().lexically_normal() == spare_path) {
        continue;
      }
      fs::file_time_type age = fs::last_write_time(rank.path(), inner);
      std::error_code log_error;
      const fs::file_time_type log_age =
          fs::last_write_time(rank.path() / kRankLogFileName, log_error);
      if (!log_error) age = std::max(age, log_age);
      dirs.emplace_back(age, rank.path());
    }
  }
  if (static_cast<int>(dirs.size()) <= keep) return removed;
  std::sort(dirs.begin(), dirs.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(std::max(keep, 0)); i < dirs.size(); ++i) {
    const fs::path& dir = dirs[i].second;
    if (fs::exists(dir / kTrainerPidFileName, ec)) continue;  // a trainer may still run there
    fs::remove_all(dir, ec);
    if (ec) continue;
    removed.push_back(dir.string());
    fs::remove(dir.parent_path(), ec);  // only when empty
  }
  return removed;
}

}  // namespace ringtrain
