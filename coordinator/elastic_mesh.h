// The mesh an elastic restart ([job] elastic = true) runs on when fewer workers remain than the
// job asked for: the same context-parallel degree (a ring never changes length), a smaller
// data-parallel degree, and the same global batch — gradient accumulation makes up the missing
// data-parallel ranks (training.global_batch_size), so every step reads the same samples and the
// losses match the full mesh's within float rounding of the sums. Checkpoints hold full tensors
// by name and the data position as a global sample index, so a run resumes on any such mesh, FSDP
// shards included (cut again from the full tensors). Pure: no clocks, no I/O.
#ifndef RINGTRAIN_COORDINATOR_ELASTIC_MESH_H_
#define RINGTRAIN_COORDINATOR_ELASTIC_MESH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/job_config.h"
#include "coordinator/job.h"

namespace ringtrain {

struct ElasticMesh {
  RunMesh degrees;  // from ResolveMesh of the config with `overrides` applied
  // Applied after the job's own overrides; empty when the job's own mesh fits.
  std::vector<std::string> overrides;
  // What changed, for the event stream, e.g. "elastic: data parallel 2 -> 1 (world 4 -> 2, cp 2
  // kept); global batch 16 kept as 2 micro-batches of 8". Empty when nothing changed.
  std::string description;
};

// The largest mesh of at most `workers` ranks for the job whose config (with its own overrides)
// is `config`: its own mesh when that fits, else the largest data-parallel degree d < its own
// with d × cp <= workers whose d × local_batch_size divides the global batch (FSDP keeps its
// shard degree when d allows, else shards over all d data-parallel ranks). The config is parsed
// once, by the caller: each candidate is the config with its degrees and global batch set as the
// overrides would set them, validated by ResolveMesh (the only checks those keys take part in).
// FAILED_PRECONDITION naming the numbers when no such mesh exists (not even one replica of cp
// ranks fits, or no smaller d divides the batch); INVALID_ARGUMENT when the job's own mesh does
// not resolve.
absl::StatusOr<ElasticMesh> ElasticMeshFor(const JobConfig& config, int64_t workers);

// The same for `config_toml` with `overrides`, parsed once; INVALID_ARGUMENT when it does not
// parse.
absl::StatusOr<ElasticMesh> ElasticMeshFor(const std::string& config_toml,
                                           const std::vector<std::string>& overrides,
                                           int64_t workers);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_ELASTIC_MESH_H_
