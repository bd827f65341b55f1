// Whole small files as text: configs, JSON headers and indexes. Torch-free.
#ifndef RINGTRAIN_COMMON_TEXT_FILE_H_
#define RINGTRAIN_COMMON_TEXT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringtrain {

// The file's bytes. NOT_FOUND "cannot read PATH: <errno text>" when it cannot be opened.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Writes `text` to `path`, replacing it. UNAVAILABLE "cannot write PATH: <errno text>" when the OS
// refuses.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

// fsync of a file or a folder (after a rename in it), so what was written survives a power loss.
// UNAVAILABLE "cannot sync PATH: <errno text>".
absl::Status SyncPath(const std::string& path);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TEXT_FILE_H_
