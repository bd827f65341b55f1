// The CPU level dispatch (cpu_isa.h): the levels this machine has, forcing each, refusing what it
// lacks, the attention rows following the forced level, and the float32 GEMM engine's default. The
// kernels at each level are tested against float64 where they are (fused_cpu_attention_test,
// fused_rows_test).
#include "worker/engine/kernels/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "worker/engine/kernels/attention_rows.h"

namespace ringtrain {
namespace {

TEST(CpuIsa, AvailableLevelsRunFromTheBaselineToTheDetectedOne) {
  const std::vector<CpuIsa> levels = AvailableCpuIsas();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), CpuIsa::kBaseline);
  EXPECT_EQ(levels.back(), DetectedCpuIsa());
  std::printf("this CPU: %s\n", CpuIsaName(DetectedCpuIsa()));
}

TEST(CpuIsa, EachAvailableLevelCanBeForcedAndIsRestored) {
  const CpuIsa before = ActiveCpuIsa();
  for (CpuIsa isa : AvailableCpuIsas()) {
    {
      ScopedCpuIsa forced(isa);
      EXPECT_EQ(ActiveCpuIsa(), isa);
      EXPECT_EQ(std::string(AttentionRowsIsa()), CpuIsaName(isa));
    }
    EXPECT_EQ(ActiveCpuIsa(), before);
  }
}

TEST(CpuIsa, ParsesEachNameAndRefusesUnknownOrMissingLevels) {
  for (CpuIsa isa : AvailableCpuIsas()) {
    EXPECT_EQ(ParseCpuIsa(CpuIsaName(isa), "RINGTRAIN_CPU_ISA"), isa);
  }
  try {
    ParseCpuIsa("avx1024", "RINGTRAIN_CPU_ISA");
    FAIL() << "avx1024 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("RINGTRAIN_CPU_ISA=avx1024 is not a level: use baseline, "
                                         "avx2, avx512 or avx512_bf16"),
              std::string::npos)
        << e.what();
  }
  if (static_cast<int>(DetectedCpuIsa()) < static_cast<int>(CpuIsa::kAvx512)) {
    EXPECT_THROW(ScopedCpuIsa(CpuIsa::kAvx512), std::invalid_argument);
    try {
      ParseCpuIsa("avx512", "RINGTRAIN_CPU_ISA");
      FAIL() << "avx512 was accepted on a CPU without it";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("this CPU has no avx512"), std::string::npos)
          << e.what();
    }
  }
  if (DetectedCpuIsa() != CpuIsa::kAvx512Bf16) {
    EXPECT_THROW(ScopedCpuIsa(CpuIsa::kAvx512Bf16), std::invalid_argument);
  }
}

// The value of `variable` when it is set and not empty (the engine's default is then not
// checked), else "".
std::string Forced(const char* variable) {
  const char* value = std::getenv(variable);
  return value == nullptr ? "" : value;
}

bool IntelCpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

// The float32 GEMM engine: BRGeMM exactly on AVX-512 CPUs that are not Intel's (MKL runs AVX2
// there), unless RINGTRAIN_F32_GEMM says otherwise.
TEST(F32Gemm, BrgemmByDefaultExactlyOnAvx512CpusThatAreNotIntels) {
  const std::string forced = Forced("RINGTRAIN_F32_GEMM");
  if (!forced.empty()) GTEST_SKIP() << "RINGTRAIN_F32_GEMM=" << forced;
  const bool want_brgemm =
      static_cast<int>(DetectedCpuIsa()) >= static_cast<int>(CpuIsa::kAvx512) && !IntelCpu();
  EXPECT_EQ(ActiveF32Gemm(), want_brgemm ? F32Gemm::kBrgemm : F32Gemm::kMkl);
  EXPECT_STREQ(F32GemmName(F32Gemm::kMkl), "mkl");
  EXPECT_STREQ(F32GemmName(F32Gemm::kBrgemm), "brgemm");
}

// The attention's bfloat16 GEMMs: native exactly on Intel CPUs with bf16 units (MKL leaves other
// CPUs' units unused), unless RINGTRAIN_BF16_GEMM says otherwise.
TEST(Bf16Gemm, NativeByDefaultExactlyOnIntelCpusWithBf16Units) {
  const std::string forced = Forced("RINGTRAIN_BF16_GEMM");
  if (!forced.empty()) GTEST_SKIP() << "RINGTRAIN_BF16_GEMM=" << forced;
  const bool want_native = DetectedBf16Units() != Bf16Units::kNone && IntelCpu();
  EXPECT_EQ(ActiveBf16Gemm(), want_native ? Bf16Gemm::kNative : Bf16Gemm::kWiden);
}

}  // namespace
}  // namespace ringtrain
