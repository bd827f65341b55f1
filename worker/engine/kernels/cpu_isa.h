// Which x86 vector width the CPU kernels run (the fused attention rows and the fused element-wise
// blocks): the widest the CPU supports, chosen once at start-up, or the one RINGTRAIN_CPU_ISA names
// (baseline | avx2 | avx512 | avx512_bf16; one the CPU lacks is refused at start-up, naming what
// the CPU has). Tests force each available level in turn (ScopedCpuIsa). Torch-free.
//
//   baseline     x86-64 SSE2, 8-float vectors as two registers (also every non-x86 build)
//   avx2         AVX2 + FMA, 8 floats a register
//   avx512       AVX-512 F/BW/DQ/VL + FMA, 16 floats a register
//   avx512_bf16  avx512, rounding to bfloat16 with AVX512-BF16's VCVTNEPS2BF16 (one instruction
//                for 16 lanes instead of eight)
//
// Results differ between levels only in the order horizontal sums add their lanes (a few ulp), and
// avx512_bf16 rounds a denormal float to a bfloat16 0 (the compute threads flush denormals anyway);
// on one machine and level every kernel is bitwise repeatable.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_CPU_ISA_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_CPU_ISA_H_

#include <string>
#include <vector>

namespace ringtrain {

enum class CpuIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };
inline constexpr int kCpuIsaCount = 4;

const char* CpuIsaName(CpuIsa isa);  // "baseline", "avx2", "avx512", "avx512_bf16"
// The widest level this CPU supports.
CpuIsa DetectedCpuIsa();
// baseline … DetectedCpuIsa(), in order.
std::vector<CpuIsa> AvailableCpuIsas();
// The level named `name`; std::invalid_argument naming `what` (where the name came from), the
// value and the levels available when it is not a level or the CPU lacks it.
CpuIsa ParseCpuIsa(const std::string& name, const std::string& what);

// The level the kernels run now: RINGTRAIN_CPU_ISA when set, else DetectedCpuIsa(). The first call
// reads the variable; a value that is unknown or beyond the CPU throws std::invalid_argument
// naming the variable, the value and the levels available. Thread-safe.
CpuIsa ActiveCpuIsa();

// Runs the kernels at `isa` while in scope (tests and benchmarks; not thread-safe against kernels
// running on other threads). Throws std::invalid_argument when the CPU lacks `isa`.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa);
  ~ScopedCpuIsa();
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;

 private:
  CpuIsa previous_;
};

// The CPU's bfloat16 matrix units, if any: AMX tiles (amx_bf16) or AVX512-BF16 dot products.
// Where there are some on an Intel CPU, the fused attention kernel multiplies bfloat16 inputs as
// bfloat16 with float32 accumulation (MKL's gemm_bf16bf16f32); elsewhere it widens them to
// float32.
enum class Bf16Units { kNone = 0, kAvx512Bf16 = 1, kAmx = 2 };
const char* Bf16UnitsName(Bf16Units units);  // "none", "avx512_bf16", "amx"
Bf16Units DetectedBf16Units();

// How the fused attention kernel multiplies bfloat16 inputs: as bfloat16 (kNative) or widened to
// float32 (kWiden). RINGTRAIN_BF16_GEMM = native | widen when set, else native exactly on Intel
// CPUs with bf16 units: on others MKL does not use them (a Zen 5 EPYC with AVX512-BF16 ran the
// native bf16 step at L 8192 in 3.46 s, widened in 1.65 s, float32 in 1.85 s). native runs on any
// CPU (MKL emulates the units, slowly); a value that is neither throws std::invalid_argument naming
// the variable. Read once; thread-safe.
enum class Bf16Gemm { kWiden = 0, kNative = 1 };
const char* Bf16GemmName(Bf16Gemm gemm);  // "widen", "native"
Bf16Gemm ActiveBf16Gemm();

// How the CPU's float32 GEMMs run — the fused attention kernel's tiles, the model's projections
// and the chunked loss's head (model/brgemm_linear.h): MKL's sgemm and ATen (kMkl) or oneDNN's
// BRGeMM micro-kernel (kBrgemm), both inside LibTorch. MKL takes its AVX-512 code only on Intel's
// CPUs; on other AVX-512 CPUs (AMD's) it runs AVX2, and there BRGeMM, which dispatches on the CPU's
// features, ran the kernel's tile shapes 2.3-2.5x faster (a Zen 5 EPYC, one thread).
// RINGTRAIN_F32_GEMM = mkl | brgemm when set, else brgemm exactly on AVX-512 CPUs that are not
// Intel's. brgemm needs AVX-512 (DetectedCpuIsa() >= avx512): asked for without it, or a value that
// is neither, throws std::invalid_argument naming the variable. Read once; thread-safe. The two sum
// a tile's products in different orders (a few ulp); each is bitwise repeatable.
enum class F32Gemm { kMkl = 0, kBrgemm = 1 };
const char* F32GemmName(F32Gemm gemm);  // "mkl", "brgemm"
// mkl, and brgemm where the CPU has AVX-512.
std::vector<F32Gemm> AvailableF32Gemms();
F32Gemm ActiveF32Gemm();

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_CPU_ISA_H_
