// The decode GEMV from GGML blocks (quant_gemv.h). Block layouts and value formulas: io/dequant.h
// (src/io/gguf/dequant.cpp: deq_q8_0, deq_q4_k, deq_q6_k), which the test uses as its reference.
//
// CTA = 8 warps; each warp owns kRowsPerWarp output rows and walks them together (the loads of all
// its rows are issued before their products, for memory-level parallelism). Before that, the CTA
// stages its M x rows in shared memory as fp32 x * gain and sums the squares of the raw x (block
// reduction): every CTA computes the same rstd, so no second launch and no cross-CTA join; the
// join of the row scale is the warp reduction of each output's partial sums (shuffles) and the
// __syncthreads between staging and products. Shared-memory reads are rotated per lane so that a
// quarter-warp's 16-byte reads fall in distinct banks.
#include <cuda_fp16.h>

#include <algorithm>

#include "engine_op.cuh"
#include "flashnorm/kernels/cuda/quant_gemv.h"

namespace flashnorm::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerCta = kWarps * kRowsPerWarp;

struct Params {
  int M, N, K;
  const void* x;
  int64_t ldx;
  const float* gain;
  const uint8_t* w;
  int64_t row_bytes;
  float* y;
  int64_t ldy;
  bool scale_rows;
  float eps;
};

__device__ __forceinline__ float h2f(uint32_t bits16) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16 & 0xffffu)));
}
__device__ __forceinline__ uint32_t ldu16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
// Word i (0..3) of a uint4, i known only at run time (selects, no local memory).
__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}
__device__ __forceinline__ float4 lds4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

// ---- Q8_0: one lane per block of 32 ----------------------------------------------------------
template <int MT>
struct Q8_0 {
  static constexpr int kBlockBytes = 34;
  struct Raw {
    uint32_t d;
    uint32_t q[16];  // q[2i], q[2i + 1]: the 4 int8 of chunk (i + lane) % 8 as two 16-bit loads
  };
  // Block `it * 32 + lane` of the row; its 8 chunks of 4 in the order the products read them
  // (rotated per lane so that a quarter-warp's x reads fall in distinct banks).
  static __device__ __forceinline__ bool load(const uint8_t* row, int nblk, int it, int lane,
                                              Raw& r) {
    const int b = it * 32 + lane;
    if (b >= nblk) return false;
    const uint8_t* p = row + static_cast<int64_t>(b) * kBlockBytes;
    r.d = ldu16(p);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = (i + lane) & 7;
      r.q[2 * i] = ldu16(p + 2 + 4 * c);
      r.q[2 * i + 1] = ldu16(p + 4 + 4 * c);
    }
    return true;
  }
  static __device__ __forceinline__ void dot(const Raw& r, int it, int lane, const float* xs, int K,
                                             float (&acc)[MT]) {
    const int e0 = (it * 32 + lane) * 32;
    const float d = h2f(r.d);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = (i + lane) & 7;
        const float4 xv = lds4(xs + m * K + e0 + 4 * c);
        const uint32_t p0 = r.q[2 * i], p1 = r.q[2 * i + 1];
        s += xv.x * static_cast<float>(static_cast<int8_t>(p0 & 0xff)) +
             xv.y * static_cast<float>(static_cast<int8_t>(p0 >> 8)) +
             xv.z * static_cast<float>(static_cast<int8_t>(p1 & 0xff)) +
             xv.w * static_cast<float>(static_cast<int8_t>(p1 >> 8));
      }
      acc[m] += d * s;
    }
  }
};

