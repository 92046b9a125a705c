// CPU references of the flashnorm kernels (fp64 accumulation). See reference.h.
#include "flashnorm/kernels/cpu/reference.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "flashnorm/error.h"
#include "flashnorm/half.h"

namespace flashnorm::kernels::cpu {

float bf16_to_float(uint16_t v) { return half::bf16_to_f32(v); }
uint16_t float_to_bf16(float f) { return half::f32_to_bf16(f); }
float fp16_to_float(uint16_t v) { return half::f16_to_f32(v); }
uint16_t float_to_fp16(float f) { return half::f32_to_f16(f); }

double row_rstd(const float* x, int64_t K, double eps) {
  double ss = 0;
  for (int64_t k = 0; k < K; ++k) ss += static_cast<double>(x[k]) * x[k];
  return 1.0 / std::sqrt(ss / static_cast<double>(K) + eps);
}

void rms_norm(const float* x, const float* gain, bool gain_one_plus, int64_t M, int64_t K,
              double eps, double* y) {
  if (M < 1 || K < 1) throw Error(fmt::format("cpu::rms_norm: M={} and K={} must be >= 1", M, K));
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    const double r = row_rstd(xr, K, eps);
    for (int64_t k = 0; k < K; ++k) {
      const double g = gain ? (gain_one_plus ? 1.0 + gain[k] : static_cast<double>(gain[k])) : 1.0;
      y[m * K + k] = xr[k] * r * g;
    }
  }
}

void flashnorm_linear(const float* x, const float* w, const float* bias, const uint8_t* mask,
                      int64_t M, int64_t N, int64_t K, double eps, double* y) {
  if (M < 1 || N < 1 || K < 1)
    throw Error(fmt::format("cpu::flashnorm_linear: M={}, N={}, K={} must be >= 1", M, N, K));
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    const double r = row_rstd(xr, K, eps);
    for (int64_t n = 0; n < N; ++n) {
      const float* wr = w + n * K;
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(xr[k]) * wr[k];
      const double s = (!mask || mask[n]) ? r : 1.0;
      y[m * N + n] = acc * s + (bias ? bias[n] : 0.0);
    }
  }
}

double rel_error(const float* a, const double* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    const double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

}  // namespace flashnorm::kernels::cpu
