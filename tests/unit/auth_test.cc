// coordinator/auth.h and the token files of common/grpc/credentials.h: which calls a TokenCheck
// lets through, which listen addresses count as loopback, and how token files are read.
#include "coordinator/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/grpc/credentials.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;
using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

TEST(TokenCheckTest, OpenLetsEveryCallThrough) {
  EXPECT_TRUE(TokenCheck::Open().Check(Metadata{}).ok());
}

TEST(TokenCheckTest, MissingWrongAndRightTokens) {
  const TokenCheck check = TokenCheck::ForJobService({"alpha", "beta-token"});
  const absl::Status missing = check.Check(Metadata{});
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(),
              HasSubstr("JobService needs a client token: ringctl --token-file"));

  const std::string basic = "Basic YWxwaGE=", wrong = "Bearer alphx", prefix = "Bearer alph",
                    longer = "Bearer alpha2", right = "Bearer beta-token";
  EXPECT_THAT(check.Check(Metadata{{"authorization", basic}}).message(),
              HasSubstr("'authorization: Bearer <token>'"));
  for (const std::string& bad : {wrong, prefix, longer}) {
    const absl::Status s = check.Check(Metadata{{"authorization", bad}});
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_THAT(s.message(), HasSubstr("refused the client token")) << bad;
    EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("alph"))) << "never echo a token";
  }
  EXPECT_TRUE(check.Check(Metadata{{"authorization", right}}).ok());

  const absl::Status worker = TokenCheck::ForWorkerService({"join"}).Check(Metadata{});
  EXPECT_THAT(worker.message(), HasSubstr("WorkerService needs a join token"));
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(ListenProtectionTest, LoopbackAddresses) {
  for (const char* address : {"127.0.0.1:50051", "127.3.4.5:1", "localhost:50051", "LOCALHOST:1",
                              "[::1]:50051", "unix:/tmp/sock"}) {
    EXPECT_TRUE(IsLoopbackListenAddress(address)) << address;
  }
  for (const char* address : {"0.0.0.0:50051", "[::]:50051", "10.0.0.1:50051", "128.0.0.1:1",
                              "example.com:50051", ":50051", "[::ffff:127.0.0.1]:1"}) {
    EXPECT_FALSE(IsLoopbackListenAddress(address)) << address;
  }
}

TEST(ListenProtectionTest, NamesWhatIsMissing) {
  EXPECT_TRUE(CheckListenProtection("127.0.0.1:1", {}).ok());
  EXPECT_TRUE(CheckListenProtection("0.0.0.0:1", {.insecure = true}).ok());
  EXPECT_TRUE(CheckListenProtection("0.0.0.0:1", {true, true, true, false}).ok());
  const absl::Status s = CheckListenProtection("0.0.0.0:1", {true, false, true, false});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("without client tokens (--client-token-file FILE)"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("--tls-cert")));
  EXPECT_THAT(s.message(), HasSubstr("--insecure"));
}

TEST(TokenFileTest, OnePerLineWithCommentsAndBlankLines) {
  testing::TempDir dir;
  testing::WriteFile(dir / "tokens", "# rotated 2026-12-01\n  first  \n\nsecond\r\n");
  const absl::StatusOr<std::vector<std::string>> tokens =
      ReadTokenFile(dir / "tokens", "--client-token-file");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ::testing::ElementsAre("first", "second"));
  EXPECT_THAT(ReadSingleToken(dir / "tokens", "--token-file").status().message(),
              HasSubstr("holds 2 tokens"));

  testing::WriteFile(dir / "empty", "# nothing\n\n");
  EXPECT_THAT(ReadTokenFile(dir / "empty", "--worker-token-file").status().message(),
              HasSubstr("--worker-token-file " + dir / "empty" + " holds no token"));
  testing::WriteFile(dir / "spaced", "two words\n");
  EXPECT_THAT(ReadTokenFile(dir / "spaced", "--token-file").status().message(),
              HasSubstr("line 1 holds a space"));
  EXPECT_THAT(ReadTokenFile(dir / "missing", "--join-token-file").status().message(),
              HasSubstr("--join-token-file " + dir / "missing" + ": cannot read it"));
}

}  // namespace
}  // namespace ringtrain
