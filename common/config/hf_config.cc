#include "common/config/hf_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/config_validate.h"
#include "common/config/model_shape.h"
#include "common/status_macros.h"
#include "common/text_file.h"

namespace ringtrain {
namespace {

using config_internal::FormatDouble;
using config_internal::Quote;
using Json = nlohmann::json;

// Reads config.json's fields, collecting every problem (so one run names them all).
class HfReader {
 public:
  HfReader(const Json& root, std::string source) : root_(root), source_(std::move(source)) {}

  const Json* Find(const Json& object, const char* name) const {
    const auto it = object.find(name);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }

  // An integer in [min, max]; `fallback` when absent (nullopt: required).
  int64_t Int(const Json& object, const std::string& where, const char* name, int64_t min,
              int64_t max, std::optional<int64_t> fallback = std::nullopt) {
    const Json* v = Find(object, name);
    if (v == nullptr) {
      if (!fallback) Add(where + name, "is missing (a positive integer is needed)");
      return fallback.value_or(0);
    }
    if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > max) {
      Add(where + name,
          absl::StrCat("= ", v->dump(), ": expected an integer in [", min, ", ", max, "]"));
      return fallback.value_or(0);
    }
    return v->get<int64_t>();
  }

  double Real(const Json& object, const std::string& where, const char* name,
              std::optional<double> fallback = std::nullopt) {
    const Json* v = Find(object, name);
    if (v == nullptr) {
      if (!fallback) Add(where + name, "is missing (a positive number is needed)");
      return fallback.value_or(1.0);
    }
    if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>())) {
      Add(where + name, absl::StrCat("= ", v->dump(), ": expected a positive number"));
      return fallback.value_or(1.0);
    }
    return v->get<double>();
  }

  bool Bool(const char* name, bool fallback) {
    const Json* v = Find(root_, name);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) {
      Add(name, absl::StrCat("= ", v->dump(), ": expected true or false"));
      return fallback;
    }
    return v->get<bool>();
  }

  // A field ringtrain can only honour at `supported` (a JSON value); absent is fine.
  void Require(const char* name, const Json& supported, const std::string& why) {
    const Json* v = Find(root_, name);
    if (v != nullptr && *v != supported) Add(name, absl::StrCat("= ", v->dump(), ": ", why));
  }

  void Add(const std::string& field, const std::string& problem) {
    problems_.push_back(absl::StrCat(field, " ", problem));
  }

  absl::Status Done() const {
    if (problems_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", absl::StrJoin(problems_, "; ")));
  }

  const Json& root() const { return root_; }

 private:
  const Json& root_;
  std::string source_;
  std::vector<std::string> problems_;
};

void ReadRope(HfReader& r, ModelSection& m) {
  const Json& root = r.root();
  // transformers 5.x: rope_parameters holds the theta too; 4.x: rope_theta + rope_scaling.
  const Json* parameters = r.Find(root, "rope_parameters");
  const Json* scaling = parameters != nullptr ? parameters : r.Find(root, "rope_scaling");
  const std::string where = parameters != nullptr ? "rope_parameters." : "rope_scaling.";
  if (parameters != nullptr && !parameters->is_object()) {
    r.Add("rope_parameters", "must be an object");
    return;
  }
  m.rope_theta = parameters != nullptr ? r.Real(*parameters, where, "rope_theta", 10000.0)
                                       : r.Real(root, "", "rope_theta", 10000.0);
  m.rope_type = RopeType::kDefault;
  if (scaling == nullptr) return;
  if (!scaling->is_object()) {
    r.Add("rope_scaling", "must be an object or null");
    return;
  }
  const Json* type = r.Find(*scaling, "rope_type");
  if (type == nullptr) type = r.Find(*scaling, "type");  // transformers' older spelling
  const std::string name = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (name == "default" || (type == nullptr && parameters != nullptr)) return;
  if (name != "llama3") {
    r.Add(where + "rope_type",
          absl::StrCat("= ", type != nullptr ? type->dump() : "(missing)",
                       ": ringtrain implements \"default\" and \"llama3\" (Llama 3.1/3.2)"));
    return;
  }
  m.rope_type = RopeType::kLlama3;
  m.rope_factor = r.Real(*scaling, where, "factor");
  m.rope_low_freq_factor = r.Real(*scaling, where, "low_freq_factor");
  m.rope_high_freq_factor = r.Real(*scaling, where, "high_freq_factor");
  m.rope_original_max_position_embeddings =
      r.Int(*scaling, where, "original_max_position_embeddings", 1, int64_t{1} << 24);
}

