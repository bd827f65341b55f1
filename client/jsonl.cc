#include "client/jsonl.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

struct StepLoss {
  int step = 0;
  double loss = 0;
};

// Parses one line; on failure returns why (without the location, which the caller adds).
absl::StatusOr<StepLoss> ParseLine(const std::string& line) {
  const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!record.is_object()) return absl::InvalidArgumentError("not a JSON object");
  const auto step = record.find("step");
  if (step == record.end() || !step->is_number_integer()) {
    return absl::InvalidArgumentError("no integer \"step\" field");
  }
  const auto loss = record.find("loss");
  if (loss == record.end() || !(loss->is_number() || loss->is_null())) {
    return absl::InvalidArgumentError("no numeric \"loss\" field");
  }
  const auto step_value = step->get<long long>();
  if (step_value < 1 || step_value > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("\"step\" ", step_value, " is out of range"));
  }
  StepLoss result;
  result.step = static_cast<int>(step_value);
  result.loss = loss->is_null() ? std::nan("") : loss->get<double>();
  return result;
}

}  // namespace

absl::StatusOr<StepLosses> ReadStepLosses(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open metrics file ", path));
  StepLosses losses;
  std::map<int, int> line_of_step;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::StatusOr<StepLoss> parsed = ParseLine(line);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_number, ": ", parsed.status().message(), ": ", line.substr(0, 200)));
    }
    const auto [it, inserted] = line_of_step.emplace(parsed->step, line_number);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": step ",
                                                     parsed->step, " already appeared on line ",
                                                     it->second));
    }
    losses[parsed->step] = parsed->loss;
  }
  return losses;
}

int LastStepInFile(const std::string& path) {
  std::ifstream in(path);
  int last = 0;
  std::string line;
  while (std::getline(in, line)) {
    absl::StatusOr<StepLoss> parsed = ParseLine(line);
    if (parsed.ok() && parsed->step > last) last = parsed->step;
  }
  return last;
}

}  // namespace ringtrain
