// ringtrain-convert: a ringtrain checkpoint ⇄ a Hugging Face folder, so any saved step can be taken
// to transformers, vLLM or llama.cpp, and a Hugging Face model brought in as a state dict.
//
//   ringtrain-convert to-hf CHECKPOINT OUT [--dtype float32|bfloat16] [--max-shard-size 5GB]
//                                          [--tokenizer PATH]
//   ringtrain-convert from-hf HF_DIR OUT
//   ringtrain-convert to-pt CHECKPOINT OUT.pt
//
// to-hf reads a step-N folder (or a checkpoint folder's newest step) and writes OUT as a Hugging
// Face folder (config.json, safetensors, tokenizer.json); from-hf writes OUT/model.pt (our names,
// the file's dtypes: checkpoint.initial_load_path takes it) and OUT/model.toml (the [model]
// section); to-pt writes the checkpoint's model as one torch.save file (a dict name → float32
// tensor, our names, that Python's torch.load reads; checkpoints themselves are sharded
// safetensors). The conversions are exact: only names change and wq/wk rows move (hf_adapter.h), so
// to-hf then from-hf gives back the checkpoint's tensors bit for bit (in float32).
// It links LibTorch for the torch.save format (worker/engine/serialize). Exit status 0 done,
// 1 failed, 2 bad flags.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config/choices.h"
#include "common/safetensors/index.h"
#include "common/status_macros.h"
#include "common/version/version.h"
#include "worker/engine/hf/hf_adapter.h"
#include "worker/engine/hf/hf_folder.h"
#include "worker/engine/hf/model_files.h"

namespace {

namespace fs = std::filesystem;
using namespace ringtrain;

absl::Status ToHf(const std::string& checkpoint, const std::string& out, const std::string& dtype,
                  const std::string& max_shard_size, const std::string& tokenizer) {
  RT_ASSIGN_OR_RETURN(const ModelFiles files, ReadCheckpointModel(checkpoint));
  HfExportOptions options;
  options.model = files.model;
  options.dtype = *ParseChoice<MixedPrecision>(dtype);
  RT_ASSIGN_OR_RETURN(options.max_shard_bytes, ParseShardSize(max_shard_size));
  options.tokenizer_path = tokenizer.empty() ? files.tokenizer_path : tokenizer;
  RT_RETURN_IF_ERROR(WriteHfFolder(
      out, ToHfStateDict(files.weights, ModelArgs::FromConfig(files.model)), options));
  std::fprintf(stderr, "ringtrain-convert: %s → %s (Hugging Face, %s)\n", files.source.c_str(),
               out.c_str(), dtype.c_str());
  return absl::OkStatus();
}

absl::Status ToPt(const std::string& checkpoint, const std::string& out) {
  RT_ASSIGN_OR_RETURN(const ModelFiles files, ReadCheckpointModel(checkpoint));
  RT_RETURN_IF_ERROR(WriteStateDict(out, files.weights));
  std::fprintf(stderr, "ringtrain-convert: %s → %s (torch.save, %zu tensors)\n",
               files.source.c_str(), out.c_str(), files.weights.size());
  return absl::OkStatus();
}

absl::Status FromHf(const std::string& hf, const std::string& out) {
  RT_ASSIGN_OR_RETURN(const ModelFiles files, ReadHfModel(hf));
  std::error_code e;
  fs::create_directories(out, e);
  if (e) return absl::UnavailableError(absl::StrCat("cannot create ", out, ": ", e.message()));
  RT_RETURN_IF_ERROR(WriteStateDict((fs::path(out) / "model.pt").string(), files.weights));
  JobConfig config;
  config.model = files.model;
  std::ofstream toml(fs::path(out) / "model.toml");
  toml << JobConfigToToml(config, "model");
  if (!toml.flush())
    return absl::UnavailableError(absl::StrCat("cannot write ", out, "/model.toml"));
  std::fprintf(stderr, "ringtrain-convert: %s → %s/model.pt and model.toml\n", hf.c_str(),
               out.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringtrain-convert: ringtrain checkpoints ⇄ Hugging Face folders, and to torch.save",
               "ringtrain-convert"};
  app.set_version_flag("--version", ringtrain::VersionLine("ringtrain-convert"));
  app.require_subcommand(1);
  std::string input, out, dtype = "float32", max_shard_size = "5GB", tokenizer;
  CLI::App* to_hf = app.add_subcommand("to-hf", "A checkpoint step → a Hugging Face folder");
  to_hf->add_option("checkpoint", input, "A step-N folder, or a checkpoint folder (newest step)")
      ->required();
  to_hf->add_option("out", out, "The Hugging Face folder to write (replaced when complete)")
      ->required();
  to_hf->add_option("--dtype", dtype, "The tensors' dtype in the files")
      ->check(CLI::IsMember(ChoiceNames<MixedPrecision>()))
      ->capture_default_str();
  to_hf
      ->add_option("--max-shard-size", max_shard_size,
                   "The largest safetensors file (\"5GB\", \"500MB\", \"2GiB\", bytes)")
      ->capture_default_str();
  to_hf->add_option("--tokenizer", tokenizer, "Copied as tokenizer.json (default: the job's)");
  CLI::App* from_hf =
      app.add_subcommand("from-hf", "A Hugging Face folder → model.pt + model.toml");
  from_hf->add_option("hf", input, "A Hugging Face folder (config.json, safetensors)")->required();
  from_hf->add_option("out", out, "The folder to write model.pt and model.toml into")->required();
  CLI::App* to_pt = app.add_subcommand("to-pt", "A checkpoint step → one torch.save file");
  to_pt->add_option("checkpoint", input, "A step-N folder, or a checkpoint folder (newest step)")
      ->required();
  to_pt->add_option("out", out, "The file to write (model.pt)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const absl::Status done = to_hf->parsed()   ? ToHf(input, out, dtype, max_shard_size, tokenizer)
                            : to_pt->parsed() ? ToPt(input, out)
                                              : FromHf(input, out);
  if (!done.ok()) {
    std::fprintf(stderr, "ringtrain-convert: %s\n", std::string(done.message()).c_str());
    return 1;
  }
  return 0;
}
