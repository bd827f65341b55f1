// Internal to ringtrain_config: the table of every config key (a typed pointer into one JobConfig),
// so that parsing, overrides and printing share one list and a new field cannot be forgotten by one
// of them; lookups in it, and the messages that name unknown sections and keys.
#ifndef RINGTRAIN_COMMON_CONFIG_CONFIG_FIELDS_H_
#define RINGTRAIN_COMMON_CONFIG_CONFIG_FIELDS_H_

#include <cstdint>
#include <functional>
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

// A choice key (an enum in JobConfig), type-erased so one table holds every enum. A spelling that is
// not a choice is not a type error: it is kept (in `invalid`) for the validator, which reports it
// with the other rule violations ("must be one of ...; did you mean ...").
struct ChoicePtr {
  std::vector<std::string> names;    // the spellings, in enum order
  std::function<int()> get;          // the enum's index; -1 = unset (optional choices only)
  std::function<void(int)> set;
  bool optional = false;             // "" unsets it
};

template <class E>
ChoicePtr Choice(E* p) {
  return {ChoiceNames<E>(), [p] { return static_cast<int>(*p); },
          [p](int i) { *p = static_cast<E>(i); }};
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

// Every key of the config, as a pointer into one JobConfig, so one table drives parsing (writes),
// overrides and printing (reads) and a new field cannot be forgotten by one of them.
using FieldPtr = std::variant<int64_t*, double*, std::optional<double>*, bool*, std::string*, ChoicePtr>;
struct Field {
  const char* key;
  FieldPtr ptr;
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

// Stores the choice spelled `text`; a spelling that is no choice goes to `invalid` under `key`.
void AssignChoice(absl::string_view text, const ChoicePtr& choice, const std::string& key,
                  InvalidChoices* invalid);

}  // namespace config_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_CONFIG_FIELDS_H_
