// ringtrain-tokenize INPUT... --tokenizer F --out data.bin: text files to the token file the `bin`
// dataset reads, with progress on stderr and a summary at the end. Never links LibTorch.
// Exit status 0 done, 1 failed, 2 bad flags.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "common/version/version.h"
#include "tools/tokenize/progress_line.h"
#include "tools/tokenize/tokenize_files.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ringtrain-tokenize: text files -> a token file for training.dataset = \"bin\"\n"
      "(little-endian uint16 or uint32 ids, nanoGPT's .bin)",
      "ringtrain-tokenize"};
  app.set_version_flag("--version", ringtrain::VersionLine("ringtrain-tokenize"));
  ringtrain::TokenizeOptions options;
  app.add_option("inputs", options.inputs, "Text files (UTF-8), tokenized in this order")
      ->required();
  app.add_option("--tokenizer", options.tokenizer_path,
                 "A Hugging Face tokenizer.json (byte-level BPE) or a tiktoken file (Llama 3's "
                 "tokenizer.model)")
      ->required();
  app.add_option("--out", options.out, "The token file to write (written whole, then renamed)")
      ->required();
  app.add_option("--dtype", options.dtype,
                 "uint16, uint32, or auto: uint16 when the tokenizer has at most 65536 ids")
      ->check(CLI::IsMember({"auto", "uint16", "uint32"}))
      ->capture_default_str();
  app.add_option("--eos-id", options.eos_id,
                 "An id appended after each input file's tokens (a document separator, e.g. the "
                 "end-of-text token's id)")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  int64_t total_bytes = 0;  // the progress line's total, known once the inputs are listed
  std::unique_ptr<ringtrain::ProgressLine> line;
  const auto progress = [&](int64_t bytes, int64_t tokens, int64_t file) {
    if (line == nullptr) {
      for (const std::string& input : options.inputs) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(input, ec);
        if (!ec) total_bytes += static_cast<int64_t>(size);
      }
      line = std::make_unique<ringtrain::ProgressLine>(total_bytes,
                                                       static_cast<int64_t>(options.inputs.size()));
    }
    line->Update(bytes, tokens, file);
  };
  const absl::StatusOr<ringtrain::TokenizeSummary> summary =
      ringtrain::TokenizeFiles(options, progress);
  if (line != nullptr) line->Finish();
  if (!summary.ok()) {
    std::cerr << "ringtrain-tokenize: " << summary.status().message() << std::endl;
    return 1;
  }
  const double seconds = summary->seconds > 0 ? summary->seconds : 1e-9;
  std::cerr << absl::StrFormat(
      "ringtrain-tokenize: %s\n"
      "wrote %d tokens (%s) from %d files, %d bytes, to %s in %.2f s: %.0f tokens/s, %.1f MiB/s\n"
      "train on it with training.dataset = \"bin\", training.dataset_path = \"%s\", "
      "training.token_dtype = \"%s\"\n"
      "on a cluster, workers read data only under their --data-root: put the file there (start "
      "ringtrain-worker with --data-root DIR, or `ringctl up --data-root DIR`) and give "
      "training.dataset_path relative to DIR, e.g. \"%s\"\n",
      summary->tokenizer, summary->tokens, summary->dtype, summary->files, summary->bytes,
      options.out, summary->seconds, summary->tokens / seconds,
      summary->bytes / seconds / (1024.0 * 1024.0), options.out, summary->dtype,
      std::filesystem::path(options.out).filename().string());
  return 0;
}