// ---- Q4_K: eight lanes per super-block of 256, four super-blocks per warp step -----------------
// Lane part p (0..7) reads the 16-byte head and bytes 16p .. 16p + 15 of the 128 quant bytes: the
// low nibbles are elements 64j + 16(p % 2) + 0..15 of sub-block 2j (j = p / 2), the high nibbles
// the same positions + 32, of sub-block 2j + 1.
template <int MT>
struct Q4_K {
  static constexpr int kBlockBytes = 144;
  struct Raw {
    uint4 head, qs;
  };
  static __device__ __forceinline__ bool load(const uint8_t* row, int nsb, int it, int lane,
                                              Raw& r) {
    const int sb = it * 4 + lane / 8;
    if (sb >= nsb) return false;
    const uint8_t* p = row + static_cast<int64_t>(sb) * kBlockBytes;
    r.head = __ldg(reinterpret_cast<const uint4*>(p));
    r.qs = __ldg(reinterpret_cast<const uint4*>(p + 16 + 16 * (lane & 7)));
    return true;
  }
  // Byte i (0..11) of the packed scales (head bytes 4 .. 15).
  static __device__ __forceinline__ uint32_t sbyte(const uint4& h, int i) {
    const uint32_t w = i < 4 ? h.y : (i < 8 ? h.z : h.w);
    return (w >> (8 * (i & 3))) & 0xffu;
  }
  // 6-bit scale and min of sub-block j (io/ggml_blocks.h k_scale_min).
  static __device__ __forceinline__ void scale_min(const uint4& h, int j, float& sc, float& mn) {
    uint32_t s, m;
    if (j < 4) {
      s = sbyte(h, j) & 63;
      m = sbyte(h, j + 4) & 63;
    } else {
      s = (sbyte(h, j + 4) & 0x0f) | ((sbyte(h, j - 4) >> 6) << 4);
      m = (sbyte(h, j + 4) >> 4) | ((sbyte(h, j) >> 6) << 4);
    }
    sc = static_cast<float>(s);
    mn = static_cast<float>(m);
  }
  static __device__ __forceinline__ void dot(const Raw& r, int it, int lane, const float* xs, int K,
                                             float (&acc)[MT]) {
    const int sb = it * 4 + lane / 8, p = lane & 7, j = p >> 1;
    const int e0 = sb * 256 + 64 * j + 16 * (p & 1);
    const float d = h2f(r.head.x), dmin = h2f(r.head.x >> 16);
    float sc_lo, m_lo, sc_hi, m_hi;
    scale_min(r.head, 2 * j, sc_lo, m_lo);
    scale_min(r.head, 2 * j + 1, sc_hi, m_hi);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float s_lo = 0.f, x_lo = 0.f, s_hi = 0.f, x_hi = 0.f;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int c = (t + j) & 3;  // rotated: the four lane pairs read distinct banks
        const uint32_t q = word(r.qs, c);
        const float4 a = lds4(xs + m * K + e0 + 4 * c);
        const float4 b = lds4(xs + m * K + e0 + 32 + 4 * c);
        s_lo += a.x * float(q & 15) + a.y * float((q >> 8) & 15) + a.z * float((q >> 16) & 15) +
                a.w * float((q >> 24) & 15);
        s_hi += b.x * float((q >> 4) & 15) + b.y * float((q >> 12) & 15) +
                b.z * float((q >> 20) & 15) + b.w * float(q >> 28);
        x_lo += (a.x + a.y) + (a.z + a.w);
        x_hi += (b.x + b.y) + (b.z + b.w);
      }
      acc[m] += d * (sc_lo * s_lo + sc_hi * s_hi) - dmin * (m_lo * x_lo + m_hi * x_hi);
    }
  }
};

