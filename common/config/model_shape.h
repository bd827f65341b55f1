// The Llama 3 shape rules every side computes the same way (the trainer's model, the memory plan,
// the Hugging Face config): torch-free.
#ifndef RINGTRAIN_COMMON_CONFIG_MODEL_SHAPE_H_
#define RINGTRAIN_COMMON_CONFIG_MODEL_SHAPE_H_

#include <cstdint>

#include "common/config/job_config.h"

namespace ringtrain {

// model.head_dim, or dim / n_heads when it is 0.
int64_t HeadDim(const ModelSection& m);

// model.intermediate_size, or torchtitan's rule when it is 0: int(2·4·dim/3), times
// ffn_dim_multiplier when set, rounded up to multiple_of.
int64_t FfnHiddenDim(const ModelSection& m);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_MODEL_SHAPE_H_
