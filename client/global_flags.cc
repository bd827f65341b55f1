#include "client/global_flags.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

// The global flag `arg` is (`--name` or `--name=VALUE`); null when it is none.
const GlobalFlag* GlobalFlagOf(const std::string& arg) {
  for (const GlobalFlag& flag : kGlobalFlags) {
    if (arg == flag.name || absl::StartsWith(arg, absl::StrCat(flag.name, "="))) return &flag;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> PlaceGlobalFlags(
    const std::vector<std::string>& args,
    const std::function<std::string(const std::string& env)>& getenv,
    const std::function<bool(const std::string& subcommand, const std::string& flag)>& takes_env) {
  std::vector<std::string> before, moved;  // the options before the subcommand; the flags moved
  size_t i = 0;
  for (; i < args.size() && absl::StartsWith(args[i], "-"); ++i) {
    const GlobalFlag* flag = GlobalFlagOf(args[i]);
    if (flag == nullptr) {
      before.push_back(args[i]);
      continue;
    }
    moved.push_back(args[i]);
    if (args[i] == flag->name && i + 1 < args.size()) moved.push_back(args[++i]);
  }
  if (i == args.size()) {  // no subcommand: leave the rest to CLI11 ("a subcommand is required")
    before.insert(before.end(), moved.begin(), moved.end());
    return before;
  }
  const std::string& subcommand = args[i];
  std::vector<std::string> out = before;
  out.push_back(subcommand);
  out.insert(out.end(), moved.begin(), moved.end());
  out.insert(out.end(), args.begin() + i + 1, args.end());
  for (const GlobalFlag& flag : kGlobalFlags) {
    if (*flag.env == '\0') continue;
    bool given = false;
    for (size_t j = before.size() + 1; j < out.size() && !given; ++j) {
      given = GlobalFlagOf(out[j]) == &flag;
    }
    if (given || !takes_env(subcommand, flag.name)) continue;
    const std::string value = getenv(flag.env);
    if (!value.empty()) out.push_back(absl::StrCat(flag.name, "=", value));
  }
  return out;
}

}  // namespace ringtrain
