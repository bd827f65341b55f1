// Hugging Face's tokenizer.json, the byte-level BPE subset (tokenizer.h says which).
#include <nlohmann/json.hpp>

#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/tokenizer.h"

namespace ringtrain::tokenizer_internal {
namespace {

using Json = nlohmann::json;

// Errors never quote the file (it may not be the user's); a type name is shown only when it is
// one of Hugging Face's own, which says what the file is without echoing arbitrary bytes.
constexpr const char* kKnownTypes[] = {"BPE",
                                       "WordPiece",
                                       "WordLevel",
                                       "Unigram",
                                       "ByteLevel",
                                       "Split",
                                       "Sequence",
                                       "Whitespace",
                                       "WhitespaceSplit",
                                       "Metaspace",
                                       "Punctuation",
                                       "Digits",
                                       "BertPreTokenizer",
                                       "CharDelimiterSplit",
                                       "UnicodeScripts",
                                       "FixedLength",
                                       "NFC",
                                       "NFD",
                                       "NFKC",
                                       "NFKD",
                                       "Lowercase",
                                       "Strip",
                                       "StripAccents",
                                       "Replace",
                                       "Prepend",
                                       "Precompiled",
                                       "BertNormalizer"};

std::string TypeName(const Json& node) {
  const Json* type = node.is_object() && node.contains("type") ? &node["type"] : nullptr;
  if (type == nullptr || !type->is_string()) return "an object without a \"type\"";
  for (const char* known : kKnownTypes) {
    if (type->get<std::string>() == known) return absl::StrCat("\"", known, "\"");
  }
  return "an unknown type";
}

class JsonReader {
 public:
  explicit JsonReader(const std::string& name) : name_(name) {}

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer ", name_, ": ", what));
  }

  // A member that must be there with the given kind.
  absl::StatusOr<const Json*> Member(const Json& parent, const std::string& parent_name,
                                     const std::string& key, Json::value_t kind,
                                     const char* kind_name) const {
    const std::string shown = parent_name.empty() ? key : absl::StrCat(parent_name, ".", key);
    if (!parent.is_object() || !parent.contains(key))
      return Error(absl::StrCat(shown, " is missing"));
    const Json& value = parent[key];
    const bool ok = value.type() == kind ||
                    (kind == Json::value_t::number_integer && value.is_number_unsigned());
    if (!ok) return Error(absl::StrCat(shown, " is not ", kind_name));
    return &value;
  }

  // An optional member's value when it is a bool; `fallback` when absent or null.
  absl::StatusOr<bool> OptionalBool(const Json& parent, const std::string& parent_name,
                                    const std::string& key, bool fallback) const {
    if (!parent.contains(key) || parent[key].is_null()) return fallback;
    if (!parent[key].is_boolean()) {
      return Error(absl::StrCat(parent_name, ".", key, " is not true or false"));
    }
    return parent[key].get<bool>();
  }

