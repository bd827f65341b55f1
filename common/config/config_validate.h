// Internal to ringtrain_config: the whole-config validation rules, and the value formatting that
// the parser, the validator and JobConfigToToml share so a value reads the same in every message.
#ifndef RINGTRAIN_COMMON_CONFIG_CONFIG_VALIDATE_H_
#define RINGTRAIN_COMMON_CONFIG_CONFIG_VALIDATE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "common/config/job_config.h"

namespace ringtrain {
namespace config_internal {

// Shortest text that parses back to exactly `value`, always marked as a float ("1.0", not "1").
std::string FormatDouble(double value);

// `text` as a TOML basic string, quotes included.
std::string Quote(absl::string_view text);

// The positive divisors of `n` in increasing order; empty when n is too large to enumerate quickly.
std::vector<int64_t> Divisors(int64_t n);

// Choice keys ("training.dataset") whose value spelled no choice, with the spelling as written. The
// parser keeps the key's default and leaves the message to the validator, so a misspelt choice is
// reported with every other rule violation at once.
using InvalidChoices = std::map<std::string, std::string>;

// Appends one line per problem ("section.key = value: what is valid") for every rule that does not
// need the world size, `invalid` choices included. Appends nothing for a valid config.
void ValidateJobConfig(const JobConfig& config, const InvalidChoices& invalid,
                       std::vector<std::string>* problems);

// training.seq_len must split evenly into the CP shards: 2·cp chunks (headtail) or cp (none).
// Skips the check when the degrees themselves are invalid (reported elsewhere).
void CheckSeqLenSharding(const JobConfig& config, std::vector<std::string>* problems);

}  // namespace config_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_CONFIG_VALIDATE_H_