// Every architecture key: its name here, its name in config.json, and its value as text.
struct Mapped {
  const char* key;
  const char* hf;
  std::function<std::string(const ModelSection&)> value;
};

std::vector<Mapped> MappedKeys() {
  auto integer = [](int64_t ModelSection::*f) {
    return [f](const ModelSection& m) { return absl::StrCat(m.*f); };
  };
  auto real = [](double ModelSection::*f) {
    return [f](const ModelSection& m) { return FormatDouble(m.*f); };
  };
  return {
      {"dim", "hidden_size", integer(&ModelSection::dim)},
      {"n_layers", "num_hidden_layers", integer(&ModelSection::n_layers)},
      {"n_heads", "num_attention_heads", integer(&ModelSection::n_heads)},
      {"n_kv_heads", "num_key_value_heads", integer(&ModelSection::n_kv_heads)},
      {"vocab_size", "vocab_size", integer(&ModelSection::vocab_size)},
      {"head_dim", "head_dim", [](const ModelSection& m) { return absl::StrCat(HeadDim(m)); }},
      {"intermediate_size", "intermediate_size",
       [](const ModelSection& m) { return absl::StrCat(FfnHiddenDim(m)); }},
      {"norm_eps", "rms_norm_eps", real(&ModelSection::norm_eps)},
      {"rope_theta", "rope_theta", real(&ModelSection::rope_theta)},
      {"rope_type", "rope_type",
       [](const ModelSection& m) { return Quote(ChoiceName(m.rope_type)); }},
      {"rope_factor", "factor", real(&ModelSection::rope_factor)},
      {"rope_low_freq_factor", "low_freq_factor", real(&ModelSection::rope_low_freq_factor)},
      {"rope_high_freq_factor", "high_freq_factor", real(&ModelSection::rope_high_freq_factor)},
      {"rope_original_max_position_embeddings", "original_max_position_embeddings",
       integer(&ModelSection::rope_original_max_position_embeddings)},
      {"tie_word_embeddings", "tie_word_embeddings",
       [](const ModelSection& m) { return std::string(m.tie_word_embeddings ? "true" : "false"); }},
  };
}

bool IsRopeScalingKey(const std::string& key) {
  return key == "rope_factor" || key == "rope_low_freq_factor" || key == "rope_high_freq_factor" ||
         key == "rope_original_max_position_embeddings";
}

// A config error (exit 2), not a missing file: the job names the folder.
absl::StatusOr<std::string> ReadText(const std::string& path, const std::string& key,
                                     const std::string& dir) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " = ", Quote(dir), ": ", text.status().message(), " (", key, ")"));
  }
  return text;
}

}  // namespace

absl::StatusOr<ModelSection> ParseHfConfig(absl::string_view json_text, const std::string& source) {
  const Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  HfReader r(root, source);
  r.Require("model_type", "llama", "ringtrain trains Llama models (model_type \"llama\")");
  if (const Json* arch = r.Find(root, "architectures"); arch != nullptr) {
    if (!arch->is_array() ||
        std::find(arch->begin(), arch->end(), Json("LlamaForCausalLM")) == arch->end()) {
      r.Add("architectures", absl::StrCat("= ", arch->dump(), ": expected LlamaForCausalLM"));
    }
  }
  r.Require("hidden_act", "silu", "ringtrain's feed-forward is SwiGLU (silu)");
  r.Require("attention_bias", false, "ringtrain's attention projections have no bias");
  r.Require("mlp_bias", false, "ringtrain's feed-forward projections have no bias");
  if (const Json* dropout = r.Find(root, "attention_dropout");
      dropout != nullptr && (!dropout->is_number() || dropout->get<double>() != 0.0)) {
    r.Add("attention_dropout", absl::StrCat("= ", dropout->dump(), ": ringtrain has no dropout"));
  }
  if (r.Find(root, "quantization_config") != nullptr) {
    r.Add("quantization_config", "is set: ringtrain reads float32, bfloat16 and float16 weights");
  }

  constexpr int64_t kWidth = int64_t{1} << 16, kMany = int64_t{1} << 32;
  ModelSection m;
  m.dim = r.Int(root, "", "hidden_size", 1, kWidth);
  m.n_layers = r.Int(root, "", "num_hidden_layers", 1, 1024);
  m.n_heads = r.Int(root, "", "num_attention_heads", 1, kWidth);
  m.n_kv_heads = r.Int(root, "", "num_key_value_heads", 1, kWidth, m.n_heads);
  m.vocab_size = r.Int(root, "", "vocab_size", 1, kMany);
  m.head_dim = r.Int(root, "", "head_dim", 1, kWidth, m.n_heads > 0 ? m.dim / m.n_heads : 0);
  m.intermediate_size = r.Int(root, "", "intermediate_size", 1, int64_t{1} << 20);
  m.norm_eps = r.Real(root, "", "rms_norm_eps", 1e-6);
  m.max_seq_len = r.Int(root, "", "max_position_embeddings", 1, int64_t{1} << 24, 2048);
  m.tie_word_embeddings = r.Bool("tie_word_embeddings", false);
  ReadRope(r, m);
  RT_RETURN_IF_ERROR(r.Done());
  return m;
}