// ---- Q6_K: sixteen lanes per super-block of 256, two super-blocks per warp step ----------------
// Lane part p (0..15): half h = p / 8 (128 elements), l = 4 (p % 8): elements 128h + l + 32s + i
// (s, i = 0..3) from ql[64h + l + i] (s = 0, 2: low / high nibble), ql[64h + 32 + l + i] (s = 1,
// 3) and the 2-bit fields 2s of qh[32h + l + i], scale sc[8h + l / 16 + 2s]. Blocks are 210 bytes:
// only 2-byte loads are aligned.
template <int MT>
struct Q6_K {
  static constexpr int kBlockBytes = 210;
  struct Raw {
    uint32_t qa, qb, qh, sc01, sc23, d;  // 4 bytes each of ql, ql + 32, qh; scales; fp16 d
  };
  static __device__ __forceinline__ bool load(const uint8_t* row, int nsb, int it, int lane,
                                              Raw& r) {
    const int sb = it * 2 + lane / 16;
    if (sb >= nsb) return false;
    const int p = lane & 15, h = p >> 3, l = 4 * (p & 7);
    const uint8_t* b = row + static_cast<int64_t>(sb) * kBlockBytes;
    const uint8_t* ql = b + 64 * h + l;
    const uint8_t* qh = b + 128 + 32 * h + l;
    const uint8_t* sc = b + 192 + 8 * h + (l >> 4);  // sc[is], is = l / 16
    r.qa = ldu16(ql) | (ldu16(ql + 2) << 16);
    r.qb = ldu16(ql + 32) | (ldu16(ql + 34) << 16);
    r.qh = ldu16(qh) | (ldu16(qh + 2) << 16);
    // sc[is + 0], sc[is + 2], sc[is + 4], sc[is + 6]: bytes at even distances; (l >> 4) may be odd,
    // so read them one by one (L1-resident: the 16 lanes of the block share the line)
    r.sc01 = __ldg(sc) | (static_cast<uint32_t>(__ldg(sc + 2)) << 8);
    r.sc23 = __ldg(sc + 4) | (static_cast<uint32_t>(__ldg(sc + 6)) << 8);
    r.d = ldu16(b + 208);
    return true;
  }
  static __device__ __forceinline__ void dot(const Raw& r, int it, int lane, const float* xs, int K,
                                             float (&acc)[MT]) {
    const int sb = it * 2 + lane / 16, p = lane & 15, h = p >> 3, l = 4 * (p & 7);
    const int e0 = sb * 256 + 128 * h + l;
    const float d = h2f(r.d);
    const float sc[4] = {float(int8_t(r.sc01 & 0xff)), float(int8_t(r.sc01 >> 8)),
                         float(int8_t(r.sc23 & 0xff)), float(int8_t(r.sc23 >> 8))};
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float tot = 0.f;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t ql = (s & 1) ? r.qb : r.qa;
        const int shift = (s & 2) ? 4 : 0;
        const float4 xv = lds4(xs + m * K + e0 + 32 * s);
        float part = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int q = static_cast<int>(((ql >> (8 * i + shift)) & 15) |
                                         (((r.qh >> (8 * i + 2 * s)) & 3) << 4)) -
                        32;
          const float xi = i == 0 ? xv.x : (i == 1 ? xv.y : (i == 2 ? xv.z : xv.w));
          part += xi * static_cast<float>(q);
        }
        tot += sc[s] * part;
      }
      acc[m] += d * tot;
    }
  }
};

// Steps (warp iterations) per row, and blocks per row, of each format.
template <template <int> class F>
struct Walk;
template <>
struct Walk<Q8_0> {
  static constexpr int kElems = 32, kPerStep = 32;
};
template <>
struct Walk<Q4_K> {
  static constexpr int kElems = 256, kPerStep = 4;
};
template <>
struct Walk<Q6_K> {
  static constexpr int kElems = 256, kPerStep = 2;
};

template <class E, template <int> class F, int MT>
__global__ void __launch_bounds__(kWarps * 32) quant_gemv_kernel(Params p) {
  using T = typename E::T;
  extern __shared__ float xs[];  // [MT][K] fp32 x * gain (rows >= M are zero)
  __shared__ float red[32];
  pdl_begin();
  const int K = p.K;
  float rstd[MT];
  const T* x = static_cast<const T*>(p.x);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float ss = 0.f;
    for (int c = threadIdx.x; c < K / 8; c += blockDim.x) {
      float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (m < p.M) detail::unpack8<E>(__ldg(reinterpret_cast<const uint4*>(x + m * p.ldx) + c), f);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        ss += f[i] * f[i];
        const float g = p.gain ? __ldg(p.gain + 8 * c + i) : 1.f;
        xs[m * K + 8 * c + i] = f[i] * g;
      }
    }
    ss = block_sum(ss, red);  // barriers: also the join of the staging writes
    rstd[m] = p.scale_rows ? rsqrtf(ss / static_cast<float>(K) + p.eps) : 1.f;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int nblk = K / Walk<F>::kElems;
  const int steps = (nblk + Walk<F>::kPerStep - 1) / Walk<F>::kPerStep;
  const int n0 = blockIdx.x * kRowsPerCta + warp * kRowsPerWarp;
  float acc[kRowsPerWarp][MT];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.f;
  for (int it = 0; it < steps; ++it) {
    typename F<MT>::Raw raw[kRowsPerWarp];
    bool ok[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int n = min(n0 + r, p.N - 1);  // rows past N load row N - 1 and are not written
      ok[r] = F<MT>::load(p.w + n * p.row_bytes, nblk, it, lane, raw[r]);
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (ok[r]) F<MT>::dot(raw[r], it, lane, xs, K, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float v = detail::warp_sum(acc[r][m]);
      if (lane == 0 && n0 + r < p.N && m < p.M) p.y[m * p.ldy + n0 + r] = rstd[m] * v;
    }
  }
}

