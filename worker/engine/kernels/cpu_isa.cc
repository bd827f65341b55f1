#include "worker/engine/kernels/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ringtrain {
namespace {

constexpr const char* kVariable = "RINGTRAIN_CPU_ISA";

CpuIsa Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma")) {
    return __builtin_cpu_supports("avx512bf16") ? CpuIsa::kAvx512Bf16 : CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kBaseline;
}

std::string AvailableNames() {
  std::string names;
  for (CpuIsa isa : AvailableCpuIsas())
    names += std::string(names.empty() ? "" : ", ") + CpuIsaName(isa);
  return names;
}

void CheckAvailable(CpuIsa isa, const std::string& what) {
  if (static_cast<int>(isa) > static_cast<int>(DetectedCpuIsa())) {
    throw std::invalid_argument(what + ": this CPU has no " + CpuIsaName(isa) +
                                " (available: " + AvailableNames() + ")");
  }
}

CpuIsa FromEnvironment() {
  const char* value = std::getenv(kVariable);
  if (value == nullptr || *value == '\0') return DetectedCpuIsa();
  return ParseCpuIsa(value, kVariable);
}

// -1 until the first ActiveCpuIsa().
std::atomic<int> active{-1};

}  // namespace

CpuIsa ParseCpuIsa(const std::string& name, const std::string& what) {
  for (int i = 0; i < kCpuIsaCount; ++i) {
    const CpuIsa isa = static_cast<CpuIsa>(i);
    if (name == CpuIsaName(isa)) {
      CheckAvailable(isa, what + "=" + name);
      return isa;
    }
  }
  throw std::invalid_argument(
      what + "=" + name + " is not a level: use baseline, avx2, avx512 or avx512_bf16 (this CPU: " +
      AvailableNames() + ")");
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline: return "baseline";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512_bf16";
  }
  return "?";
}

CpuIsa DetectedCpuIsa() {
  static const CpuIsa detected = Detect();
  return detected;
}

std::vector<CpuIsa> AvailableCpuIsas() {
  std::vector<CpuIsa> isas;
  for (int i = 0; i <= static_cast<int>(DetectedCpuIsa()); ++i)
    isas.push_back(static_cast<CpuIsa>(i));
  return isas;
}

CpuIsa ActiveCpuIsa() {
  int level = active.load(std::memory_order_relaxed);
  if (level < 0) {
    static const CpuIsa chosen = FromEnvironment();  // once; throws again on every call if bad
    int expected = -1;
    active.compare_exchange_strong(expected, static_cast<int>(chosen));
    level = active.load(std::memory_order_relaxed);
  }
  return static_cast<CpuIsa>(level);
}

ScopedCpuIsa::ScopedCpuIsa(CpuIsa isa) : previous_(ActiveCpuIsa()) {
  CheckAvailable(isa, std::string("ScopedCpuIsa(") + CpuIsaName(isa) + ")");
  active.store(static_cast<int>(isa));
}

ScopedCpuIsa::~ScopedCpuIsa() { active.store(static_cast<int>(previous_)); }

const char* Bf16UnitsName(Bf16Units units) {
  switch (units) {
    case Bf16Units::kNone: return "none";
    case Bf16Units::kAvx512Bf16: return "avx512_bf16";
    case Bf16Units::kAmx: return "amx";
  }
  return "?";
}

Bf16Units DetectedBf16Units() {
  static const Bf16Units detected = [] {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-tile")) {
      return Bf16Units::kAmx;
    }
    if (__builtin_cpu_supports("avx512bf16")) return Bf16Units::kAvx512Bf16;
#endif
    return Bf16Units::kNone;
  }();
  return detected;
}

const char* Bf16GemmName(Bf16Gemm gemm) { return gemm == Bf16Gemm::kNative ? "native" : "widen"; }

Bf16Gemm ActiveBf16Gemm() {
  static const Bf16Gemm chosen = [] {
    constexpr const char* kGemmVariable = "RINGTRAIN_BF16_GEMM";
    const char* value = std::getenv(kGemmVariable);
    if (value == nullptr || *value == '\0') {
      bool intel = false;
#if defined(__x86_64__)
      __builtin_cpu_init();
      intel = __builtin_cpu_is("intel");
#endif
      return DetectedBf16Units() != Bf16Units::kNone && intel ? Bf16Gemm::kNative
                                                              : Bf16Gemm::kWiden;
    }
    const std::string name = value;
    if (name == "native") return Bf16Gemm::kNative;
    if (name == "widen") return Bf16Gemm::kWiden;
    throw std::invalid_argument(std::string(kGemmVariable) + "=" + name +
                                " is not a choice: use native or widen (this CPU's bf16 units: " +
                                Bf16UnitsName(DetectedBf16Units()) + ")");
  }();
  return chosen;
}

const char* F32GemmName(F32Gemm gemm) { return gemm == F32Gemm::kBrgemm ? "brgemm" : "mkl"; }

std::vector<F32Gemm> AvailableF32Gemms() {
  if (static_cast<int>(DetectedCpuIsa()) < static_cast<int>(CpuIsa::kAvx512)) {
    return {F32Gemm::kMkl};
  }
  return {F32Gemm::kMkl, F32Gemm::kBrgemm};
}

F32Gemm ActiveF32Gemm() {
  static const F32Gemm chosen = [] {
    constexpr const char* kGemmVariable = "RINGTRAIN_F32_GEMM";
    const bool has_brgemm = AvailableF32Gemms().size() > 1;
    const char* value = std::getenv(kGemmVariable);
    if (value == nullptr || *value == '\0') {
#if defined(__x86_64__)
      __builtin_cpu_init();
      if (has_brgemm && !__builtin_cpu_is("intel")) return F32Gemm::kBrgemm;
#endif
      return F32Gemm::kMkl;
    }
    const std::string name = value;
    if (name == "mkl") return F32Gemm::kMkl;
    if (name == "brgemm" && has_brgemm) return F32Gemm::kBrgemm;
    if (name == "brgemm") {
      throw std::invalid_argument(std::string(kGemmVariable) +
                                  "=brgemm needs AVX-512, and this CPU's widest level is " +
                                  CpuIsaName(DetectedCpuIsa()) + ": use mkl");
    }
    throw std::invalid_argument(std::string(kGemmVariable) + "=" + name +
                                " is not a choice: use mkl or brgemm");
  }();
  return chosen;
}

}  // namespace ringtrain
