#include "flashnorm/kernels/cpu/fp8.h"

#include <algorithm>
#include <cmath>

namespace flashnorm::kernels::cpu {

float fp8_e4m3_round(float x) {
  const float a = std::fabs(x);
  if (!(a > 0)) return x;  // zeros and NaN
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  // 3 mantissa bits below the leading one; subnormals (below 2^-6) in steps of 2^-9
  const float step = std::ldexp(1.0f, std::max(e - 1, -6) - 3);
  const float r = std::min(std::nearbyint(a / step) * step, 448.0f);
  return std::copysign(r, x);
}

uint8_t fp8_e4m3_encode(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float r = std::fabs(fp8_e4m3_round(x));
  if (r == 0) return sign;
  int e = 0;
  std::frexp(r, &e);
  const int biased = e - 1 + 7;
  if (biased <= 0) return sign | uint8_t(std::ldexp(r, 9));  // subnormal: r = m * 2^-9
  const int mant = int(std::ldexp(r, 4 - e)) - 8;            // r = (8 + mant) * 2^(e - 4)
  return sign | uint8_t(biased << 3) | uint8_t(mant);
}

namespace {
// s = max_i |x_i * gain_i| / 448 (gain null: 1).
float row_scale(std::span<const float> x, const float* gain) {
  float amax = 0;
  for (size_t i = 0; i < x.size(); ++i)
    amax = std::max(amax, std::fabs(gain ? x[i] * gain[i] : x[i]));
  return amax / 448.0f;
}
}  // namespace

void fp8_fake_quantize_row(std::span<float> x) {
  const float s = row_scale(x, nullptr);
  if (!(s > 0)) return;
  for (float& v : x) v = fp8_e4m3_round(v / s) * s;
}

float fp8_quantize_row(std::span<const float> x, const float* gain, uint8_t* payload) {
  const float s = row_scale(x, gain);
  for (size_t i = 0; i < x.size(); ++i)
    payload[i] = s > 0 ? fp8_e4m3_encode((gain ? x[i] * gain[i] : x[i]) / s) : 0;
  return s;
}

}  // namespace flashnorm::kernels::cpu
