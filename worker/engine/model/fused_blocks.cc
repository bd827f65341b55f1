#include "worker/engine/model/fused_blocks.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "worker/engine/kernels/fused_rows.h"

namespace ringtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::tensor_list;

// Rows of RMSNorm's backward whose weight gradients one partial sum holds: the partials are added
// in block order, so the result does not depend on the thread count.
constexpr int64_t kNormRowsPerBlock = 64;
// Elements a thread takes at least (at::parallel_for's grain): below this, threads cost more
// than they save.
constexpr int64_t kGrainElements = 32768;

int64_t GrainRows(int64_t row_elements) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, row_elements));
}

// Runs `body` with T = float or uint16_t (bfloat16's bits), by x's dtype.
template <typename Body>
void ByDtype(const at::Tensor& x, Body&& body) {
  if (x.scalar_type() == at::kBFloat16) {
    body(uint16_t{});
  } else {
    TORCH_CHECK(x.scalar_type() == at::kFloat, "fused blocks: float32 or bfloat16, got ",
                x.scalar_type());
    body(float{});
  }
}

template <typename T>
T* Data(const at::Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// ---- RMSNorm ----

class RmsNormFunction : public Function<RmsNormFunction> {
 public:
  // x (N, C) contiguous, weight (C,) float32 → (N, C)
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    const int64_t rows = x.size(0), c = x.size(1);
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    ByDtype(x, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = Data<T>(x);
      T* yp = Data<T>(y);
      const float* wp = weight.data_ptr<float>();
      float* rp = rstd.data_ptr<float>();
      at::parallel_for(0, rows, GrainRows(c), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          rp[r] = RmsNormRow<T>(xp + r * c, wp, yp + r * c, c, float(eps));
        }
      });
    });
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].to(x.scalar_type()).contiguous();
    const int64_t rows = x.size(0), c = x.size(1);
    const int64_t blocks = (rows + kNormRowsPerBlock - 1) / kNormRowsPerBlock;
    at::Tensor dx = at::empty_like(x);
    at::Tensor partial = at::zeros({blocks, c}, x.options().dtype(at::kFloat));
    ByDtype(x, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = Data<T>(x);
      const T* dyp = Data<T>(dy);
      T* dxp = Data<T>(dx);
      const float* wp = weight.data_ptr<float>();
      const float* rp = rstd.data_ptr<float>();
      float* pp = partial.data_ptr<float>();
      at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          for (int64_t r = b * kNormRowsPerBlock; r < std::min(rows, (b + 1) * kNormRowsPerBlock);
               ++r) {
            RmsNormGradRow<T>(dyp + r * c, xp + r * c, wp, rp[r], dxp + r * c, pp + b * c, c);
          }
        }
      });
    });
    // The blocks' partial sums in block order, columns over the threads.
    at::Tensor dw = at::zeros({c}, x.options().dtype(at::kFloat));
    float* dwp = dw.data_ptr<float>();
    const float* pp = partial.data_ptr<float>();
    at::parallel_for(0, c, std::max<int64_t>(64, c / 8), [&](int64_t begin, int64_t end) {
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t j = begin; j < end; ++j) dwp[j] += pp[b * c + j];
      }
    });
    return {dx, dw, at::Tensor()};
  }
};

// ---- RoPE ----

// Token t's angles as RotateHeads wants them: cos2 = (c0, c0, c1, c1, …), sin2 = (−s0, s0, …)
// (negated for the inverse rotation).
void PairTables(const float* cos_row, const float* sin_row, int64_t d, bool inverse, float* cos2,
                float* sin2) {
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t i = 0; i < d / 2; ++i) {
    cos2[2 * i] = cos2[2 * i + 1] = cos_row[i];
    sin2[2 * i] = -sign * sin_row[i];
    sin2[2 * i + 1] = sign * sin_row[i];
  }
}

// Rotates every head of x (B, L, heads, D) into out (B, heads, L, D) — or, `inverse`, the
// gradient (B, heads, L, D) back into (B, L, heads, D) — at the tokens' positions.
void RotateAll(const at::Tensor& in, at::Tensor& out, int64_t batch, int64_t length, int64_t heads,
               int64_t d, const at::Tensor& cos, const at::Tensor& sin, const int64_t* positions,
               bool inverse) {
  ByDtype(in, [&](auto tag) {
    using T = decltype(tag);
    const T* ip = Data<T>(in);
    T* op = Data<T>(out);
    const float* cp = cos.data_ptr<float>();
    const float* sp = sin.data_ptr<float>();
    at::parallel_for(0, batch * length, GrainRows(heads * d), [&](int64_t begin, int64_t end) {
      std::vector<float> cos2(static_cast<size_t>(d)), sin2(static_cast<size_t>(d));
      for (int64_t token = begin; token < end; ++token) {
        const int64_t b = token / length, l = token % length;
        const int64_t p = positions[l];
        PairTables(cp + p * (d / 2), sp + p * (d / 2), d, inverse, cos2.data(), sin2.data());
        // (B, L, heads, D) offset of the token, and (B, heads, L, D) offset of its head 0.
        const int64_t by_token = token * heads * d;
        const int64_t by_head = b * heads * length * d + l * d;
        if (!inverse) {
          RotateHeads<T>(ip + by_token, d, op + by_head, length * d, heads, d, cos2.data(),
                         sin2.data());
        } else {
          RotateHeads<T>(ip + by_head, length * d, op + by_token, d, heads, d, cos2.data(),
                         sin2.data());
        }
      }
    });
  });
}

