// The nearest of a few names to a mistyped word, for "did you mean ...?" in error messages (config
// keys and choices, ringctl's subcommands).
#ifndef RINGTRAIN_COMMON_CLOSEST_MATCH_H_
#define RINGTRAIN_COMMON_CLOSEST_MATCH_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringtrain {

// The candidate closest to `word` by edit distance, or "" when none is close enough to be a typo
// (more than a third of the word wrong, with at least 2 edits allowed, never the whole word).
std::string ClosestMatch(absl::string_view word, const std::vector<std::string>& candidates);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CLOSEST_MATCH_H_
