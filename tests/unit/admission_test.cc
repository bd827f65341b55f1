// AdmitSubmitRequest (coordinator/admission.h) on its own: the bounds it checks before parsing
// (config size, override count and size, name), names with control characters or broken UTF-8,
// absolute data paths, and degrees that would overflow the 32-bit world size.
#include "coordinator/admission.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config/config_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

std::string Refusal(const v1::SubmitJobRequest& request) {
  const absl::StatusOr<JobRecord> job = AdmitSubmitRequest(request);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
  return std::string(job.status().message());
}

TEST(AdmissionTest, AdmitsAPlainRequest) {
  v1::SubmitJobRequest request;
  request.set_name("ça va — 日本語 job");
  request.add_overrides("parallelism.context_parallel_degree=2");
  const absl::StatusOr<JobRecord> job = AdmitSubmitRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->degrees.world, 2);
  EXPECT_EQ(job->name, "ça va — 日本語 job");
}

TEST(AdmissionTest, WarnsOfKeysTheServiceManagesAndOfClampedLrPhases) {
  v1::SubmitJobRequest request;
  request.add_overrides("metrics.jsonl=out/steps.jsonl");
  request.add_overrides("training.steps=10");
  request.add_overrides("lr_scheduler.warmup_steps=200");
  const absl::StatusOr<JobRecord> job = AdmitSubmitRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->warnings.size(), 2u);
  EXPECT_THAT(job->warnings[0], HasSubstr("metrics.jsonl = \"out/steps.jsonl\" is ignored"));
  EXPECT_THAT(job->warnings[0], HasSubstr("ringctl export JOB"));
  EXPECT_THAT(job->warnings[0], HasSubstr("ringctl watch JOB --output json"));
  EXPECT_EQ(job->warnings[1],
            "lr_scheduler.warmup_steps = 200 is more than training.steps = 10: clamped to 10");
  // A plain request: nothing to say.
  EXPECT_TRUE(AdmitSubmitRequest(v1::SubmitJobRequest())->warnings.empty());
}

TEST(AdmissionTest, RefusesOversizedConfigBeforeParsing) {
  v1::SubmitJobRequest request;
  request.set_config_toml(std::string(3900000, '#'));  // a comment: would parse fine
  EXPECT_THAT(Refusal(request),
              HasSubstr("the config is 3900000 bytes; at most 262144 bytes (256 KiB)"));
}

TEST(AdmissionTest, RefusesTooManyOrTooLongOverrides) {
  v1::SubmitJobRequest request;
  for (int i = 0; i < 300; ++i) request.add_overrides("training.steps=1");
  EXPECT_THAT(Refusal(request), HasSubstr("300 overrides; at most 256"));
  v1::SubmitJobRequest one;
  one.add_overrides("training.dataset_path=" + std::string(kMaxOverrideBytes, 'p'));
  EXPECT_THAT(Refusal(one), HasSubstr("bytes; at most 4096 bytes"));
}

TEST(AdmissionTest, RefusesNamesThatDoNotPrint) {
  v1::SubmitJobRequest request;
  request.set_name("job\x1b]0;pwned\x07");
  EXPECT_THAT(Refusal(request),
              HasSubstr("byte 3 is the control character U+001B; job names must be printable"));
  request.set_name("tab\there");
  EXPECT_THAT(Refusal(request), HasSubstr("U+0009"));
  request.set_name("c1 \xc2\x9b control");  // U+009B, the C1 CSI
  EXPECT_THAT(Refusal(request), HasSubstr("byte 3 is the control character U+009B"));
  request.set_name("bad \xff utf8");
  EXPECT_THAT(Refusal(request), HasSubstr("byte 4 is not valid UTF-8"));
  request.set_name("overlong \xc0\xaf");
  EXPECT_THAT(Refusal(request), HasSubstr("not valid UTF-8"));
  request.set_name(std::string(kMaxJobNameBytes + 1, 'n'));
  EXPECT_THAT(Refusal(request), HasSubstr("is 129 bytes; at most 128 bytes"));
  request.set_name(std::string(kMaxJobNameBytes, 'n'));
  EXPECT_TRUE(AdmitSubmitRequest(request).ok());
}

TEST(AdmissionTest, RefusesNamesWithBidirectionalControls) {
  v1::SubmitJobRequest request;
  request.set_name("safe\u202etxt.exe");  // U+202E, RIGHT-TO-LEFT OVERRIDE
  std::string message = Refusal(request);
  EXPECT_THAT(message,
              HasSubstr("byte 4 is the bidirectional control U+202E; job names must be printable"));
  EXPECT_EQ(message.find("\u202e"), std::string::npos) << "the name is echoed escaped";
  for (const char* name : {"a\u202ab", "a\u202db", "a\u2066b", "a\u2069b"}) {
    request.set_name(name);
    EXPECT_THAT(Refusal(request), HasSubstr("byte 1 is the bidirectional control U+20")) << name;
  }
  request.set_name("a\u200fb");  // U+200F, a mark: it reorders no run of text after it
  EXPECT_TRUE(AdmitSubmitRequest(request).ok());
  request.set_name("\u05e9\u05dc\u05d5\u05dd job");  // right-to-left letters are fine
  EXPECT_TRUE(AdmitSubmitRequest(request).ok());
}

