#include "worker/agent/job_paths.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/config/config_paths.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

constexpr char kJobFolderName[] = "the job's folder under --checkpoint-root";

// Whether `path` is `root` or below it; both absolute and lexically normal.
bool Within(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator of the root
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// "/a/b/" -> "/a/b", so that filename() is the last component.
fs::path WithoutTrailingSeparator(fs::path path) {
  while (path.has_relative_path() && path.filename().empty()) path = path.parent_path();
  return path;
}

// `path` with its longest existing prefix (by lstat: a symlink counts, dangling or not) replaced by
// that prefix's canonical form, and the rest appended as written. `root` exists, so the prefix is
// never empty. An error (a dangling symlink, a folder that cannot be searched) names `shown`.
absl::StatusOr<fs::path> ResolveExistingPrefix(const fs::path& path, const fs::path& root,
                                               const std::string& shown,
                                               const std::string& inside) {
  fs::path existing = path;
  fs::path rest;
  while (existing != root && existing.has_relative_path()) {
    struct stat st {};
    if (lstat(existing.c_str(), &st) == 0) break;
    if (errno != ENOENT && errno != ENOTDIR) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": cannot inspect it inside ", inside, ": ", std::strerror(errno)));
    }
    rest = rest.empty() ? existing.filename() : existing.filename() / rest;
    existing = existing.parent_path();
  }
  std::error_code ec;
  const fs::path real = fs::canonical(existing, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(shown, ": goes through a symlink that cannot be resolved (", ec.message(),
                     ") inside ", inside));
  }
  return rest.empty() ? real : (real / rest).lexically_normal();
}

}  // namespace

absl::Status CheckJobId(absl::string_view job_id) {
  const bool safe = !job_id.empty() && job_id != "." && job_id != ".." &&
                    std::all_of(job_id.begin(), job_id.end(), [](char c) {
                      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                             c == '_' || c == '.';
                    });
  if (safe) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "job id '", job_id, "' cannot name a folder; expected letters, digits, '-', '_' or '.'"));
}

absl::StatusOr<std::string> CanonicalRoot(absl::string_view flag, const std::string& dir,
                                          bool create) {
  std::error_code ec;
  fs::path path = fs::absolute(dir, ec);
  if (!ec && create) fs::create_directories(path, ec);
  if (!ec) path = fs::canonical(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, " '", dir, "' ",
                     create ? "cannot be created: " : "is not an existing folder: ", ec.message()));
  }
  if (!fs::is_directory(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(flag, " '", dir, "' is not a folder"));
  }
  return path.string();
}

absl::StatusOr<std::string> ResolveUnderRoot(absl::string_view key, const std::string& value,
                                             const std::string& root, absl::string_view root_name) {
  const std::string shown = absl::StrCat(key, " = \"", absl::CHexEscape(value), "\"");
  if (root.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(shown, ": this worker has no ", root_name,
                                                      ", so a job may not name files on it; start "
                                                      "ringtrain-worker with ",
                                                      root_name,
                                                      " DIR and give the path relative to DIR"));
  }
  const std::string inside = absl::StrCat(root_name, " ", root);
  if (absl::Status text = CheckPathText(key, value); !text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(text.message(), " (allowed: inside ", inside, ")"));
  }
  const fs::path root_path(root);
  const fs::path given(value);
  const fs::path full = WithoutTrailingSeparator(
      (given.is_absolute() ? given : root_path / given).lexically_normal());
  if (!Within(full, root_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(shown, ": is outside ", inside,
                     "; give a path relative to it, or an absolute path inside it"));
  }
  RT_ASSIGN_OR_RETURN(fs::path resolved, ResolveExistingPrefix(full, root_path, shown, inside));
  if (!Within(resolved, root_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(shown, ": goes through a symlink that leads out of ", inside,
                     "; only symlinks that stay inside it are followed"));
  }
  return resolved.string();
}

absl::StatusOr<std::vector<std::string>> ResolveJobPaths(const JobConfig& config,
                                                         const JobRoots& roots,
                                                         const std::string& job_id) {
  std::vector<std::string> overrides;
  std::string job_folder;
  for (const ConfigPath& path : ConfigPaths(config)) {
    std::string resolved;
    if (path.root == PathRoot::kData) {
      RT_ASSIGN_OR_RETURN(resolved,
                          ResolveUnderRoot(path.key, path.value, roots.data_root, "--data-root"));
    } else {
      if (job_folder.empty()) {
        absl::StatusOr<std::string> folder = CanonicalRoot(
            "--checkpoint-root", absl::StrCat(roots.checkpoint_root, "/", job_id), true);
        if (!folder.ok()) return absl::InternalError(folder.status().message());
        if (!Within(fs::path(*folder), fs::path(roots.checkpoint_root))) {
          return absl::InternalError(absl::StrCat("the job's checkpoint folder ",
                                                  roots.checkpoint_root, "/", job_id,
                                                  " leads out of --checkpoint-root"));
        }
        job_folder = *folder;
      }
      RT_ASSIGN_OR_RETURN(resolved,
                          ResolveUnderRoot(path.key, path.value, job_folder, kJobFolderName));
    }
    overrides.push_back(absl::StrCat("--", path.key, "=", resolved));
  }
  return overrides;
}

absl::StatusOr<std::vector<std::string>> ResolveCheckpointLoad(const std::string& source_job,
                                                               const std::string& folder,
                                                               int64_t step, bool model_only,
                                                               const std::string& checkpoint_root) {
  RT_RETURN_IF_ERROR(CheckJobId(source_job));
  const std::string what = absl::StrCat(source_job, "'s checkpoint of step ", step);
  const std::string shared =
      "; a job that starts from another job's checkpoint needs every worker to share one "
      "--checkpoint-root (shared storage), as restarts do";
  const fs::path job_folder = fs::path(checkpoint_root) / source_job;
  std::error_code ec;
  if (!fs::is_directory(job_folder, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": this worker's --checkpoint-root ",
                                                      checkpoint_root, " has no folder ",
                                                      source_job, shared));
  }
  RT_ASSIGN_OR_RETURN(const std::string job_root,
                      CanonicalRoot("--checkpoint-root", job_folder.string(), false));
  if (!Within(fs::path(job_root), fs::path(checkpoint_root))) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", job_folder.string(), " leads out of --checkpoint-root"));
  }
  RT_ASSIGN_OR_RETURN(
      const std::string dir,
      ResolveUnderRoot(absl::StrCat(source_job, "'s checkpoint.folder"), folder, job_root,
                       absl::StrCat(source_job, "'s folder under --checkpoint-root")));
  const std::string step_dir = absl::StrCat(dir, "/step-", step);
  if (!fs::exists(fs::path(step_dir) / "COMPLETE", ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", step_dir, " is not a complete checkpoint on this worker (no ",
                     step_dir, "/COMPLETE)", shared));
  }
  return std::vector<std::string>{
      absl::StrCat("--checkpoint.initial_load_path=", step_dir),
      "--checkpoint.initial_load_in_hf=false",
      absl::StrCat("--checkpoint.initial_load_model_only=", model_only ? "true" : "false")};
}

}  // namespace ringtrain