 private:
  const std::string& name_;
};

// Text that a PCRE2 pattern matches literally (Split's {"String": ...}).
std::string QuoteLiteral(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

absl::Status ReadByteLevel(const JsonReader& r, const Json& node, const std::string& where,
                           bool default_use_regex, TokenizerParts* parts) {
  RT_ASSIGN_OR_RETURN(parts->add_prefix_space,
                      r.OptionalBool(node, where, "add_prefix_space", false));
  RT_ASSIGN_OR_RETURN(const bool use_regex,
                      r.OptionalBool(node, where, "use_regex", default_use_regex));
  if (use_regex) parts->patterns.push_back(kGpt2Pattern);
  return absl::OkStatus();
}

absl::Status ReadSplit(const JsonReader& r, const Json& node, const std::string& where,
                       TokenizerParts* parts) {
  RT_ASSIGN_OR_RETURN(const Json* pattern,
                      r.Member(node, where, "pattern", Json::value_t::object, "an object"));
  if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
    parts->patterns.push_back((*pattern)["Regex"].get<std::string>());
  } else if (pattern->contains("String") && (*pattern)["String"].is_string()) {
    parts->patterns.push_back(QuoteLiteral((*pattern)["String"].get<std::string>()));
  } else {
    return r.Error(absl::StrCat(where, ".pattern has neither a \"Regex\" nor a \"String\""));
  }
  if (!node.contains("behavior") || node["behavior"] != "Isolated") {
    return r.Error(absl::StrCat(where,
                                ".behavior is not \"Isolated\", the only one supported "
                                "(each match a piece of its own, as Llama 3 ships)"));
  }
  RT_ASSIGN_OR_RETURN(const bool invert, r.OptionalBool(node, where, "invert", false));
  if (invert) return r.Error(absl::StrCat(where, ".invert is true; only false is supported"));
  return absl::OkStatus();
}

// ByteLevel, or Sequence[Split..., ByteLevel(use_regex = false)]; anything else is refused.
absl::Status ReadPreTokenizer(const JsonReader& r, const Json& root, TokenizerParts* parts) {
  const std::string hint =
      "\nHINT: this loader reads byte-level BPE tokenizers: pre_tokenizer ByteLevel, or a Sequence "
      "of Split (Regex, \"Isolated\") steps ending in ByteLevel, as GPT-2 and Llama 3 ship";
  if (!root.contains("pre_tokenizer") || root["pre_tokenizer"].is_null()) {
    return r.Error("pre_tokenizer is null; a byte-level BPE needs ByteLevel" + hint);
  }
  const Json& pre = root["pre_tokenizer"];
  const std::string type = TypeName(pre);
  if (type == "\"ByteLevel\"") return ReadByteLevel(r, pre, "pre_tokenizer", true, parts);
  if (type != "\"Sequence\"") {
    return r.Error(absl::StrCat("pre_tokenizer is ", type, ", not supported") + hint);
  }
  RT_ASSIGN_OR_RETURN(const Json* steps, r.Member(pre, "pre_tokenizer", "pretokenizers",
                                                  Json::value_t::array, "a list"));
  for (size_t i = 0; i < steps->size(); ++i) {
    const Json& step = (*steps)[i];
    const std::string where = absl::StrCat("pre_tokenizer.pretokenizers[", i, "]");
    const std::string step_type = TypeName(step);
    const bool last = i + 1 == steps->size();
    if (step_type == "\"Split\"" && !last) {
      RT_RETURN_IF_ERROR(ReadSplit(r, step, where, parts));
    } else if (step_type == "\"ByteLevel\"" && last) {
      RT_RETURN_IF_ERROR(ReadByteLevel(r, step, where, true, parts));
    } else {
      return r.Error(absl::StrCat(where, " is ", step_type, last ? ", not ByteLevel" : "",
                                  ", not supported here") +
                     hint);
    }
  }
  if (steps->empty()) return r.Error("pre_tokenizer.pretokenizers is empty" + hint);
  return absl::OkStatus();
}

absl::Status ReadModel(const JsonReader& r, const Json& root,
                       const absl::flat_hash_set<int32_t>& added_ids, TokenizerParts* parts) {
  RT_ASSIGN_OR_RETURN(const Json* model,
                      r.Member(root, "", "model", Json::value_t::object, "an object"));
  if (!model->contains("type") || (*model)["type"] != "BPE") {
    return r.Error(absl::StrCat("model.type is ", TypeName(*model),
                                ", not \"BPE\"; only byte-level BPE models are supported"));
  }
  if (model->contains("dropout") && !(*model)["dropout"].is_null() && (*model)["dropout"] != 0) {
    return r.Error("model.dropout is set; only deterministic BPE (dropout null) is supported");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model->contains(affix) && !(*model)[affix].is_null() && (*model)[affix] != "") {
      return r.Error(absl::StrCat("model.", affix, " is set; byte-level BPE uses none"));
    }
  }
  RT_ASSIGN_OR_RETURN(parts->vocab.ignore_merges,
                      r.OptionalBool(*model, "model", "ignore_merges", false));
  RT_ASSIGN_OR_RETURN(const Json* vocab, r.Member(*model, "model", "vocab", Json::value_t::object,
                                                  "an object (token -> id)"));
  for (const auto& [shown, id_json] : vocab->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX) {
      return r.Error("model.vocab has an id that is not an integer in [0, 2^31)");
    }
    const auto id = id_json.get<int32_t>();
    std::optional<std::string> bytes = ByteLevelDecode(shown);
    if (!bytes.has_value()) {
      if (added_ids.contains(id)) continue;  // an added token's entry: matched by content instead
      return r.Error(absl::StrCat("model.vocab: the token with id ", id,
                                  " is not written in the "
                                  "byte-level alphabet; only byte-level BPE is supported"));
    }
    parts->vocab.ids.emplace(*std::move(bytes), id);
  }
  RT_ASSIGN_OR_RETURN(const Json* merges,
                      r.Member(*model, "model", "merges", Json::value_t::array, "a list"));
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& merge = (*merges)[i];
    std::string left, right;
    if (merge.is_string()) {  // the older form: "left right"
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return r.Error(
            absl::StrCat("model.merges[", i, "] is not two tokens separated by a space"));
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return r.Error(absl::StrCat("model.merges[", i, "] is neither \"a b\" nor [\"a\", \"b\"]"));
    }
    std::optional<std::string> l = ByteLevelDecode(left), rr = ByteLevelDecode(right);
    if (!l || !rr) {
      return r.Error(
          absl::StrCat("model.merges[", i, "] is not written in the byte-level alphabet"));
    }
    parts->vocab.merges.emplace_back(*std::move(l), *std::move(rr));
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const JsonReader& r, const Json& root, TokenizerParts* parts) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return absl::OkStatus();
  if (!root["added_tokens"].is_array()) return r.Error("added_tokens is not a list");
  const Json& list = root["added_tokens"];
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    RT_ASSIGN_OR_RETURN(const Json* id, r.Member(list[i], where, "id",
                                                 Json::value_t::number_integer, "an integer"));
    RT_ASSIGN_OR_RETURN(const Json* content,
                        r.Member(list[i], where, "content", Json::value_t::string, "a string"));
    if (id->get<int64_t>() < 0 || id->get<int64_t>() > INT32_MAX) {
      return r.Error(absl::StrCat(where, ".id is not in [0, 2^31)"));
    }
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      RT_ASSIGN_OR_RETURN(const bool set, r.OptionalBool(list[i], where, flag, false));
      if (set) {
        return r.Error(absl::StrCat(where, ".", flag,
                                    " is true; only added tokens matched "
                                    "exactly as written (single_word, lstrip, rstrip false) are "
                                    "supported"));
      }
    }
    parts->added.push_back({content->get<std::string>(), id->get<int32_t>()});
  }
  return absl::OkStatus();
}

