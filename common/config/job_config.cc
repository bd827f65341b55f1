#include "common/config/job_config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <toml++/toml.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/config/config_fields.h"
#include "common/config/config_limits.h"
#include "common/config/config_validate.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

using config_internal::AssignChoice;
using config_internal::ChoicePtr;
using config_internal::Field;
using config_internal::FieldPtr;
using config_internal::FindField;
using config_internal::FindSection;
using config_internal::FormatDouble;
using config_internal::InvalidChoices;
using config_internal::KeyOutsideSection;
using config_internal::Overloaded;
using config_internal::Quote;
using config_internal::Section;
using config_internal::Sections;
using config_internal::UnknownKey;
using config_internal::UnknownSection;

// ---- TOML values
// ----------------------------------------------------------------------------------

// The readers and Assign* store the value when it fits and return nullptr, else what was expected.
const char* ReadTomlNumber(const toml::node& node, double* out) {
  if (const auto* i = node.as_integer()) {
    *out = static_cast<double>(i->get());
    return nullptr;
  }
  const auto* f = node.as_floating_point();
  if (f == nullptr) return "expected a number";
  if (!std::isfinite(f->get())) return "expected a finite number";
  *out = f->get();
  return nullptr;
}

const char* AssignToml(const toml::node& node, const FieldPtr& ptr, const std::string& key,
                       InvalidChoices* invalid, std::vector<std::string>* warnings) {
  return std::visit(Overloaded{[&](int64_t* p) -> const char* {
                                 const auto* v = node.as_integer();
                                 if (v == nullptr) return "expected an integer";
                                 *p = v->get();
                                 return nullptr;
                               },
                               [&](double* p) -> const char* { return ReadTomlNumber(node, p); },
                               [&](std::optional<double>* p) -> const char* {
                                 double v = 0;
                                 const char* error = ReadTomlNumber(node, &v);
                                 if (error == nullptr) *p = v;
                                 return error;
                               },
                               [&](bool* p) -> const char* {
                                 const auto* v = node.as_boolean();
                                 if (v == nullptr) return "expected true or false";
                                 *p = v->get();
                                 return nullptr;
                               },
                               [&](std::string* p) -> const char* {
                                 const auto* v = node.as_string();
                                 if (v == nullptr) return "expected a string";
                                 *p = v->get();
                                 return nullptr;
                               },
                               [&](const ChoicePtr& p) -> const char* {
                                 const auto* v = node.as_string();
                                 if (v == nullptr) return "expected a string";
                                 AssignChoice(v->get(), p, key, invalid, warnings);
                                 return nullptr;
                               }},
                    ptr);
}

// The node as the user wrote it, for messages: strings double-quoted like the rest of our output,
// cut to an Excerpt (a 200 KB string or array must not become a 200 KB error).
std::string RenderToml(const toml::node& node) {
  if (const auto* s = node.as_string()) return Quote(Excerpt(s->get()));
  if (const auto* f = node.as_floating_point()) return FormatDouble(f->get());
  std::ostringstream out;
  node.visit([&](const auto& n) { out << n; });
  return Excerpt(out.str());
}

struct Located {
  int64_t line;
  std::string problem;
};

void ApplyToml(const toml::table& root, const std::vector<Section>& sections,
               std::vector<Located>* problems, InvalidChoices* invalid,
               std::vector<std::string>* warnings, std::set<std::string>* given) {
  for (const auto& [toml_name, node] : root) {
    const std::string name(toml_name.str());
    const int64_t line = node.source().begin.line;
    const toml::table* table = node.as_table();
    const Section* section = FindSection(sections, name);
    if (table == nullptr) {
      problems->push_back({line, section != nullptr ? absl::StrCat("[", name, "] must be a table")
                                                    : KeyOutsideSection(name, sections)});
      continue;
    }
    if (section == nullptr) {
      problems->push_back({line, UnknownSection(name, sections)});
      continue;
    }
    for (const auto& [toml_key, value] : *table) {
      const std::string key(toml_key.str());
      const int64_t key_line = value.source().begin.line;
      const Field* field = FindField(*section, key);
      if (field == nullptr) {
        problems->push_back({key_line, UnknownKey(*section, key)});
        continue;
      }
      given->insert(absl::StrCat(section->name, ".", key));
      if (const char* expected = AssignToml(
              value, field->ptr, absl::StrCat(section->name, ".", key), invalid, warnings)) {
        problems->push_back({key_line, absl::StrCat(section->name, ".", key, " = ",
                                                    RenderToml(value), ": ", expected)});
      }
    }
  }
}

// ---- Override values
// ------------------------------------------------------------------------------

// from_chars rejects the leading '+' that people do write ("+1e-3"), and surrounding blanks.
absl::string_view NumberText(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (absl::StartsWith(text, "+") && !absl::StartsWith(text, "+-")) text.remove_prefix(1);
  return text;
}

