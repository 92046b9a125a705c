// CPU kernels of the flashnorm ops (schemas: registration.cpp) for float32, bfloat16 and float16
// inputs. Arithmetic in fp32 with each row's rstd accumulated in fp64 (the CPU reference,
// flashnorm/kernels/cpu/reference.h); the GEMM of flashnorm_linear is PyTorch's own fp32 matmul
// (aten::matmul through the stable ABI, the BLAS torch was built with) on raw x, and the rstd row
// scale, the scale mask and the bias are applied to its fp32 result before the one rounding to
// x's dtype (the order of the CUDA kernels: scale before bias).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <optional>

#include "flashnorm/kernels/cpu/reference.h"
#include "linear_calls.h"
#include "tensor_checks.h"

namespace flashnorm::torch_ops {
namespace {

namespace stable = torch::stable;

// A float32 result [M, n] reshaped to x's leading dimensions and rounded once to x's dtype.
Tensor finish(const Tensor& y, const Tensor& x, int64_t n) {
  Tensor out = stable::reshape(y, with_last(x, n));
  return x.scalar_type() == ScalarType::Float ? out : stable::to(out, x.scalar_type());
}

// rstd of every row of a dense float32 [M, K] into r [M] (fp64 accumulation, rounded to fp32).
void rows_rstd(const float* x, int64_t M, int64_t K, double eps, float* r) {
  stable::parallel_for(0, M, 16, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) r[m] = float(kernels::cpu::row_rstd(x + m * K, K, eps));
  });
}

Tensor rstd_cpu(Tensor x, double eps) {
  const int64_t K = check_activation(x, "rstd");
  Tensor xf = rows_f32(x, K);
  const int64_t M = xf.size(0);
  Tensor r = stable::new_empty(xf, {M}, ScalarType::Float);
  rows_rstd(xf.const_data_ptr<float>(), M, K, eps, r.mutable_data_ptr<float>());
  return stable::reshape(r, leading_dims(x));
}

Tensor rms_norm_cpu(Tensor x, std::optional<Tensor> gain, double eps, bool gain_one_plus) {
  const int64_t K = check_activation(x, "rms_norm");
  if (gain) check_vector(*gain, x, K, "gain", "rms_norm");
  Tensor xf = rows_f32(x, K);
  const int64_t M = xf.size(0);
  std::vector<float> G(static_cast<size_t>(K), 1.0f);
  if (gain) {
    Tensor g = rows_f32(*gain, K);
    const float* gp = g.const_data_ptr<float>();
    for (int64_t k = 0; k < K; ++k) G[k] = gain_one_plus ? 1.0f + gp[k] : gp[k];
  }
  Tensor y = stable::new_empty(xf, {M, K});
  const float* xp = xf.const_data_ptr<float>();
  float* yp = y.mutable_data_ptr<float>();
  stable::parallel_for(0, M, 16, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const float r = float(kernels::cpu::row_rstd(xp + m * K, K, eps));
      for (int64_t k = 0; k < K; ++k) yp[m * K + k] = xp[m * K + k] * r * G[k];
    }
  });
  return finish(y, x, K);
}

Tensor flashnorm_linear_cpu(Tensor x, Tensor w, double eps, std::optional<Tensor> scale_mask,
                            std::optional<Tensor> bias) {
  linear_call_count().fetch_add(1, std::memory_order_relaxed);
  const int64_t N = check_linear(x, w, scale_mask, bias);
  const int64_t K = x.size(-1);
  Tensor xf = rows_f32(x, K);
  const int64_t M = xf.size(0);
  Tensor y = stable::contiguous(stable::matmul(xf, stable::transpose(rows_f32(w, K), 0, 1)));
  std::vector<float> r(static_cast<size_t>(M));
  rows_rstd(xf.const_data_ptr<float>(), M, K, eps, r.data());
  std::optional<Tensor> mask_c, bias_f;
  if (scale_mask) mask_c = stable::contiguous(*scale_mask);
  if (bias) bias_f = rows_f32(*bias, N);
  const bool* mp = mask_c ? mask_c->const_data_ptr<bool>() : nullptr;
  const float* bp = bias_f ? bias_f->const_data_ptr<float>() : nullptr;
  float* yp = y.mutable_data_ptr<float>();
  stable::parallel_for(0, M, 16, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      float* row = yp + m * N;
      for (int64_t n = 0; n < N; ++n) {
        if (!mp || mp[n]) row[n] *= r[m];
        if (bp) row[n] += bp[n];
      }
    }
  });
  return finish(y, x, N);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(flashnorm, CPU, m) {
  m.impl("rstd", TORCH_BOX(&rstd_cpu));
  m.impl("rms_norm", TORCH_BOX(&rms_norm_cpu));
  m.impl("flashnorm_linear", TORCH_BOX(&flashnorm_linear_cpu));
}

}  // namespace flashnorm::torch_ops
