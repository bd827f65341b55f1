#include "common/config/model_shape.h"

namespace ringtrain {

int64_t HeadDim(const ModelSection& m) { return m.head_dim > 0 ? m.head_dim : m.dim / m.n_heads; }

int64_t FfnHiddenDim(const ModelSection& m) {
  if (m.intermediate_size > 0) return m.intermediate_size;
  // Python: hidden = int(2 * hidden / 3) with hidden = 4 * dim; int() truncates toward zero.
  int64_t hidden = static_cast<int64_t>(2.0 * static_cast<double>(4 * m.dim) / 3.0);
  if (m.ffn_dim_multiplier) hidden = static_cast<int64_t>(*m.ffn_dim_multiplier * hidden);
  return m.multiple_of * ((hidden + m.multiple_of - 1) / m.multiple_of);
}

}  // namespace ringtrain