const char* ParseNumber(absl::string_view text, double* out) {
  text = NumberText(text);
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) return "expected a finite number";
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return "expected a number";
  if (!std::isfinite(v)) return "expected a finite number";
  *out = v;
  return nullptr;
}

// The shell eats the quotes of --k="a b" but keeps those of --k='"a b"'; accept both.
absl::string_view Unquoted(absl::string_view t) {
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
  return t;
}

// Whether `s` is UTF-8 as TOML requires (no overlong forms, surrogates or code points past
// U+10FFFF). A TOML file is checked by toml++; an override is not, and a string that is not UTF-8
// would be accepted but could never be written back (JobConfigToToml, beside every checkpoint).
bool IsUtf8(absl::string_view s) {
  constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};  // by continuation bytes
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t more = lead < 0x80           ? 0
                        : (lead >> 5) == 0x6  ? 1
                        : (lead >> 4) == 0xe  ? 2
                        : (lead >> 3) == 0x1e ? 3
                                              : 4;
    if (more == 4 || s.size() - i - 1 < more) return false;
    uint32_t code = more == 0 ? lead : lead & (0x3f >> more);
    for (size_t k = 1; k <= more; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if ((next >> 6) != 0x2) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < kSmallest[more] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
      return false;
    i += more + 1;
  }
  return true;
}

const char* AssignText(absl::string_view text, const FieldPtr& ptr, const std::string& key,
                       InvalidChoices* invalid, std::vector<std::string>* warnings) {
  return std::visit(Overloaded{[&](int64_t* p) -> const char* {
                                 const absl::string_view t = NumberText(text);
                                 int64_t v = 0;
                                 const auto [end, ec] =
                                     std::from_chars(t.data(), t.data() + t.size(), v);
                                 if (ec == std::errc::result_out_of_range)
                                   return "expected an integer that fits in 64 bits";
                                 if (ec != std::errc() || end != t.data() + t.size() || t.empty())
                                   return "expected an integer";
                                 *p = v;
                                 return nullptr;
                               },
                               [&](double* p) -> const char* { return ParseNumber(text, p); },
                               [&](std::optional<double>* p) -> const char* {
                                 double v = 0;
                                 const char* error = ParseNumber(text, &v);
                                 if (error == nullptr) *p = v;
                                 return error;
                               },
                               [&](bool* p) -> const char* {
                                 const absl::string_view t = absl::StripAsciiWhitespace(text);
                                 if (t != "true" && t != "false") return "expected true or false";
                                 *p = t == "true";
                                 return nullptr;
                               },
                               [&](std::string* p) -> const char* {
                                 if (!IsUtf8(text)) return "expected UTF-8 text";
                                 *p = std::string(Unquoted(text));
                                 return nullptr;
                               },
                               [&](const ChoicePtr& p) -> const char* {
                                 AssignChoice(Unquoted(text), p, key, invalid, warnings);
                                 return nullptr;
                               }},
                    ptr);
}

void ApplyOverride(const std::string& arg, const std::vector<Section>& sections,
                   std::vector<std::string>* problems, InvalidChoices* invalid,
                   std::vector<std::string>* warnings, std::set<std::string>* given) {
  absl::string_view text = arg;
  if (absl::StartsWith(text, "--")) text.remove_prefix(2);
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    problems->push_back(
        absl::StrCat("override '", Excerpt(arg), "': expected --section.key=value"));
    return;
  }
  const absl::string_view path = absl::StripAsciiWhitespace(text.substr(0, eq));
  const absl::string_view value = text.substr(eq + 1);
  const size_t dot = path.find('.');
  if (dot == absl::string_view::npos) {
    problems->push_back(
        absl::StrCat("override '", Excerpt(arg), "': ", KeyOutsideSection(path, sections)));
    return;
  }
  const Section* section = FindSection(sections, path.substr(0, dot));
  if (section == nullptr) {
    problems->push_back(absl::StrCat("override '", Excerpt(arg),
                                     "': ", UnknownSection(path.substr(0, dot), sections)));
    return;
  }
  const Field* field = FindField(*section, path.substr(dot + 1));
  if (field == nullptr) {
    problems->push_back(absl::StrCat("override '", Excerpt(arg),
                                     "': ", UnknownKey(*section, path.substr(dot + 1))));
    return;
  }
  given->insert(absl::StrCat(section->name, ".", field->key));
  if (const char* expected = AssignText(value, field->ptr, std::string(path), invalid, warnings)) {
    problems->push_back(absl::StrCat(Excerpt(path), " = ", Excerpt(value), " (override '",
                                     Excerpt(arg), "'): ", expected));
  }
}

