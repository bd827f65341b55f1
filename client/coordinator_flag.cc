#include "client/coordinator_flag.h"

#include "absl/strings/match.h"

namespace ringtrain {
namespace {

constexpr char kFlag[] = "--coordinator";

bool IsCoordinatorFlag(const std::string& arg) {
  return arg == kFlag || absl::StartsWith(arg, std::string(kFlag) + "=");
}

}  // namespace

std::vector<std::string> PlaceCoordinatorFlag(
    const std::vector<std::string>& args, const std::string& env,
    const std::function<bool(const std::string& subcommand)>& takes_env) {
  std::vector<std::string> before, moved;  // the options before the subcommand; the flags moved
  size_t i = 0;
  for (; i < args.size() && absl::StartsWith(args[i], "-"); ++i) {
    if (!IsCoordinatorFlag(args[i])) {
      before.push_back(args[i]);
      continue;
    }
    moved.push_back(args[i]);
    if (args[i] == kFlag && i + 1 < args.size()) moved.push_back(args[++i]);
  }
  if (i == args.size()) {  // no subcommand: leave the rest to CLI11 ("a subcommand is required")
    before.insert(before.end(), moved.begin(), moved.end());
    return before;
  }
  const std::string& subcommand = args[i];
  std::vector<std::string> out = before;
  out.push_back(subcommand);
  out.insert(out.end(), moved.begin(), moved.end());
  bool given = !moved.empty();
  for (size_t j = i + 1; j < args.size(); ++j) {
    given = given || IsCoordinatorFlag(args[j]);
    out.push_back(args[j]);
  }
  if (!given && !env.empty() && takes_env(subcommand)) {
    out.push_back(std::string(kFlag) + "=" + env);
  }
  return out;
}

}  // namespace ringtrain
