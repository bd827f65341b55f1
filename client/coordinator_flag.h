// Where ringctl finds the coordinator, the way kubectl and docker users expect: `--coordinator ADDR`
// before the subcommand or after it, and $RINGTRAIN_COORDINATOR as the default. Done on the
// arguments before CLI11 parses them, so every subcommand with a --coordinator option (today's and
// any added later) gets it without code of its own.
#ifndef RINGTRAIN_CLIENT_COORDINATOR_FLAG_H_
#define RINGTRAIN_CLIENT_COORDINATOR_FLAG_H_

#include <functional>
#include <string>
#include <vector>

namespace ringtrain {

inline constexpr char kCoordinatorEnv[] = "RINGTRAIN_COORDINATOR";

// `args` (without the program name) rewritten: a `--coordinator ADDR` or `--coordinator=ADDR` before
// the subcommand (the first argument that is not an option) is moved to just after it; then, when
// no --coordinator is anywhere, `env` is non-empty and `takes_env(subcommand)`, "--coordinator=ENV"
// is appended. An explicit flag wins over the variable, wherever it stands; a flag after the
// subcommand wins over one before it (CLI11 keeps the last). Anything else is left as it is, for
// CLI11 to parse or refuse.
std::vector<std::string> PlaceCoordinatorFlag(
    const std::vector<std::string>& args, const std::string& env,
    const std::function<bool(const std::string& subcommand)>& takes_env);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_COORDINATOR_FLAG_H_
