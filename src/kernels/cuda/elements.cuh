// Internal: bf16/fp16 element helpers shared by the CUDA kernels (8 elements in one 16-byte
// vector, fp32 arithmetic). Not part of the public API.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashnorm::kernels::cuda::detail {

struct BF16 {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float2 unpack2(uint32_t w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  static __device__ __forceinline__ uint32_t pack2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float to_f(T v) { return __bfloat162float(v); }
  static __device__ __forceinline__ T from_f(float v) { return __float2bfloat16_rn(v); }
};
struct FP16 {
  using T = __half;
  static __device__ __forceinline__ float2 unpack2(uint32_t w) {
    __half2 h = *reinterpret_cast<__half2*>(&w);
    return __half22float2(h);
  }
  static __device__ __forceinline__ uint32_t pack2(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float to_f(T v) { return __half2float(v); }
  static __device__ __forceinline__ T from_f(float v) { return __float2half_rn(v); }
};

template <class E>
__device__ __forceinline__ void unpack8(const uint4& u, float f[8]) {
  float2 a = E::unpack2(u.x), b = E::unpack2(u.y), c = E::unpack2(u.z), d = E::unpack2(u.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}
template <class E>
__device__ __forceinline__ uint4 pack8(const float f[8]) {
  return make_uint4(E::pack2(f[0], f[1]), E::pack2(f[2], f[3]), E::pack2(f[4], f[5]),
                    E::pack2(f[6], f[7]));
}

// Gate activation of a gated linear unit times the up value, in fp32: SiLU (SwiGLU, Llama) or the
// tanh approximation of GELU (GeGLU, Gemma; HF gelu_pytorch_tanh). The one definition behind both
// the standalone GLU kernel and the decode GEMV's fused GLU input, so the two round identically.
template <bool kGelu>
__device__ __forceinline__ float glu_value(float g, float u) {
  float f;
  if constexpr (!kGelu) {
    f = g / (1.f + __expf(-g));
  } else {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    f = 0.5f * g * (1.f + tanhf(c * (g + 0.044715f * g * g * g)));
  }
  return f * u;
}

// Sum of squares of the 8 elements of one 16-byte vector, in fp32.
template <class E>
__device__ __forceinline__ float sumsq8(const uint4& u) {
  float f[8];
  unpack8<E>(u, f);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(f[i], f[i], s);
  return s;
}

}  // namespace flashnorm::kernels::cuda::detail
