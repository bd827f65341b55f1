// FuzzAdmission and FuzzAdmissionFields: what the coordinator checks of a SubmitJobRequest before
// it touches the cluster (coordinator/admission.h), fed raw wire bytes and structured requests.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config/job_config.h"
#include "common/config/mesh.h"
#include "coordinator/admission.h"
#include "fuzz/byte_reader.h"
#include "fuzz/fuzz_targets.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain::fuzz {
namespace {

// What an admitted job must be: a mesh the config asks for, the request kept as sent, and the same
// answer every time.
std::string CheckAdmission(const v1::SubmitJobRequest& request) {
  const absl::StatusOr<JobRecord> job = AdmitSubmitRequest(request);
  if (!job.ok()) {
    if (job.status().code() != absl::StatusCode::kInvalidArgument) {
      return absl::StrCat("a rejected request is not INVALID_ARGUMENT: ", job.status().ToString());
    }
    return "";
  }
  if (job->degrees.dp < 1 || job->degrees.cp < 1 ||
      job->degrees.world != int64_t{job->degrees.dp} * job->degrees.cp) {
    return absl::StrCat("admitted with world_size ", job->degrees.world, ", dp ", job->degrees.dp,
                        ", cp ", job->degrees.cp);
  }
  if (job->config_toml != request.config_toml() || job->name != request.name() ||
      job->overrides.size() != static_cast<size_t>(request.overrides_size())) {
    return "the admitted record does not keep the request's config, overrides and name";
  }
  // The record is what the workers are later sent: it must describe the config it was admitted for.
  const absl::StatusOr<JobConfig> config =
      ParseJobConfig(job->config_toml, job->overrides, "admitted config");
  if (!config.ok())
    return absl::StrCat("an admitted config fails to parse again: ", config.status().ToString());
  const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(*config, RequestedWorldSize(*config));
  if (!mesh.ok()) return absl::StrCat("an admitted config has no mesh: ", mesh.status().ToString());
  const int64_t dp = mesh->dp();
  if (dp != job->degrees.dp || config->parallelism.context_parallel_degree != job->degrees.cp) {
    return absl::StrCat(
        "the config asks for dp ", dp, " × cp ", config->parallelism.context_parallel_degree,
        " but the job was admitted with dp ", job->degrees.dp, " × cp ", job->degrees.cp);
  }
  const absl::StatusOr<JobRecord> again = AdmitSubmitRequest(request);
  if (!again.ok() || again->degrees.world != job->degrees.world ||
      again->total_steps != job->total_steps) {
    return "admitting the same request twice gives different answers";
  }
  return "";
}

// Every key of the config as "section.key", read off the printed defaults so the list cannot fall
// behind the config.
const std::vector<std::string>& ConfigKeys() {
  static const std::vector<std::string>* const keys = [] {
    auto* out = new std::vector<std::string>;
    std::string section;
    for (absl::string_view line : absl::StrSplit(JobConfigToToml(JobConfig{}), '\n')) {
      if (absl::StartsWith(line, "[")) {
        section = std::string(line.substr(1, line.size() - 2));
      } else if (absl::ConsumePrefix(&line, "# ") && absl::ConsumeSuffix(&line, " is not set")) {
        out->push_back(absl::StrCat(section, ".", line));
      } else if (const size_t eq = line.find(" = "); eq != absl::string_view::npos) {
        out->push_back(absl::StrCat(section, ".", line.substr(0, eq)));
      }
    }
    return out;
  }();
  return *keys;
}

// Values at the edges of what the keys accept, and a few that are wrong in telling ways.
constexpr const char* kEdgeValues[] = {
    "-1",
    "0",
    "1",
    "2",
    "3",
    "4",
    "8",
    "256",
    "4096",
    "65536",
    "2147483647",
    "2147483648",
    "4294967296",
    "4294967297",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "1e308",
    "-1e308",
    "1e-320",
    "0.5",
    "nan",
    "inf",
    "-0",
    "true",
    "false",
    "\"x\"",
    "",
    "cpu",
    "headtail",
    "none",
    "alltoall",
    "allgather",
    "synthetic",
    "text",
    "bin",
    "eval",
    "train",
    "random",
    "cosine",
    "/",
    "../../etc/passwd",
    "\xff\xfe",
};

constexpr const char* kBaseConfigs[] = {
    "",
    "[model]\ndim = 64\nn_layers = 1\nn_heads = 4\nn_kv_heads = 2\n"
    "[training]\nseq_len = 64\nsteps = 10\n"
    "[parallelism]\ncontext_parallel_degree = 2\ndata_parallel_replicate_degree = 2\n",
};

}  // namespace

std::string FuzzAdmission(const uint8_t* data, size_t size) {
  v1::SubmitJobRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return "";
  return CheckAdmission(request);
}

std::string FuzzAdmissionFields(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  v1::SubmitJobRequest request;
  constexpr const char* kKinds[] = {"", "cpu", "cuda", "tpu"};
  const size_t kind = in.Below(std::size(kKinds) + 1);
  request.set_device_kind(kind < std::size(kKinds) ? kKinds[kind] : in.Text());
  request.set_name(in.Text());
  const size_t base = in.Below(std::size(kBaseConfigs) + 1);
  request.set_config_toml(base < std::size(kBaseConfigs) ? kBaseConfigs[base] : in.Text());
  const std::vector<std::string>& keys = ConfigKeys();
  for (size_t n = in.Below(16); n > 0 && !in.empty(); --n) {
    const uint8_t pick = in.Byte();
    // Mostly real keys, sometimes a key made of bytes.
    const std::string key = pick < 240 ? keys[pick % keys.size()] : in.Text();
    const uint8_t how = in.Byte();
    const std::string value = how < 160 ? kEdgeValues[how % std::size(kEdgeValues)] : in.Text();
    request.add_overrides(absl::StrCat(how % 2 == 0 ? "--" : "", key, "=", value));
  }
  return CheckAdmission(request);
}

}  // namespace ringtrain::fuzz
