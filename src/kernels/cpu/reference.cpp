// CPU references of the flashnorm kernels (fp64 accumulation). See reference.h.
#include "flashnorm/kernels/cpu/reference.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "flashnorm/error.h"

namespace flashnorm::kernels::cpu {

float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    f = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    f = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.f) return sign | 0x7c00u;  // rounds to infinity
  if (a < std::ldexp(1.f, -14)) {           // subnormal: multiple of 2^-24, round to nearest even
    const float q = std::nearbyint(a * std::ldexp(1.f, 24));
    return sign | static_cast<uint16_t>(q);
  }
  int e;
  const float m = std::frexp(a, &e);     // a = m * 2^e, m in [0.5, 1)
  float q = std::nearbyint(m * 2048.f);  // 11 significant bits
  if (q >= 2048.f) q /= 2, ++e;
  const uint16_t exp = static_cast<uint16_t>(e - 1 + 15);
  return sign | static_cast<uint16_t>(exp << 10) |
         static_cast<uint16_t>(static_cast<uint32_t>(q) & 0x3ffu);
}

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
