#include "worker/launcher/launch_args.h"

#include <cmath>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

constexpr const char* kFlags[] = {"--nproc",   "--master-addr",      "--master-port",
                                  "--trainer", "--threads-per-rank", "--grace-seconds"};

absl::Status ParseInt(const std::string& flag, const std::string& value, int lo, int hi, int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < lo || *out > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", value, "' is not valid; expected a whole number in ", lo, "..", hi));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args) {
  LaunchOptions o;
  bool have_nproc = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg == "--version") {
      o.version = true;
      return o;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // CONFIG
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    bool known = false;
    for (const char* f : kFlags) known = known || flag == f;
    if (!known) {
      const bool looks_like_override = flag.find('.') != std::string::npos;
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag '", flag, "'",
          looks_like_override ? "; config overrides go after CONFIG.toml"
                              : "; launcher flags are --nproc, --master-addr, --master-port, "
                                "--threads-per-rank, --trainer, --grace-seconds"));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    }
    if (flag == "--nproc") {
      if (absl::Status s = ParseInt(flag, value, 1, kMaxLaunchRanks, &o.nproc); !s.ok()) return s;
      have_nproc = true;
    } else if (flag == "--master-port") {
      if (absl::Status s = ParseInt(flag, value, 0, 65535, &o.master_port); !s.ok()) return s;
    } else if (flag == "--threads-per-rank") {
      if (absl::Status s = ParseInt(flag, value, 1, 1024, &o.threads_per_rank); !s.ok()) return s;
    } else if (flag == "--grace-seconds") {
      if (!absl::SimpleAtod(value, &o.grace_seconds) || !std::isfinite(o.grace_seconds) ||
          o.grace_seconds < 0 || o.grace_seconds > 3600) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--grace-seconds: '", value, "' is not valid; expected seconds in 0..3600"));
      }
    } else if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a non-empty value"));
    } else if (flag == "--master-addr") {
      o.master_addr = value;
    } else {
      o.trainer = value;
    }
  }
  if (i == args.size()) {
    return absl::InvalidArgumentError("missing CONFIG.toml (the trainer's job config)");
  }
  if (!have_nproc) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nproc is required: how many ranks to start (1..", kMaxLaunchRanks, ")"));
  }
  o.config = args[i];
  o.trainer_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  return o;
}

}  // namespace ringtrain
