// GGML blocks to dt rows (quant_dequant.h). Each thread expands one run of 32 elements: a whole
// Q4_0 / Q4_1 / Q5_0 / Q8_0 block, or one sub-block of 32 of a Q4_K / Q6_K super-block, with the
// fp32 formulas of io/dequant.h (src/io/gguf/dequant.cpp) written with __fmul_rn / __fadd_rn /
// __fsub_rn so that nvcc contracts nothing into an FMA (the CPU file is built without
// contraction), then multiplies by the gain and rounds once to dt.
#include <cuda_fp16.h>

#include "engine_op.cuh"
#include "flashnorm/kernels/cuda/quant_dequant.h"

namespace flashnorm::kernels::cuda {
namespace {

__device__ __forceinline__ float h2f(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

// The 32 fp32 values of run i of the tensor (run r of row n: i = n * K / 32 + r) from the planar
// layout of its nb blocks (quant_layout.h).
template <QuantType T>
__device__ __forceinline__ void run32(const uint8_t* w, int64_t nb, int64_t i, float (&v)[32]) {
  // planes 1..3 start at nb times these bytes per block (quant_gemv.h)
  constexpr int kBefore1 = quant_plane_before(T, 1), kBefore2 = quant_plane_before(T, 2),
                kBefore3 = quant_plane_before(T, 3);
  if constexpr (T == QuantType::kQ4_0 || T == QuantType::kQ4_1 || T == QuantType::kQ5_0) {
    // planes: qs[16], then Q4_0 d; Q4_1 d, m; Q5_0 qh[4], d
    const uint8_t* qs = w + i * 16;
    const uint8_t* aux = w + nb * kBefore1;
    if constexpr (T == QuantType::kQ4_0) {
      const float d = h2f(aux + i * 2);
      for (int j = 0; j < 16; ++j) {
        v[j] = __fmul_rn(d, static_cast<float>((qs[j] & 0x0f) - 8));
        v[j + 16] = __fmul_rn(d, static_cast<float>((qs[j] >> 4) - 8));
      }
    } else if constexpr (T == QuantType::kQ4_1) {
      const float d = h2f(aux + i * 4), m = h2f(aux + i * 4 + 2);
      for (int j = 0; j < 16; ++j) {
        v[j] = __fadd_rn(__fmul_rn(d, static_cast<float>(qs[j] & 0x0f)), m);
        v[j + 16] = __fadd_rn(__fmul_rn(d, static_cast<float>(qs[j] >> 4)), m);
      }
    } else {
      const float d = h2f(w + nb * kBefore2 + i * 2);
      // the device qh (quant_layout.h): element e = 8p + t at bit p + 4 (t / 4) of byte t % 4
      const uint32_t qh = *reinterpret_cast<const uint32_t*>(aux + i * 4);
      auto bit = [qh](int e) { return (qh >> (8 * (e % 8 % 4) + e / 8 + 4 * (e % 8 / 4))) & 1; };
      for (int j = 0; j < 16; ++j) {
        const int hi0 = bit(j) << 4, hi1 = bit(j + 16) << 4;
        v[j] = __fmul_rn(d, static_cast<float>(((qs[j] & 0x0f) | hi0) - 16));
        v[j + 16] = __fmul_rn(d, static_cast<float>(((qs[j] >> 4) | hi1) - 16));
      }
    }
  } else if constexpr (T == QuantType::kQ8_0) {  // planes: qs[32], d
    const float d = h2f(w + nb * kBefore1 + i * 2);
    const int8_t* qs = reinterpret_cast<const int8_t*>(w + i * 32);
    for (int j = 0; j < 32; ++j) v[j] = __fmul_rn(d, static_cast<float>(qs[j]));
  } else if constexpr (T == QuantType::kQ4_K) {  // the file's blocks
    const uint8_t* b = w + (i / 8) * 144;
    const int s = static_cast<int>(i % 8);  // sub-block: bytes 32 (s / 2) .., nibble s % 2
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t* sc = b + 4;
    int scale, mn;
    if (s < 4) {
      scale = sc[s] & 63, mn = sc[s + 4] & 63;
    } else {
      scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
      mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    const float d1 = __fmul_rn(d, static_cast<float>(scale));
    const float m1 = __fmul_rn(dmin, static_cast<float>(mn));
    const uint8_t* q = b + 16 + 32 * (s / 2);
    const int sh = 4 * (s % 2);
    for (int l = 0; l < 32; ++l)
      v[l] = __fsub_rn(__fmul_rn(d1, static_cast<float>((q[l] >> sh) & 0x0f)), m1);
  } else {  // Q6_K: run s of the super-block: half h = s / 4, field f = s % 4. Planes: ql[128],
            // qh[64], scales[16], d
    const int64_t sb = i / 8;
    const int s = static_cast<int>(i % 8), h = s / 4, f = s % 4;
    const float d = h2f(w + nb * kBefore3 + sb * 2);
    const uint8_t* ql = w + sb * 128 + 64 * h + 32 * (f & 1);
    const uint8_t* qh = w + nb * kBefore1 + sb * 64 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + nb * kBefore2 + sb * 16 + 8 * h);
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> (4 * (f >> 1))) & 0x0f) | (((qh[l] >> (2 * f)) & 3) << 4)) - 32;
      v[l] = __fmul_rn(__fmul_rn(d, static_cast<float>(sc[l / 16 + 2 * f])), static_cast<float>(q));
    }
  }
}

