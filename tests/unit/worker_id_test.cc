// CheckWorkerId (common/worker_id.h): the ids an agent may ask for (--worker-id) and the errors of
// the rest, which name the flag and never echo an unprintable byte.
#include "common/worker_id.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

TEST(WorkerIdTest, LettersDigitsAndSeparatorsStartingWithALetterOrDigitPass) {
  for (const std::string& id :
       std::vector<std::string>{"worker-0", "ringtrain-worker-3", "gpu01.rack2", "A_b", "7",
                                std::string(kMaxWorkerIdBytes, 'w')}) {
    EXPECT_TRUE(CheckWorkerId("--worker-id", id).ok()) << id;
  }
}

TEST(WorkerIdTest, OthersAreRefusedNamingTheFlagAndTheRule) {
  for (const std::string& id :
       std::vector<std::string>{"", "-x", ".hidden", "..", "a/b", "a b", "caf\xc3\xa9", "w\x1b[2J",
                                std::string(kMaxWorkerIdBytes + 1, 'w')}) {
    const absl::Status s = CheckWorkerId("--worker-id", id);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_TRUE(absl::StartsWith(s.message(), "--worker-id")) << s;
    for (char c : std::string(s.message())) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << id << ": the error echoes a raw byte";
    }
  }
  EXPECT_TRUE(absl::StrContains(CheckWorkerId("--worker-id", "a/b").message(),
                                "\"a/b\": byte 1 is not allowed; a worker id is letters, digits"));
  EXPECT_TRUE(absl::StrContains(CheckWorkerId("--worker-id", "-x").message(), "starts with '-'"));
}

}  // namespace
}  // namespace ringtrain
