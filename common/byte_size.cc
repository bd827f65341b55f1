#include "common/byte_size.h"

#include <cctype>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t unit_at = 0;
  while (unit_at < lower.size() &&
         (std::isdigit(static_cast<unsigned char>(lower[unit_at])) || lower[unit_at] == '.')) {
    ++unit_at;
  }
  const std::string number = lower.substr(0, unit_at);
  const std::string unit(absl::StripAsciiWhitespace(absl::string_view(lower).substr(unit_at)));
  struct Unit {
    const char* name;
    double bytes;
  };
  constexpr Unit kUnits[] = {{"", 1},
                             {"b", 1},
                             {"kb", 1e3},
                             {"mb", 1e6},
                             {"gb", 1e9},
                             {"tb", 1e12},
                             {"kib", 1 << 10},
                             {"mib", 1 << 20},
                             {"gib", double(1 << 30)},
                             {"tib", double(int64_t{1} << 40)}};
  double value = 0;
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (unit == u.name) found = &u;
  }
  if (number.empty() || found == nullptr || !absl::SimpleAtod(number, &value) || value <= 0 ||
      value * found->bytes >= 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text,
        "' is not a size: give a positive number of bytes or one with a unit, e.g. 80GiB, 80GB, "
        "85899345920 (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"));
  }
  return static_cast<int64_t>(std::llround(value * found->bytes));
}

}  // namespace ringtrain
