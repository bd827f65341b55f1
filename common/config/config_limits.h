// Bounds on what a job config may be, checked before the TOML parser sees the text: toml++ builds
// one nested table per component of a dotted key and recurses over them, so ~100 KB of `a.a.a...`
// overflows the stack. A cheap pre-scan (one pass over the bytes, strings and comments skipped)
// refuses text that is too large, too deeply bracketed, has too many keys or too long a key path;
// every limit is generous for real configs (configs/*.toml have ~50 keys, depth 1, paths < 40
// chars).
//
// The limits also keep a job's messages far below gRPC's 4 MiB default: an Assignment carries the
// config and its overrides (<= 256 KiB + 256 × 4 KiB), a Job adds its mesh (<= kMaxWorldSize
// ranks).
#ifndef RINGTRAIN_COMMON_CONFIG_CONFIG_LIMITS_H_
#define RINGTRAIN_COMMON_CONFIG_CONFIG_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

inline constexpr size_t kMaxConfigBytes = 256 * 1024;  // TOML text
inline constexpr int kMaxConfigDepth = 16;             // nested [ ] and { }, table headers included
inline constexpr int kMaxConfigKeys = 1024;            // `key = value` pairs plus table headers
inline constexpr size_t kMaxKeyPathBytes = 256;        // `a.b."c d"` as written, blanks included
inline constexpr size_t kMaxOverrides = 256;
inline constexpr size_t kMaxOverrideBytes = 4 * 1024;  // one "--section.key=value"
// Problems listed in one error message; the rest are counted ("... and K more problems").
inline constexpr size_t kMaxReportedProblems = 20;
// The largest world (dp × cp ranks) a job may ask for; each degree alone is bounded by it too.
inline constexpr int64_t kMaxWorldSize = 16384;

// OK when `toml_text` and `overrides` are within the limits above; otherwise INVALID_ARGUMENT
// naming the limit and the actual value ("... has 1025 keys; at most 1024 are allowed"), prefixed
// by "invalid config SOURCE_NAME". Reads each byte once; never throws. Text the scan cannot follow
// (an unterminated string) passes, for the parser to report precisely.
absl::Status CheckConfigBounds(absl::string_view toml_text,
                               const std::vector<std::string>& overrides,
                               absl::string_view source_name);

// "what:\n  p1\n  p2 ..." with at most kMaxReportedProblems problems, then "... and K more
// problems".
std::string JoinProblems(absl::string_view what, const std::vector<std::string>& problems);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_CONFIG_LIMITS_H_