template <class E, template <int> class F>
Status launch_type(const Params& p, int M, cudaStream_t s, bool pdl) {
  auto go = [&](auto kernel, int mt) {
    const size_t smem = static_cast<size_t>(mt) * p.K * sizeof(float);
    if (smem > 48 * 1024) {
      const cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e != cudaSuccess) return launched("quant_gemv_kernel (shared memory size)", e);
    }
    const int grid = (p.N + kRowsPerCta - 1) / kRowsPerCta;
    return launched("quant_gemv_kernel", launch_ex(kernel, grid, kWarps * 32, smem, s, pdl, p));
  };
  if (M == 1) return go(quant_gemv_kernel<E, F, 1>, 1);
  if (M == 2) return go(quant_gemv_kernel<E, F, 2>, 2);
  if (M <= 4) return go(quant_gemv_kernel<E, F, 4>, 4);
  return go(quant_gemv_kernel<E, F, 8>, 8);
}

}  // namespace

int quant_block_elems(QuantType t) { return t == QuantType::kQ8_0 ? 32 : 256; }
int quant_block_bytes(QuantType t) {
  return t == QuantType::kQ8_0 ? 34 : (t == QuantType::kQ4_K ? 144 : 210);
}

Status quant_gemv(const QuantGemvArgs& a, cudaStream_t s) {
  if (a.M < 1 || a.M > 8) return invalid("quant_gemv: M must be in [1, 8]");
  if (a.N < 1) return invalid("quant_gemv: N must be >= 1");
  const int be = quant_block_elems(a.type);
  if (a.K < be || a.K % be != 0)
    return invalid("quant_gemv: K must be a positive multiple of the block (32 or 256)");
  const int mt = a.M == 1 ? 1 : (a.M == 2 ? 2 : (a.M <= 4 ? 4 : 8));
  if (static_cast<int64_t>(mt) * a.K * 4 > 200 * 1024)
    return invalid("quant_gemv: M (rounded up to 1, 2, 4, 8) * K * 4 bytes exceeds 200 KiB");
  if (!a.x || !a.w || !a.y) return invalid("quant_gemv: x, w and y must be non-null");
  if (a.ldx < a.K || a.ldx % 8 != 0 || !aligned16(a.x))
    return invalid("quant_gemv: ldx >= K, ldx % 8 == 0 and x 16-byte aligned");
  if (a.ldy < a.N) return invalid("quant_gemv: ldy must be >= N");
  const int64_t row_bytes = static_cast<int64_t>(a.K / be) * quant_block_bytes(a.type);
  if (a.type == QuantType::kQ4_K && !aligned16(a.w))
    return invalid("quant_gemv: a Q4_K w must be 16-byte aligned");
  if (a.type != QuantType::kQ4_K && reinterpret_cast<uintptr_t>(a.w) % 2 != 0)
    return invalid("quant_gemv: w must be 2-byte aligned");
  const Params p{
      a.M,       a.N, a.K,   a.x,          a.ldx, a.gain, static_cast<const uint8_t*>(a.w),
      row_bytes, a.y, a.ldy, a.scale_rows, a.eps};
  return by_dtype(a.dt, [&](auto e) {
    using E = decltype(e);
    switch (a.type) {
      case QuantType::kQ8_0:
        return launch_type<E, Q8_0>(p, a.M, s, a.pdl);
      case QuantType::kQ4_K:
        return launch_type<E, Q4_K>(p, a.M, s, a.pdl);
      default:
        return launch_type<E, Q6_K>(p, a.M, s, a.pdl);
    }
  });
}

}  // namespace flashnorm::kernels::cuda