// Decode supports the ByteLevel decoder only; any other is noted for Decode to refuse, not refused
// here, since encoding does not depend on it. (Hugging Face without a decoder joins the tokens
// with spaces, their byte-level characters unchanged.) ByteLevel's options do not change decoding.
std::string UnsupportedDecoder(const Json& root) {
  if (!root.contains("decoder") || root["decoder"].is_null()) return "null";
  const std::string type = TypeName(root["decoder"]);
  return type == "\"ByteLevel\"" ? "" : type;
}

}  // namespace

absl::StatusOr<TokenizerParts> ParseTokenizerJson(const std::string& name,
                                                  const std::string& text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // The byte offset only: the library's message quotes the text around it.
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer ", name, ": not valid JSON (error at byte ", e.byte, ")"));
  } catch (const Json::out_of_range&) {
    // The library's only out_of_range while parsing: a number too large for a double.
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer ", name, ": a number in the JSON is too large to represent"));
  }
  JsonReader r(name);
  if (!root.is_object()) return r.Error("the JSON is not an object");
  if (root.contains("normalizer") && !root["normalizer"].is_null()) {
    return r.Error(absl::StrCat("normalizer is ", TypeName(root["normalizer"]),
                                "; only tokenizers without a normalizer (null, as Llama 3 and "
                                "GPT-2 ship) are supported"));
  }
  TokenizerParts parts;
  parts.format = "tokenizer.json";
  RT_RETURN_IF_ERROR(ReadAddedTokens(r, root, &parts));
  absl::flat_hash_set<int32_t> added_ids;
  for (const AddedToken& token : parts.added) added_ids.insert(token.id);
  RT_RETURN_IF_ERROR(ReadPreTokenizer(r, root, &parts));
  RT_RETURN_IF_ERROR(ReadModel(r, root, added_ids, &parts));
  parts.unsupported_decoder = UnsupportedDecoder(root);
  return parts;
}

}  // namespace ringtrain::tokenizer_internal