TEST(AdmissionTest, RefusesAbsoluteDataPathsInTheConfigOrAnOverride) {
  v1::SubmitJobRequest request;
  request.set_config_toml("[training]\ndataset = \"bin\"\ndataset_path = \"/data/train.bin\"\n");
  EXPECT_THAT(Refusal(request),
              HasSubstr("training.dataset_path = \"/data/train.bin\": an absolute "
                        "path"));
  request.add_overrides("training.dataset_path=train.bin");  // relative to each --data-root
  ASSERT_TRUE(AdmitSubmitRequest(request).ok());
  request.add_overrides("checkpoint.initial_load_path=/weights/model.pt");
  const std::string message = Refusal(request);
  EXPECT_THAT(message, HasSubstr("checkpoint.initial_load_path = \"/weights/model.pt\""));
  EXPECT_THAT(message, HasSubstr("e.g. \"model.pt\" for DIR/model.pt"));
}

TEST(AdmissionTest, RefusesPathsWithBidirectionalControls) {
  v1::SubmitJobRequest request;
  request.add_overrides("training.dataset=bin");
  request.add_overrides("training.dataset_path=data/\u202enib.txt");
  EXPECT_THAT(Refusal(request),
              HasSubstr("training.dataset_path = \"data/\\xe2\\x80\\xaenib.txt\": a path must "
                        "not contain bidirectional controls (U+202E at byte 5)"));
}

TEST(AdmissionTest, EchoesNoRawBytesOfABadDeviceKind) {
  v1::SubmitJobRequest request;
  request.set_device_kind("gpu\x1b[2J");
  const std::string message = Refusal(request);
  EXPECT_THAT(message, HasSubstr("device_kind \"gpu\\x1b[2J\" is not a kind of worker"));
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
}

// Every value a refusal echoes is cut (common/printable.h Excerpt), so that the error fits in
// gRPC's trailers: a 200 KB value used to come back as a 200 KB message, which the client refused
// as RESOURCE_EXHAUSTED instead of showing the error.
TEST(AdmissionTest, EchoesOnlyAnExcerptOfAHugeValue) {
  const std::string huge(200 * 1024, 'v');
  std::string array = "1";
  for (int i = 0; i < 60000; ++i) array += ", 1";
  const std::vector<std::pair<std::string, std::string>> configs = {
      // {config, what the error shows}
      {"[training]\ndataset = \"" + huge + "\"\n", "training.dataset = \"vvvv"},   // a choice
      {"[training]\nsteps = \"" + huge + "\"\n", "training.steps = \"vvvv"},       // the wrong type
      {"[training]\nsteps = [" + array + "]\n", "training.steps = ["},             // an array
      {"[model]\n" + std::string(200, 'k') + " = 1\n", "unknown key model.kkkk"},  // a long key
      {"[training]\ndataset = \"bin\"\ndataset_path = \"\\u0001" + huge + "\"\n",
       "training.dataset_path = \"\\x01vvvv"},  // a path with a control character
      {"[activation_checkpoint]\nselective_ac_option = \"" + huge + "\"\n",
       "selective_ac_option = \"vvvv"},
  };
  for (const auto& [config, shown] : configs) {
    v1::SubmitJobRequest request;
    request.set_config_toml(config);
    const std::string message = Refusal(request);
    EXPECT_LT(message.size(), 1024u) << message.substr(0, 300);
    EXPECT_THAT(message, HasSubstr(shown)) << message.substr(0, 300);  // enough to recognise it
  }
  v1::SubmitJobRequest request;
  request.add_overrides("training.dataset=" + huge);
  EXPECT_LT(Refusal(request).size(), 1024u);
  // 25 overrides at the 4 KiB limit, each naming an unknown key: 20 problems listed, each cut.
  v1::SubmitJobRequest many;
  for (int i = 0; i < 25; ++i) {
    many.add_overrides(
        absl::StrCat("training.x", i, "=", std::string(kMaxOverrideBytes - 20, 's')));
  }
  const std::string message = Refusal(many);
  EXPECT_THAT(message, HasSubstr("... and 5 more problems"));
  EXPECT_LT(message.size(), 20 * 600u);  // uncut: 20 × 4 KiB
}

// The coordinator refuses at submit what the trainer would: the same bounds, the same code.
TEST(AdmissionTest, RefusesValuesOutsideTheirBounds) {
  for (const char* override_text :
       {"comm.timeout_seconds=1e308", "comm.timeout_seconds=1e-9", "model.vocab_size=4294967297",
        "job.restart_backoff_seconds=1e-9"}) {
    v1::SubmitJobRequest request;
    request.add_overrides(override_text);
    const std::string key =
        std::string(override_text).substr(0, std::string(override_text).find('='));
    EXPECT_THAT(Refusal(request), HasSubstr(key + " = ")) << override_text;
    EXPECT_THAT(Refusal(request), HasSubstr(": must be ")) << override_text;
  }
}

TEST(AdmissionTest, RefusesDegreesThatWouldNarrow) {
  v1::SubmitJobRequest request;
  request.add_overrides("parallelism.data_parallel_replicate_degree=4294967297");
  EXPECT_THAT(Refusal(request),
              HasSubstr("parallelism.data_parallel_replicate_degree = 4294967297: must be -1 "
                        "(fill the world) or in [1, 16384]"));
}

}  // namespace
}  // namespace ringtrain