class RopeFunction : public Function<RopeFunction> {
 public:
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                             const at::Tensor& cos, const at::Tensor& sin,
                             const at::Tensor& positions) {
    const int64_t batch = q.size(0), length = q.size(1), d = q.size(3);
    at::Tensor q_out = at::empty({batch, q.size(2), length, d}, q.options());
    at::Tensor k_out = at::empty({batch, k.size(2), length, d}, k.options());
    const int64_t* pp = positions.data_ptr<int64_t>();
    RotateAll(q, q_out, batch, length, q.size(2), d, cos, sin, pp, /*inverse=*/false);
    RotateAll(k, k_out, batch, length, k.size(2), d, cos, sin, pp, /*inverse=*/false);
    ctx->save_for_backward({cos, sin, positions});
    return {q_out, k_out};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1], &positions = saved[2];
    const int64_t* pp = positions.data_ptr<int64_t>();
    tensor_list in_grads(2);
    for (int i = 0; i < 2; ++i) {
      const at::Tensor g = grads[i].contiguous();  // (B, heads, L, D)
      const int64_t batch = g.size(0), heads = g.size(1), length = g.size(2), d = g.size(3);
      in_grads[i] = at::empty({batch, length, heads, d}, g.options());
      RotateAll(g, in_grads[i], batch, length, heads, d, cos, sin, pp, /*inverse=*/true);
    }
    return {in_grads[0], in_grads[1], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ---- SwiGLU ----

class SwiGluFunction : public Function<SwiGluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    const int64_t f = a.size(-1), rows = a.numel() / f;
    at::Tensor h = at::empty_like(a);
    ByDtype(a, [&](auto tag) {
      using T = decltype(tag);
      const T* ap = Data<T>(a);
      const T* bp = Data<T>(b);
      T* hp = Data<T>(h);
      at::parallel_for(0, rows, GrainRows(f), [&](int64_t begin, int64_t end) {
        SwiGluRow<T>(ap + begin * f, bp + begin * f, hp + begin * f, (end - begin) * f);
      });
    });
    ctx->save_for_backward({a, b});
    return h;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1];
    const at::Tensor dh = grads[0].to(a.scalar_type()).contiguous();
    const int64_t f = a.size(-1), rows = a.numel() / f;
    at::Tensor da = at::empty_like(a), db = at::empty_like(b);
    ByDtype(a, [&](auto tag) {
      using T = decltype(tag);
      at::parallel_for(0, rows, GrainRows(f), [&](int64_t begin, int64_t end) {
        const int64_t offset = begin * f, n = (end - begin) * f;
        SwiGluGradRow<T>(Data<T>(dh) + offset, Data<T>(a) + offset, Data<T>(b) + offset,
                         Data<T>(da) + offset, Data<T>(db) + offset, n);
      });
    });
    return {da, db};
  }
};

}  // namespace

bool FusedBlocksApply(const at::Tensor& x) {
  return x.device().is_cpu() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16);
}

at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const int64_t c = x.size(-1);
  const at::Tensor y =
      RmsNormFunction::apply(x.contiguous().view({-1, c}), weight.to(at::kFloat).contiguous(), eps);
  return y.view(x.sizes());
}

std::pair<at::Tensor, at::Tensor> FusedRopeQK(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& cos, const at::Tensor& sin,
                                              const at::Tensor& positions) {
  TORCH_CHECK(q.size(3) % 2 == 0, "RoPE: head dim ", q.size(3), " is odd");
  TORCH_CHECK(positions.numel() == q.size(1), "RoPE: ", positions.numel(), " positions for ",
              q.size(1), " tokens");
  TORCH_CHECK(q.scalar_type() == k.scalar_type(), "RoPE: q and k differ in dtype");
  const tensor_list out =
      RopeFunction::apply(q.contiguous(), k.contiguous(), cos.contiguous(), sin.contiguous(),
                          positions.to(at::kLong).contiguous());
  return {out[0], out[1]};
}

at::Tensor FusedSwiGlu(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(),
              "SwiGLU: a and b differ in shape or dtype");
  return SwiGluFunction::apply(a.contiguous(), b.contiguous());
}

}  // namespace ringtrain
