// Internal to ringtrain_config: the table of every config key (a typed pointer into one JobConfig),
// so that parsing, overrides and printing share one list and a new field cannot be forgotten by one
// of them; lookups in it, and the messages that name unknown sections and keys.
#ifndef RINGTRAIN_COMMON_CONFIG_CONFIG_FIELDS_H_
#define RINGTRAIN_COMMON_CONFIG_CONFIG_FIELDS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/config/config_validate.h"
#include "common/config/job_config.h"

namespace ringtrain {
namespace config_internal {

// std::visit over FieldPtr with one lambda per alternative.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// A choice key (an enum in JobConfig), type-erased so one table holds every enum. A spelling that
// is not a choice is not a type error: it is kept (in `invalid`) for the validator, which reports
// it with the other rule violations ("must be one of ...; did you mean ...").
struct ChoicePtr {
  std::vector<std::string> names;  // the spellings, in enum order
  std::function<int()> get;        // the enum's index; -1 = unset (optional choices only)
  std::function<void(int)> set;
  bool optional = false;  // "" unsets it
  // Spellings from earlier releases (ChoiceOldSpellings): still read, with a warning.
  std::vector<std::pair<std::string, int>> old_spellings;
};

template <class E>
ChoicePtr Choice(E* p) {
  ChoicePtr choice{ChoiceNames<E>(), [p] { return static_cast<int>(*p); },
                   [p](int i) { *p = static_cast<E>(i); }};
  for (const auto& [old_name, value] : ChoiceOldSpellings<E>::kOld) {
    choice.old_spellings.emplace_back(old_name, static_cast<int>(value));
  }
  return choice;
}

template <class E>
ChoicePtr Choice(std::optional<E>* p) {
  return {ChoiceNames<E>(), [p] { return p->has_value() ? static_cast<int>(**p) : -1; },
          [p](int i) {
            if (i < 0) {
              p->reset();
            } else {
              *p = static_cast<E>(i);
            }
          },
          /*optional=*/true};
}

// What an integer key may hold: [min, max], and -1 too when `minus_one` says what it means.
struct IntBounds {
  int64_t min = 0;
  int64_t max = std::numeric_limits<int64_t>::max();  // the largest: no bound of its own
  const char* minus_one = nullptr;                    // "fill the world"
  const char* why = "";                               // " (the largest world size)"
};

// What a real key may hold: [min, max], either end open. A key in `seconds` becomes whole
// milliseconds downstream (collective timeouts, the restart backoff), so a positive value must be
// at least 0.001, and max keeps the milliseconds far from int64's end.
struct RealBounds {
  double min = 0;
  double max = std::numeric_limits<double>::max();  // the largest: no bound of its own
  bool above_min = false;                           // (min, ...
  bool below_max = false;                           // ..., max)
  bool seconds = false;
  const char* why = "";
};

// Integer keys have IntBounds, real keys RealBounds (job_config_test checks every key has them),
// the other kinds none.
using Bounds = std::variant<std::monostate, IntBounds, RealBounds>;

// Every key of the config, as a pointer into one JobConfig, so one table drives parsing (writes),
// overrides, printing (reads) and the bounds of each numeric value, and a new field cannot be
// forgotten by one of them.
using FieldPtr =
    std::variant<int64_t*, double*, std::optional<double>*, bool*, std::string*, ChoicePtr>;
struct Field {
  const char* key;
  FieldPtr ptr;
  Bounds bounds = {};
};
struct Section {
  const char* name;
  std::vector<Field> fields;
};

// Every section and key of `c`, in file order; the pointers are valid while `c` lives.
std::vector<Section> Sections(JobConfig& c);

std::vector<std::string> SectionNames(const std::vector<Section>& sections);
std::vector<std::string> KeyNames(const Section& section);
const Section* FindSection(const std::vector<Section>& sections, absl::string_view name);
const Field* FindField(const Section& section, absl::string_view key);

// "unknown section [x] (valid sections: ...); did you mean 'y'?" and the like.
std::string UnknownSection(absl::string_view name, const std::vector<Section>& sections);
std::string UnknownKey(const Section& section, absl::string_view key);
// A key given without a section: names the sections that do have it.
std::string KeyOutsideSection(absl::string_view key, const std::vector<Section>& sections);

// "" when `value` is within `bounds`; else the problem, naming the key, the value and what is valid
// ("model.vocab_size = 4294967297: must be in [1, 4294967296] (token ids are 32-bit)").
std::string OutOfBounds(absl::string_view key, int64_t value, const IntBounds& bounds);
std::string OutOfBounds(absl::string_view key, double value, const RealBounds& bounds);

// Stores the choice spelled `text`; a spelling that is no choice goes to `invalid` under `key`.
// An old spelling sets its value and appends a warning naming the spelling to use.
void AssignChoice(absl::string_view text, const ChoicePtr& choice, const std::string& key,
                  InvalidChoices* invalid, std::vector<std::string>* warnings);

}  // namespace config_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_CONFIG_FIELDS_H_