template <class E, QuantType T>
__global__ void __launch_bounds__(256) dequant_kernel(QuantDequantArgs a, int64_t nb) {
  using Elem = typename E::T;
  const int runs = a.K / 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(a.N) * runs) return;
  const int n = static_cast<int>(g / runs), r = static_cast<int>(g % runs);
  float v[32];
  run32<T>(static_cast<const uint8_t*>(a.w), nb, g, v);
  if (a.gain) {
    for (int j = 0; j < 32; ++j) v[j] = __fmul_rn(v[j], __ldg(a.gain + 32 * r + j));
  }
  uint4* out = reinterpret_cast<uint4*>(static_cast<Elem*>(a.y) + n * a.ldy + 32 * r);
#pragma unroll
  for (int c = 0; c < 4; ++c) out[c] = detail::pack8<E>(v + 8 * c);
}

}  // namespace

Status quant_dequantize(const QuantDequantArgs& a, cudaStream_t s) {
  if (a.N < 1) return invalid("quant_dequantize: N must be >= 1");
  const int be = quant_block_elems(a.type);
  if (a.K < be || a.K % be != 0)
    return invalid("quant_dequantize: K must be a positive multiple of the block (32 or 256)");
  if (a.ldy < a.K || a.ldy % 8 != 0) return invalid("quant_dequantize: ldy >= K, ldy % 8 == 0");
  if (!a.w || !a.y) return invalid("quant_dequantize: w and y must be non-null");
  if (!aligned16(a.y)) return invalid("quant_dequantize: y must be 16-byte aligned");
  if (!aligned16(a.w)) return invalid("quant_dequantize: w must be 16-byte aligned");
  const int64_t nb = static_cast<int64_t>(a.N) * (a.K / be);
  const int64_t threads = static_cast<int64_t>(a.N) * (a.K / 32);
  const int grid = static_cast<int>((threads + 255) / 256);
  return by_dtype(a.dt, [&](auto e) {
    using E = decltype(e);
    auto go = [&](auto kernel) {
      kernel<<<grid, 256, 0, s>>>(a, nb);
      return launched("quant_dequantize");
    };
    switch (a.type) {
      case QuantType::kQ4_0:
        return go(dequant_kernel<E, QuantType::kQ4_0>);
      case QuantType::kQ4_1:
        return go(dequant_kernel<E, QuantType::kQ4_1>);
      case QuantType::kQ5_0:
        return go(dequant_kernel<E, QuantType::kQ5_0>);
      case QuantType::kQ8_0:
        return go(dequant_kernel<E, QuantType::kQ8_0>);
      case QuantType::kQ4_K:
        return go(dequant_kernel<E, QuantType::kQ4_K>);
      default:
        return go(dequant_kernel<E, QuantType::kQ6_K>);
    }
  });
}

}  // namespace flashnorm::kernels::cuda
