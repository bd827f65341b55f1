// MFU, model FLOPs utilization (README "Metrics"), the trainer's half: the run's FLOPs per token
// and the peak it is taken against, chosen once at start; each step's figure follows from its
// tokens/s (common/plan/model_flops.h holds the arithmetic).
#ifndef RINGTRAIN_WORKER_TRAINER_MFU_H_
#define RINGTRAIN_WORKER_TRAINER_MFU_H_

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/config/job_config.h"

namespace ringtrain {

struct MfuBasis {
  double flops_per_token = 0;  // FlopsPerToken of the config at training.seq_len
  double peak_per_rank = 0;    // FLOP/s of one rank's device, in the compute dtype
  int64_t world = 1;           // ranks; every one is taken to have rank 0's peak
  std::string peak_source;     // for the log: "NVIDIA H100 80GB HBM3, bf16 data sheet", ...

  // The step's MFU in percent from its global tokens/s (the step record's).
  double Percent(double tokens_per_second) const;
  // "6.692e+06 FLOPs/token, peak 9.53e+10 FLOP/s a rank (…) × 2 ranks", for the log.
  std::string Describe() const;
};

// The basis of a training run on `device` with `world` ranks, or nullopt when it has no MFU
// (metrics.peak_flops < 0, an eval job, a GPU the peak table does not know). The peak is
// metrics.peak_flops when > 0; else on CUDA the table's (KnownPeakFlops) for the device's name;
// else on the CPU the measured rate of square GEMMs in the compute dtype on this process's intra-op
// threads, on the engine the model's GEMMs use (MeasureCpuGemmFlops). Every rank calls it at the
// same point after the rendezvous, so ranks that share a machine measure while the others do too,
// as they will compute.
std::optional<MfuBasis> ChooseMfuBasis(const JobConfig& config, const c10::Device& device,
                                       int64_t world);

// The best FLOP/s (2 n³ per call) of a GEMM of two n × n CPU matrices of `dtype` — at::mm, or for
// float32 where BRGeMM is the float32 engine (cpu_isa.h's ActiveF32Gemm) kernels/brgemm_matmul.h —
// n doubled from 256 while a call takes under 20 ms (up to 2048), repeated until `budget_seconds`
// have passed.
double MeasureCpuGemmFlops(at::ScalarType dtype, double budget_seconds);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_MFU_H_
