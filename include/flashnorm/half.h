// Half-precision conversions on the host: IEEE binary16 (f16) and bfloat16 (bf16) <-> binary32
// (f32), header-only so that every layer (io's GGUF reader and writer, the kernels' CPU
// references, the CUDA engine's weight upload) shares one definition.
// f32 -> f16 rounds to nearest even, as numpy's astype(np.float16) and ggml's GGML_FP32_TO_FP16
// (overflow to inf, subnormals kept, a NaN keeps its top payload bits and never turns into inf);
// f32 -> bf16 follows ggml_compute_fp32_to_bf16 (round to nearest even, NaN made quiet), as
// mirrored by gguf-py quants.py BF16.quantize_blocks. f16/bf16 -> f32 are exact.
// Device-side packing lives in src/kernels/cuda/elements.cuh.
#pragma once

#include <bit>
#include <cstdint>

namespace flashnorm::half {

// Binary16 bits -> f32 (exact; inf and NaN payloads kept).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in f32.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(mag));
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// f32 -> binary16 bits, round to nearest even (>= 65520 in magnitude: inf).
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
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
    const float r = std::bit_cast<float>(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - 0x3f000000u));
  }
  const uint32_t odd = (ax >> 13) & 1u;
  ax = ax - (112u << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (ax >> 13));
}

// bfloat16 bits -> f32 (exact).
inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// f32 -> bfloat16 bits, round to nearest even; a NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t n = std::bit_cast<uint32_t>(f);
  if ((n & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((n >> 16) | 64u);
  const uint64_t r = (static_cast<uint64_t>(n) + 0x7fffu + ((n >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(r);
}

}  // namespace flashnorm::half
