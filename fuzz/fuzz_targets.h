// The fuzz targets: each takes arbitrary bytes, runs one input-facing part of ringtrain on them and
// checks what must hold whatever the bytes. The same functions run under libFuzzer (fuzz_main.cc,
// the clang build with -DRINGTRAIN_FUZZ=ON, scripts/fuzz.sh) and in the normal suite, where
// fuzz_regression_test runs every input committed under fuzz/corpus/<name>/ through them.
//
// A target returns "" when every invariant held, or a description of the one that broke; a crash, a
// sanitizer report or an escaping exception is a finding too. None keeps state between calls.
#ifndef RINGTRAIN_FUZZ_FUZZ_TARGETS_H_
#define RINGTRAIN_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringtrain::fuzz {

// Target <name> is the libFuzzer binary fuzz_<name> and the inputs in fuzz/corpus/<name>/; the
// torch-free ones are in ringtrain_fuzz_targets, FuzzPickle and FuzzStateDict in
// ringtrain_fuzz_torch_targets (they link LibTorch).

// ParseJobConfig on TOML text and overrides: the bytes up to the first NUL are the TOML, each
// further NUL-separated piece one override. A config that parses must print (JobConfigToToml) as
// TOML that parses again, to the same text; ResolveMesh must answer for any world size.
std::string FuzzConfig(const uint8_t* data, size_t size);

// AdmitSubmitRequest on a v1::SubmitJobRequest parsed from the bytes (ParseFromArray). An admitted
// job has world_size = dp × cp >= 1, and admitting it again gives the same record.
std::string FuzzAdmission(const uint8_t* data, size_t size);

// AdmitSubmitRequest on a request built field by field from the bytes: a base config, then
// overrides of real keys (taken from JobConfigToToml) with values chosen from edge cases or taken
// raw from the bytes. The same invariants as FuzzAdmission.
std::string FuzzAdmissionFields(const uint8_t* data, size_t size);

// AgentMetrics::TrainerRecord on each line of the bytes (as the agent's RankSupervisor delivers
// metrics.jsonl), for a trainer of rank 1 of 2; then Collect(). Nothing may throw.
std::string FuzzAgentRecord(const uint8_t* data, size_t size);

// A tokenizer file then text: the bytes up to the first NUL are the file (a tokenizer.json when its
// first non-blank byte is '{', else tiktoken), the rest the text. A file that loads encodes any
// text to ids below vocab_size (none only for empty text), the same ids twice.
std::string FuzzTokenizer(const uint8_t* data, size_t size);

// ParseSafetensorsHeader on the bytes as a whole safetensors file, and SafetensorsFile::Open and
// Read on the same bytes through a memfd: both give the same verdict and header. An accepted header
// has its tensors tiling the data exactly, each with the bytes its shape needs; written again by
// SerializeSafetensorsHeader (with the same data) it parses to the same header.
std::string FuzzSafetensors(const uint8_t* data, size_t size);

// SafetensorsIndex::Parse on the bytes as model.safetensors.index.json, and ParseShardSize on them
// as a max_shard_size. An accepted index names only plain shard file names, and its ToJson text
// parses to the same index; an accepted size is not 0.
std::string FuzzSafetensorsIndex(const uint8_t* data, size_t size);

// serialize_internal::UnpickleStateDict on the bytes as data.pkl, every storage record a fixed
// 256-byte buffer. A dict that loads holds contiguous, CPU, self-owned tensors, every byte of
// which can be read.
std::string FuzzPickle(const uint8_t* data, size_t size);

// ReadStateDict on the bytes as a whole torch.save file (zip archive), with the same checks as
// FuzzPickle on what loads.
std::string FuzzStateDict(const uint8_t* data, size_t size);

}  // namespace ringtrain::fuzz

#endif  // RINGTRAIN_FUZZ_FUZZ_TARGETS_H_
