// CPU kernels of the FP8 ops (schemas: registration.cpp): the one-pass activation quantizer of
// docs/design.md's FP8 identity and the scaled linear that reads its row scale. The reference the
// Hopper kernels will be held to: fp32 arithmetic, each row's rstd accumulated in fp64
// (flashnorm/kernels/cpu/reference.h), float8_e4m3fn by kernels/cpu/fp8.h (torch's cast's
// rounding); the GEMM is PyTorch's fp32 matmul of the decoded payloads.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "flashnorm/kernels/cpu/fp8.h"
#include "flashnorm/kernels/cpu/reference.h"
#include "tensor_checks.h"

namespace flashnorm::torch_ops {
namespace {

namespace stable = torch::stable;

// (payload float8_e4m3fn [..., K], scale float32 [...]): v = x * G (G = gain, 1 + gain with
// gain_one_plus, or 1), s = max|v| / 448 per row, payload = fp8(v / s), scale = s * rstd(x) with
// rstd_on_scale (FlashNorm: x is the raw residual stream) or s.
std::tuple<Tensor, Tensor> fp8_quantize_cpu(Tensor x, std::optional<Tensor> gain, double eps,
                                            bool rstd_on_scale, bool gain_one_plus) {
  const int64_t K = check_activation(x, "fp8_quantize");
  if (gain) check_vector(*gain, x, K, "gain", "fp8_quantize");
  Tensor xf = rows_f32(x, K);
  const int64_t M = xf.size(0);
  std::vector<float> G;
  if (gain) {
    Tensor g = rows_f32(*gain, K);
    const float* gp = g.const_data_ptr<float>();
    G.resize(size_t(K));
    for (int64_t k = 0; k < K; ++k) G[k] = gain_one_plus ? 1.0f + gp[k] : gp[k];
  }
  Tensor payload = stable::new_empty(xf, {M, K}, ScalarType::Float8_e4m3fn);
  Tensor scale = stable::new_empty(xf, {M}, ScalarType::Float);
  const float* xp = xf.const_data_ptr<float>();
  auto* pp = static_cast<uint8_t*>(payload.mutable_data_ptr());
  float* sp = scale.mutable_data_ptr<float>();
  stable::parallel_for(0, M, 16, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const float* row = xp + m * K;
      const float s = kernels::cpu::fp8_quantize_row({row, size_t(K)},
                                                     G.empty() ? nullptr : G.data(), pp + m * K);
      sp[m] = rstd_on_scale ? s * float(kernels::cpu::row_rstd(row, K, eps)) : s;
    }
  });
  return {stable::reshape(payload, with_last(x, K)), stable::reshape(scale, leading_dims(x))};
}

// float32 [..., N]: (x w^T) * x_scale[row] * w_scale[n] (+ bias[n]), x and w float8_e4m3fn.
Tensor fp8_linear_cpu(Tensor x, Tensor x_scale, Tensor w, Tensor w_scale,
                      std::optional<Tensor> bias) {
  const std::string_view op = "fp8_linear";
  require(x.scalar_type() == ScalarType::Float8_e4m3fn, op, "x must be float8_e4m3fn, not {}",
          dtype_name(x.scalar_type()));
  require(w.scalar_type() == ScalarType::Float8_e4m3fn, op, "w must be float8_e4m3fn, not {}",
          dtype_name(w.scalar_type()));
  require(x.dim() >= 1 && x.size(-1) > 0, op, "x must have a non-empty last dimension");
  const int64_t K = x.size(-1);
  require(w.dim() == 2 && w.size(1) == K, op, "w must have shape [N, {}], not {}", K, shape_str(w));
  const int64_t N = w.size(0), M = x.numel() / K;
  require(x_scale.scalar_type() == ScalarType::Float && x_scale.numel() == M, op,
          "x_scale must be float32 with one value per row of x ({}), not {} {}", M,
          dtype_name(x_scale.scalar_type()), shape_str(x_scale));
  require(w_scale.scalar_type() == ScalarType::Float && w_scale.numel() == N, op,
          "w_scale must be float32 with one value per row of w ({}), not {} {}", N,
          dtype_name(w_scale.scalar_type()), shape_str(w_scale));
  if (bias) {
    require(bias->dim() == 1 && bias->size(0) == N, op, "bias must have shape [{}], not {}", N,
            shape_str(*bias));
  }
  Tensor xf = rows_f32(x, K), wf = rows_f32(w, K);
  Tensor y = stable::contiguous(stable::matmul(xf, stable::transpose(wf, 0, 1)));
  Tensor xs = stable::contiguous(x_scale), ws = stable::contiguous(w_scale);
  std::optional<Tensor> bf;
  if (bias) bf = rows_f32(*bias, N);
  const float* xsp = xs.const_data_ptr<float>();
  const float* wsp = ws.const_data_ptr<float>();
  const float* bp = bf ? bf->const_data_ptr<float>() : nullptr;
  float* yp = y.mutable_data_ptr<float>();
  stable::parallel_for(0, M, 16, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        float& v = yp[m * N + n];
        v = v * xsp[m] * wsp[n];
        if (bp) v += bp[n];
      }
    }
  });
  return stable::reshape(y, with_last(x, N));
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(flashnorm, CPU, m) {
  m.impl("fp8_quantize", TORCH_BOX(&fp8_quantize_cpu));
  m.impl("fp8_linear", TORCH_BOX(&fp8_linear_cpu));
}

}  // namespace flashnorm::torch_ops
