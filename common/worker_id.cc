#include "common/worker_id.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

bool IsIdChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

constexpr char kRule[] =
    "a worker id is letters, digits, '-', '_' and '.', starting with a letter or a digit, e.g. "
    "worker-0 or the pod's name";

}  // namespace

absl::Status CheckWorkerId(absl::string_view what, absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty; ", kRule));
  if (id.size() > kMaxWorkerIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", id.size(), " bytes long; at most ",
                                                   kMaxWorkerIdBytes, " are allowed"));
  }
  const auto bad = std::find_if_not(id.begin(), id.end(), IsIdChar);
  if (bad != id.end() || !absl::ascii_isalnum(static_cast<unsigned char>(id.front()))) {
    const bool printable = std::all_of(id.begin(), id.end(), [](char c) {
      return absl::ascii_isprint(static_cast<unsigned char>(c));
    });
    // Not echoed unless printable: it may hold terminal control sequences.
    return absl::InvalidArgumentError(absl::StrCat(
        what, printable ? absl::StrCat(" \"", id, "\"") : std::string(" (unprintable)"),
        bad != id.end() ? absl::StrCat(": byte ", bad - id.begin(), " is not allowed")
                        : ": it starts with '" + std::string(1, id.front()) + "'",
        "; ", kRule));
  }
  return absl::OkStatus();
}

}  // namespace ringtrain
