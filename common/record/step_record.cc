#include "common/record/step_record.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/record/json_record.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

template <class T, size_t N>
void AddFigures(const T& from, const std::array<FigureField<T>, N>& fields, JsonRecord* to) {
  for (const FigureField<T>& f : fields) {
    const double value = from.*f.member;
    if (f.kind == FigureKind::kCount && std::isfinite(value)) {
      to->Add(f.name, static_cast<int64_t>(value));
    } else {
      to->Add(f.name, value);
    }
  }
}

double Figure(const nlohmann::json& object, const char* key, MissingFigure missing) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return missing == MissingFigure::kZero ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  }
  return it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
}

template <class T, size_t N>
void ReadFigures(const nlohmann::json& from, const std::array<FigureField<T>, N>& fields,
                 MissingFigure missing, T* to) {
  for (const FigureField<T>& f : fields) to->*f.member = Figure(from, f.name, missing);
}

}  // namespace

std::string StepRecord::ToJson() const {
  JsonRecord record;
  record.Add("step", step);
  AddFigures(*this, kStepFields, &record);
  for (const auto& [name, member] : kOptionalStepFields) {
    if ((this->*member).has_value()) record.Add(name, *(this->*member));
  }
  if (!ranks.empty()) {
    std::vector<std::string> entries;
    for (size_t r = 0; r < ranks.size(); ++r) {
      JsonRecord entry;
      entry.Add("rank", static_cast<int64_t>(r));
      AddFigures(ranks[r], kRankFields, &entry);
      entries.push_back(entry.str());
    }
    record.AddRaw("ranks", absl::StrCat("[", absl::StrJoin(entries, ", "), "]"));
  }
  return record.str();
}

std::vector<double> RankFiguresToDoubles(const RankFigures& figures) {
  std::vector<double> values;
  values.reserve(kRankFields.size());
  for (const auto& f : kRankFields) values.push_back(figures.*f.member);
  return values;
}

absl::StatusOr<RankFigures> RankFiguresFromDoubles(const std::vector<double>& values,
                                                   int64_t rank) {
  if (values.size() != kRankFields.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " sent ", values.size(),
                                                   " figures; a step has ", kRankFields.size()));
  }
  RankFigures figures;
  figures.rank = rank;
  for (size_t i = 0; i < kRankFields.size(); ++i) figures.*kRankFields[i].member = values[i];
  return figures;
}

absl::StatusOr<std::optional<StepRecord>> ParseStepRecord(absl::string_view json,
                                                          MissingFigure missing) {
  const nlohmann::json j = nlohmann::json::parse(json.begin(), json.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("a record that is not a JSON object");
  const auto step = j.find("step");
  if (step == j.end()) return std::nullopt;
  if (!step->is_number_integer()) {
    return absl::InvalidArgumentError("a record whose \"step\" is not an integer");
  }
  StepRecord record;
  record.step = step->get<int64_t>();
  ReadFigures(j, kStepFields, missing, &record);
  for (const auto& [name, member] : kOptionalStepFields) {
    if (j.contains(name)) record.*member = Figure(j, name, MissingFigure::kNaN);
  }
  const auto ranks = j.find("ranks");
  if (ranks == j.end()) return record;
  if (!ranks->is_array()) {
    return absl::InvalidArgumentError("a record whose \"ranks\" is not an array");
  }
  for (size_t i = 0; i < ranks->size(); ++i) {
    const nlohmann::json& entry = (*ranks)[i];
    if (!entry.is_object()) {
      return absl::InvalidArgumentError(
          "a record with an entry of \"ranks\" that is not an object");
    }
    RankFigures figures;
    const auto rank = entry.find("rank");
    figures.rank = rank != entry.end() && rank->is_number_integer() ? rank->get<int64_t>()
                                                                    : static_cast<int64_t>(i);
    ReadFigures(entry, kRankFields, missing, &figures);
    record.ranks.push_back(figures);
  }
  return record;
}

}  // namespace ringtrain
