// FuzzTokenizer: a tokenizer file as a job names it (training.tokenizer_path), then text through
// it.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"
#include "fuzz/fuzz_targets.h"

namespace ringtrain::fuzz {

std::string FuzzTokenizer(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t file_end = bytes.find('\0');
  const std::string file = bytes.substr(0, file_end);
  const std::string text = file_end == std::string::npos ? "" : bytes.substr(file_end + 1);

  // The format as Tokenizer::Load tells them apart: '{' first (after blanks) is a tokenizer.json.
  const size_t first = file.find_first_not_of(" \t\r\n");
  const bool json = first != std::string::npos && file[first] == '{';
  absl::StatusOr<TokenizerParts> parts =
      json ? tokenizer_internal::ParseTokenizerJson("fuzz.json", file)
           : tokenizer_internal::ParseTiktoken("fuzz.tiktoken", file);
  if (!parts.ok()) {
    if (parts.status().message().empty()) return "a rejected tokenizer file has an empty message";
    return "";
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromParts(*std::move(parts));
  if (!tokenizer.ok()) {
    if (tokenizer.status().message().empty()) return "a rejected tokenizer has an empty message";
    return "";
  }
  std::vector<int32_t> ids;
  (*tokenizer)->Encode(text, &ids);
  // Every byte is in a byte-level vocabulary, so any text has ids, each below vocab_size.
  if (text.empty() != ids.empty()) {
    return absl::StrCat(text.size(), " bytes of text gave ", ids.size(), " ids");
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= (*tokenizer)->vocab_size()) {
      return absl::StrCat("id ", id, " outside [0, ", (*tokenizer)->vocab_size(), ")");
    }
  }
  // Encoding is a function of the text: the same ids a second time (the word cache warm).
  std::vector<int32_t> again;
  (*tokenizer)->Encode(text, &again);
  if (again != ids) return "the same text gave different ids the second time";
  return "";
}

}  // namespace ringtrain::fuzz