// A section's list of valid keys once: later unknown keys of the same section say "as above", so
// twenty of them still fit in one gRPC status with the count of the rest.
std::vector<std::string> ListValidKeysOnce(std::vector<std::string> problems) {
  std::set<std::string> listed;
  for (std::string& problem : problems) {
    const size_t open = problem.find(" (valid keys in [");
    const size_t colon = open == std::string::npos ? open : problem.find("]: ", open);
    const size_t close = colon == std::string::npos ? colon : problem.find(')', colon);
    if (close == std::string::npos) continue;
    const std::string list = problem.substr(open, close + 1 - open);
    if (listed.insert(list).second) continue;
    problem.replace(open, close + 1 - open, problem.substr(open, colon + 3 - open) + "as above)");
  }
  return problems;
}

// At most kMaxReportedProblems lines: 100,000 unknown keys must not become a 16 MB status.
absl::Status ProblemsError(absl::string_view what, const std::vector<std::string>& problems) {
  return absl::InvalidArgumentError(JoinProblems(what, ListValidKeysOnce(problems)));
}

}  // namespace

absl::StatusOr<JobConfig> ParseJobConfig(const std::string& toml_text,
                                         const std::vector<std::string>& overrides,
                                         const std::string& source_name) {
  const std::string what = absl::StrCat("invalid config ", source_name);
  // Before toml++ sees the text: it recurses once per dotted-key component and bracket.
  if (absl::Status bounds = CheckConfigBounds(toml_text, overrides, source_name); !bounds.ok())
    return bounds;
  toml::table root;
  try {
    // toml++ reports malformed input by throwing; this is the edge where that becomes a Status.
    root = toml::parse(std::string_view(toml_text), std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": malformed TOML at line ", e.source().begin.line, ", column ",
                     e.source().begin.column, ": ", std::string(e.description())));
  }

  JobConfig config;
  const std::vector<Section> sections = Sections(config);
  std::vector<Located> located;
  InvalidChoices invalid;
  std::vector<std::string> warnings;
  std::set<std::string> given;
  ApplyToml(root, sections, &located, &invalid, &warnings, &given);
  // toml++ iterates keys in sorted order; report in file order instead.
  std::stable_sort(located.begin(), located.end(),
                   [](const Located& a, const Located& b) { return a.line < b.line; });
  std::vector<std::string> problems;
  for (const Located& l : located)
    problems.push_back(absl::StrCat("line ", l.line, ": ", l.problem));
  for (const std::string& arg : overrides)
    ApplyOverride(arg, sections, &problems, &invalid, &warnings, &given);
  // Values that failed to parse kept their defaults, so range checks now would only mislead.
  if (!problems.empty()) return ProblemsError(what, problems);

  config.given_keys = std::move(given);
  config.hf_pending = !config.model.hf_assets_path.empty();
  config_internal::ValidateJobConfig(config, invalid, &problems);
  if (!problems.empty()) return ProblemsError(what, problems);
  config.warnings = std::move(warnings);
  return config;
}

absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
  }
  std::string text;
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) text.append(buf, n);
  // A directory opens fine on Linux and fails only here, with EISDIR.
  const int read_errno = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (read_errno != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(read_errno)));
  }
  return ParseJobConfig(text, overrides, path);
}

int64_t ActivationCheckpointEvery(const JobConfig& config) {
  const ActivationCheckpointSection& ac = config.activation_checkpoint;
  switch (ac.mode) {
    case AcMode::kNone: return 0;
    case AcMode::kFull: return 1;
    case AcMode::kSelective: break;
  }
  if (ac.selective_ac_option == "op") return -1;
  return std::max<int64_t>(1, std::strtoll(ac.selective_ac_option.c_str(), nullptr, 10));
}

std::string JobConfigToToml(const JobConfig& config, const std::string& only_section) {
  JobConfig copy = config;  // The field table points into a mutable config.
  std::string out = "# ringtrain job config: every key with its effective value.\n";
  for (const Section& section : Sections(copy)) {
    if (!only_section.empty() && section.name != only_section) continue;
    absl::StrAppend(&out, "\n[", section.name, "]\n");
    for (const Field& f : section.fields) {
      std::visit(
          Overloaded{
              [&](int64_t* p) { absl::StrAppend(&out, f.key, " = ", *p, "\n"); },
              [&](double* p) { absl::StrAppend(&out, f.key, " = ", FormatDouble(*p), "\n"); },
              [&](std::optional<double>* p) {
                // TOML has no null: an unset optional is an absent key.
                if (p->has_value()) {
                  absl::StrAppend(&out, f.key, " = ", FormatDouble(**p), "\n");
                } else {
                  absl::StrAppend(&out, "# ", f.key, " is not set\n");
                }
              },
              [&](bool* p) { absl::StrAppend(&out, f.key, " = ", *p ? "true" : "false", "\n"); },
              [&](std::string* p) { absl::StrAppend(&out, f.key, " = ", Quote(*p), "\n"); },
              [&](const ChoicePtr& p) {
                const int i = p.get();
                absl::StrAppend(&out, f.key, " = ", Quote(i < 0 ? "" : p.names[i]), "\n");
              }},
          f.ptr);
    }
  }
  return out;
}

}  // namespace ringtrain
