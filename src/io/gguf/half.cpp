// IEEE binary16 and bfloat16 <-> binary32 conversions.
// fp32 -> fp16 rounds to nearest even (as numpy's astype(np.float16) and ggml's
// GGML_FP32_TO_FP16); fp32 -> bf16 follows ggml_compute_fp32_to_bf16 (round to nearest even,
// NaN made quiet), as mirrored by gguf-py quants.py BF16.quantize_blocks.
#include <cstring>

#include "flashnorm/io/dequant.h"

namespace flashnorm::io {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return float_of(sign | bits_of(mag));
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = bits_of(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    // NaN: keep the top mantissa bits, never turning it into inf (numpy's rule).
    uint32_t m = (ax >> 13) & 0x3ffu;
    if (m == 0) m = 1;
    return static_cast<uint16_t>(sign | 0x7c00u | m);
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): adding 0.5 makes the FPU round to a multiple of
    // 2^-24 (the half subnormal step) with round-to-nearest-even.
    const float r = float_of(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (bits_of(r) - 0x3f000000u));
  }
  const uint32_t odd = (ax >> 13) & 1u;
  ax = ax - (112u << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (ax >> 13));
}

float bf16_to_fp32(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t n = bits_of(f);
  if ((n & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((n >> 16) | 64u);  // quiet NaN
  const uint64_t r = (static_cast<uint64_t>(n) + 0x7fffu + ((n >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(r);
}

}  // namespace flashnorm::io
