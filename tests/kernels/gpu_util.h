// Helpers for the GPU kernel tests: checked CUDA calls, device buffers, host-side random bf16/fp16
// data (std::mt19937, fixed seeds) and conversion to float for the fp64 CPU reference.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "flashnorm/kernels/cpu/reference.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/rms_norm.h"

namespace fk = flashnorm::kernels::cuda;
namespace fc = flashnorm::kernels::cpu;

#define CUDA_OK(call)                                                      \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)
#define FN_OK(call)                                      \
  do {                                                   \
    fk::Status s_ = (call);                              \
    ASSERT_TRUE(s_.ok()) << #call << ": " << s_.message; \
  } while (0)

struct DevMem {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevMem(size_t b) : bytes(b) {
    if (cudaMalloc(&p, b ? b : 16) != cudaSuccess) p = nullptr;
  }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
};

inline uint16_t to_half_bits(fk::DType dt, float f) {
  return dt == fk::DType::kBF16 ? fc::float_to_bf16(f) : fc::float_to_fp16(f);
}
inline float from_half_bits(fk::DType dt, uint16_t h) {
  return dt == fk::DType::kBF16 ? fc::bf16_to_float(h) : fc::fp16_to_float(h);
}

// n values uniform in [-scale, scale) times a per-row factor 2^(u*spread) (rows of row_len),
// rounded to dt. bits receives the stored values, vals the same values as float.
inline void random_half(fk::DType dt, size_t n, size_t row_len, float scale, float spread,
                        uint32_t seed, std::vector<uint16_t>& bits, std::vector<float>& vals) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  bits.resize(n);
  vals.resize(n);
  float row_f = 1.f;
  for (size_t i = 0; i < n; ++i) {
    if (row_len && i % row_len == 0) row_f = spread > 0 ? std::exp2(u(rng) * spread) : 1.f;
    bits[i] = to_half_bits(dt, u(rng) * scale * row_f);
    vals[i] = from_half_bits(dt, bits[i]);
  }
}

inline std::vector<float> download_half(fk::DType dt, const void* d, size_t n) {
  std::vector<uint16_t> h(n);
  if (cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return {};
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = from_half_bits(dt, h[i]);
  return f;
}

// The LinearContext the tests of one binary share (created on first use).
inline fk::LinearContext& ctx() {
  static fk::LinearContext c;
  return c;
}

// ctx()'s decode configuration for the shape with the given fields replaced (ks, rw, kw > 0;
// stages >= 0).
inline fk::DecodeConfig decode_config(int64_t M, int64_t N, int64_t K, int ks, int rw = 0,
                                      int kw = 0, int stages = -1) {
  fk::DecodeConfig c = ctx().decode_config(M, N, K);
  if (ks > 0) c.ks = ks;
  if (rw > 0) c.rw = rw;
  if (kw > 0) c.kw = kw;
  if (stages >= 0) c.stages = stages;
  return c;
}
