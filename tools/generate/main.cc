// ringtrain-generate (--hf DIR | --checkpoint DIR) --prompt TEXT: text from a trained model, on the
// CPU with a KV cache; greedy unless --temperature is set. Prints the prompt and the generated
// text on stdout (with --ids, the new token ids on a line of their own), and a summary on stderr.
// Exit status 0 done, 1 failed (an unreadable model), 2 bad flags.
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8_lossy.h"
#include "common/version/version.h"
#include "tools/generate/sampler.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/hf/model_files.h"

namespace {

using ringtrain::ModelFiles;

// Text ⇄ ids through the model's tokenizer, or one id per byte without one.
class TextCodec {
 public:
  static absl::StatusOr<TextCodec> Open(const std::string& path, int64_t vocab_size) {
    TextCodec codec;
    if (path.empty()) {
      if (vocab_size < 256) {
        return absl::InvalidArgumentError(
            absl::StrCat("no tokenizer (give --tokenizer), and the vocabulary of ", vocab_size,
                         " ids is too small for one token per byte"));
      }
      return codec;
    }
    absl::StatusOr<std::unique_ptr<ringtrain::Tokenizer>> tokenizer =
        ringtrain::Tokenizer::Load(path);
    if (!tokenizer.ok()) return tokenizer.status();
    codec.tokenizer_ = std::shared_ptr<ringtrain::Tokenizer>(std::move(*tokenizer));
    return codec;
  }

  std::vector<int64_t> Encode(const std::string& text) const {
    std::vector<int64_t> ids;
    if (!tokenizer_) {
      for (unsigned char c : text) ids.push_back(c);
      return ids;
    }
    std::vector<int32_t> encoded;
    tokenizer_->Encode(text, &encoded);
    ids.assign(encoded.begin(), encoded.end());
    return ids;
  }

  // The text of `ids`; an id the tokenizer has no text for (a model's vocabulary can be larger
  // than its tokenizer's; a tiktoken file has no special tokens) is shown as <id>. Invalid UTF-8
  // becomes U+FFFD, as Hugging Face's decode does.
  std::string Decode(const std::vector<int64_t>& ids) const {
    std::string bytes;
    for (int64_t id : ids) {
      absl::StatusOr<std::string> piece =
          tokenizer_ ? tokenizer_->DecodeBytes({static_cast<int32_t>(id)})
          : id < 256 ? absl::StatusOr<std::string>(std::string(1, static_cast<char>(id)))
                     : absl::StatusOr<std::string>(absl::NotFoundError("no byte"));
      bytes += piece.ok() ? *piece : absl::StrCat("<", id, ">");
    }
    return ringtrain::Utf8Lossy(bytes);
  }

  std::string Describe() const {
    return tokenizer_ ? tokenizer_->Describe() : "one token per byte";
  }

 private:
  std::shared_ptr<ringtrain::Tokenizer> tokenizer_;
};

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ringtrain-generate: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringtrain-generate: text from a trained model (CPU, KV cache)",
               "ringtrain-generate"};
  app.set_version_flag("--version", ringtrain::VersionLine("ringtrain-generate"));
  std::string hf, checkpoint, prompt, tokenizer_path;
  bool print_ids = false;
  ringtrain::SamplingOptions options;
  auto* source = app.add_option_group("model", "Where the model is");
  source->add_option("--hf", hf, "A Hugging Face folder (config.json, safetensors)");
  source->add_option("--checkpoint", checkpoint,
                     "A ringtrain checkpoint step (step-N) or checkpoint folder (its newest step)");
  source->require_option(1);
  app.add_option("--prompt", prompt, "The text to continue")->required();
  app.add_option("--max-new-tokens", options.max_new_tokens, "Tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--temperature", options.temperature, "0: greedy; > 0: sample at this temperature")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--top-p", options.top_p, "Sample from the most likely tokens up to this mass")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "The sampling generator's seed")->capture_default_str();
  app.add_option("--tokenizer", tokenizer_path,
                 "A tokenizer.json or tiktoken file (default: the model's, else one token per "
                 "byte)");
  app.add_flag("--ids", print_ids, "Also print the new token ids");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  torch::set_num_threads(std::max(1u, std::thread::hardware_concurrency()));

  absl::StatusOr<ModelFiles> files =
      hf.empty() ? ringtrain::ReadCheckpointModel(checkpoint) : ringtrain::ReadHfModel(hf);
  if (!files.ok()) return Fail(files.status());
  if (tokenizer_path.empty()) tokenizer_path = files->tokenizer_path;
  absl::StatusOr<TextCodec> codec = TextCodec::Open(tokenizer_path, files->model.vocab_size);
  if (!codec.ok()) return Fail(codec.status());

  ringtrain::Transformer model(ringtrain::ModelArgs::FromConfig(files->model));
  if (absl::Status loaded = ringtrain::LoadModelWeights(*model, files->weights, files->source);
      !loaded.ok()) {
    return Fail(loaded);
  }
  const std::vector<int64_t> prompt_ids = codec->Encode(prompt);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int64_t>> generated = ringtrain::Generate(model, prompt_ids, options);
  if (!generated.ok()) return Fail(generated.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << prompt << codec->Decode(*generated) << "\n";
  if (print_ids) std::cout << "ids: " << absl::StrJoin(*generated, " ") << "\n";
  std::fprintf(stderr,
               "ringtrain-generate: %zu prompt tokens, %zu new in %.2f s (%.1f tokens/s), %s, "
               "tokenizer: %s\n",
               prompt_ids.size(), generated->size(), seconds, generated->size() / seconds,
               options.temperature > 0
                   ? absl::StrFormat("sampled at temperature %g, top-p %g, "
                                     "seed %d",
                                     options.temperature, options.top_p, options.seed)
                         .c_str()
                   : "greedy",
               codec->Describe().c_str());
  return 0;
}
