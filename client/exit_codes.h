// ringctl's exit statuses, shared by every subcommand, so scripts can tell "the job failed" from
// "the coordinator is gone" from "you typed it wrong".
#ifndef RINGTRAIN_CLIENT_EXIT_CODES_H_
#define RINGTRAIN_CLIENT_EXIT_CODES_H_

#include "absl/status/status.h"

namespace ringtrain {

inline constexpr int kExitOk = 0;
// loss-compare: a loss mismatch, or a run that failed.
inline constexpr int kExitMismatch = 1;
// watch/submit --follow: the job ended FAILED or CANCELLED; other service commands: the coordinator
// refused the request (e.g. NOT_FOUND for an unknown job id).
inline constexpr int kExitFailed = 1;
// Bad or conflicting flags (a token that would go in cleartext to another machine among them), a
// missing config file or binary, a config the coordinator rejected.
inline constexpr int kExitUsage = 2;
// The coordinator could not be reached, a watch stream broke for good, or a wait timed out.
inline constexpr int kExitUnreachable = 3;
// The coordinator refused the credentials: a missing or wrong token (UNAUTHENTICATED).
inline constexpr int kExitUnauthenticated = 4;

// The exit status for a failed coordinator call: UNAVAILABLE / DEADLINE_EXCEEDED →
// kExitUnreachable, INVALID_ARGUMENT → kExitUsage, UNAUTHENTICATED → kExitUnauthenticated,
// anything else → kExitFailed. OK → kExitOk.
inline int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded: return kExitUnreachable;
    case absl::StatusCode::kInvalidArgument: return kExitUsage;
    case absl::StatusCode::kUnauthenticated: return kExitUnauthenticated;
    default: return kExitFailed;
  }
}

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_EXIT_CODES_H_