std::string HfConfigJson(const ModelSection& m, MixedPrecision dtype) {
  const char* dtype_name = dtype == MixedPrecision::kBFloat16 ? "bfloat16" : "float32";
  Json rope = {{"rope_type", ChoiceName(m.rope_type)}};
  Json scaling = nullptr;
  if (m.rope_type == RopeType::kLlama3) {
    rope["factor"] = m.rope_factor;
    rope["low_freq_factor"] = m.rope_low_freq_factor;
    rope["high_freq_factor"] = m.rope_high_freq_factor;
    rope["original_max_position_embeddings"] = m.rope_original_max_position_embeddings;
    scaling = rope;
  }
  Json parameters = rope;
  parameters["rope_theta"] = m.rope_theta;
  const Json config = {
      {"architectures", Json::array({"LlamaForCausalLM"})},
      {"model_type", "llama"},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"mlp_bias", false},
      {"hidden_size", m.dim},
      {"num_hidden_layers", m.n_layers},
      {"num_attention_heads", m.n_heads},
      {"num_key_value_heads", m.n_kv_heads},
      {"head_dim", HeadDim(m)},
      {"intermediate_size", FfnHiddenDim(m)},
      {"vocab_size", m.vocab_size},
      {"rms_norm_eps", m.norm_eps},
      {"max_position_embeddings", m.max_seq_len},
      {"tie_word_embeddings", m.tie_word_embeddings},
      {"rope_theta", m.rope_theta},
      {"rope_scaling", scaling},
      {"rope_parameters", parameters},
      {"torch_dtype", dtype_name},
      {"dtype", dtype_name},
      {"use_cache", true},
  };
  return config.dump(2) + "\n";
}

absl::Status ResolveHfAssets(JobConfig* config) {
  const std::string dir = config->model.hf_assets_path;
  if (dir.empty()) return absl::OkStatus();
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  RT_ASSIGN_OR_RETURN(const std::string text, ReadText(path, "model.hf_assets_path", dir));
  RT_ASSIGN_OR_RETURN(ModelSection hf, ParseHfConfig(text, path));
  hf.hf_assets_path = dir;

  std::vector<std::string> problems;
  const ModelSection& given = config->model;
  for (const Mapped& k : MappedKeys()) {
    const std::string key = absl::StrCat("model.", k.key);
    if (config->given_keys.count(key) == 0) continue;
    // The scaling keys mean nothing without llama3 scaling: only compare them where it is on.
    if (IsRopeScalingKey(k.key) && hf.rope_type != RopeType::kLlama3) continue;
    const std::string mine = k.value(given), theirs = k.value(hf);
    if (mine == theirs) continue;
    problems.push_back(absl::StrCat(key, " = ", mine, " contradicts ", k.hf, " = ", theirs, " in ",
                                    path, "; remove ", key, " to train the model as it is"));
  }
  if (config->given_keys.count("model.max_seq_len") != 0) hf.max_seq_len = given.max_seq_len;
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid config: ", absl::StrJoin(problems, "; ")));
  }
  config->model = hf;
  config->hf_pending = false;

  const std::filesystem::path tokenizer = std::filesystem::path(dir) / "tokenizer.json";
  std::error_code error;
  if (config->training.tokenizer_path.empty() && std::filesystem::exists(tokenizer, error)) {
    config->training.tokenizer_path = tokenizer.string();
  }
  config_internal::ValidateJobConfig(*config, {}, &problems);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid config with ", path, ": ", absl::StrJoin(problems, "; ")));
  }
  return absl::OkStatus();
}

}  // namespace ringtrain
