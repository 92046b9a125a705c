// The decode GEMV from GGML blocks (quant_gemv.h). Block layouts and value formulas: io/dequant.h
// (src/io/gguf/dequant.cpp: deq_q8_0, deq_q4_k, deq_q6_k), which the test uses as its reference.
//
// CTA = 8 warps; each warp owns kRowsPerWarp output rows of a group of kRowsPerCta and walks them
// together (the loads of all its rows, F::kUnroll steps of them, are issued before their products,
// for memory-level parallelism); a CTA takes group blockIdx.x and, when there are more groups than
// CTAs resident at once (the occupancy query, at most kCtasPerSm per SM), every gridDim.x-th after
// it, so that its staged x serves several groups. Its first group's bytes are prefetched into L2
// before the PDL wait (weights are constant), each next group's while the current one is computed
// (with PDL, the one-row instances also load each warp's first steps into registers there:
// launch_format says which; F::kPipe instances then keep the next step's loads in flight while a
// step's products run, across group boundaries).
// The weights are read in the planar layout of quant_layout.h (one aligned 8-byte load per
// piece of codes; the file's 18- to 34-byte and 210-byte blocks allowed 2-byte loads only). Before
// the products, the CTA
// stages its M x rows in shared memory: x * gain quantized to int16 per block of 32 (the CPU
// engine's activation rule, kernels/cpu/quant_matmul.h) with the block scales and the sums of
// squares of the raw x (block reduction): every CTA computes the same rstd, so no second launch
// and, with whole rows, no cross-CTA join; the join of the row scale is the warp reduction of each
// output's partial sums (shuffles) and the __syncthreads between staging and products. Split-K
// instances (SPLIT, M = 1) stage one slice of x per CTA of a thread block cluster; their join is
// the cluster barrier before the rank-ordered sums of the slices' partial results and sums of
// squares in distributed shared memory, and another before any CTA exits. The products are exact
// integer dot products (dp2a: int16 x int8 pairs into int32) per block or sub-block, scaled in
// fp32: four to eight times fewer instructions per weight than fp32 multiply-adds on unpacked
// codes, which made the kernel compute-bound (0.7-1.0x the bf16 GEMV; docs/results_h200.md).
// GO instances (QuantGemvArgs::glu_out) pair each warp's two rows as gate row i and up row
// N / 2 + i and write the GLU of the two outputs instead of y (the epilogue's only join is the
// same warp reduction).
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "engine_op.cuh"
#include "flashnorm/kernels/cuda/quant_gemv.h"
#include "shared_memory.h"

namespace flashnorm::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerCta = kWarps * kRowsPerWarp;
// The row groups of a launch over N rows: groups of kRowsPerCta rows, or (go: the GLU epilogue)
// of kRowsPerCta / 2 gate|up row pairs.
__host__ __device__ constexpr int row_groups(int N, bool go) {
  return go ? (N / 2 + kRowsPerCta / 2 - 1) / (kRowsPerCta / 2)
            : (N + kRowsPerCta - 1) / kRowsPerCta;
}

struct Params {
  int M, N, K;
  const void* x;
  int64_t ldx;
  const float* gain;
  const uint8_t* w;  // the planar layout (quant_layout.h) of N * nblk blocks
  int64_t nb;        // N * nblk
  float* y;
  int64_t ldy;
  bool scale_rows;
  float eps;
  bool accumulate;
  void* y_rounded;
  // split-K (the one-row instances with SPLIT): clusters of `split` CTAs, rank r taking steps
  // [r * split_steps, (r + 1) * split_steps) of every row; unused otherwise
  int split, split_steps;
  // GO instances (QuantGemvArgs::glu_out): the GLU's output (dt); the GLU kind of the epilogue or
  // of x_glu (1: SwiGLU, 2: GeGLU)
  void* glu_out;
  int glu_kind;
  // plane J of the device layout of W (quant_layout.h) of format T; plane 0 starts at w
  template <QuantType T, int J>
  __device__ __forceinline__ const uint8_t* plane() const {
    constexpr int kBefore = quant_plane_before(T, J);
    return w + nb * kBefore;
  }
};

__device__ __forceinline__ float h2f(uint32_t bits16) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16 & 0xffffu)));
}
__device__ __forceinline__ uint32_t ldu16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ uint32_t ldu32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}
__device__ __forceinline__ uint2 ldu64(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint2*>(p));
}

// The staged x of one CTA in shared memory, per row m < MT: xq, the K values x * gain quantized
// to int16 per block of 32 (CPU rule of kernels/cpu/quant_matmul.h: d = amax / 32767, q =
// rint(clamp(v * (1 / d))), 0 for d below FLT_MIN), 16 bytes of padding after every 64 values (so
// that lanes reading 16-byte pieces at multiples of 128 bytes apart fall in distinct banks); xd the
// K / 32 block scales d; xs32 the K / 32 sums of q per block (the min terms of Q4_K). The products
// are integer dot products (dp2a: two int16 x int8 per instruction, exact in int32), the scales in
// fp32. int16 slots of one row: a multiple of 8 (16 bytes) for K a multiple of 32, so every row and
// every 16-byte piece of it stays aligned
__host__ __device__ constexpr int padded(int K) { return K + (K + 63) / 64 * 8; }
// Split-K: the CTA stages only its slice, elements [base, base + K) of the row (base a multiple
// of 256); e is the element's index in the whole row.
struct Staged {
  const int16_t* xq;
  const float* xd;
  const int* xs32;
  int K, base;
  // element e of row m (e and e + 7 in one 64-value run when e % 8 == 0)
  __device__ __forceinline__ const int16_t* q(int m, int e) const {
    e -= base;
    return xq + m * padded(K) + e + (e >> 6) * 8;
  }
  __device__ __forceinline__ float d(int m, int e) const {
    return xd[m * (K / 32) + (e - base) / 32];
  }
  __device__ __forceinline__ int s32(int m, int e) const {
    return xs32[m * (K / 32) + (e - base) / 32];
  }
};

// isum + the products of the 8 int8 codes in w0, w1 with the 8 int16 values at x (16 bytes).
// (The 8 int16 values in v.)
__device__ __forceinline__ int dot8(const int4& v, uint32_t w0, uint32_t w1, int isum) {
  isum = __dp2a_lo(v.x, static_cast<int>(w0), isum);
  isum = __dp2a_hi(v.y, static_cast<int>(w0), isum);
  isum = __dp2a_lo(v.z, static_cast<int>(w1), isum);
  return __dp2a_hi(v.w, static_cast<int>(w1), isum);
}
__device__ __forceinline__ int dot8(const int16_t* x, uint32_t w0, uint32_t w1, int isum) {
  const int4 v = *reinterpret_cast<const int4*>(x);
  return dot8(v, w0, w1, isum);
}

// dot_rows of the formats whose rows share nothing: dot per row (Self::dot), rows not ok skipped.
template <class Self, int MT>
struct RowByRow {
  template <class Raw>
  static __device__ __forceinline__ void dot_rows(const Raw (&r)[kRowsPerWarp],
                                                  const bool (&ok)[kRowsPerWarp], int it, int lane,
                                                  const Staged& x, float (&acc)[kRowsPerWarp][MT]) {
#pragma unroll
    for (int q = 0; q < kRowsPerWarp; ++q)
      if (ok[q]) Self::dot(r[q], it, lane, x, acc[q]);
  }
};

// ---- Q8_0: four lanes per block of 32, eight blocks per warp step ------------------------------
// Lane part p (0..3) reads the block's 8 codes 8p .. 8p + 7 (one 8-byte load from the codes plane:
// a warp step reads 256 contiguous bytes) and the 8 int16 of x beside them (one 16-byte shared
// load; consecutive lanes, consecutive addresses). Planes: qs[32], d[2].
template <int MT>
struct Q8_0 : RowByRow<Q8_0<MT>, MT> {
  static constexpr QuantType kType = QuantType::kQ8_0;
  static constexpr int kElems = 32, kPerStep = 8, kUnroll = 4, kMinCtas = 4;
  static constexpr bool kPipe = false;  // no registers for a second buffer (Q4_K::kPipe)
  struct Raw {
    uint32_t d, q0, q1;
  };
  static __device__ __forceinline__ bool load(const Params& p, int n, int nblk, int it, int lane,
                                              Raw& r) {
    const int b = it * 8 + lane / 4;
    if (b >= nblk) return false;
    const int64_t i = static_cast<int64_t>(n) * nblk + b;
    const uint2 q = ldu64(p.w + i * 32 + 8 * (lane & 3));
    r.d = ldu16(p.template plane<kType, 1>() + i * 2);
    r.q0 = q.x, r.q1 = q.y;
    return true;
  }
  static __device__ __forceinline__ void dot(const Raw& r, int it, int lane, const Staged& x,
                                             float (&acc)[MT]) {
    const int e0 = (it * 8 + lane / 4) * 32 + 8 * (lane & 3);
    const float d = h2f(r.d);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const int isum = dot8(x.q(m, e0), r.q0, r.q1, 0);
      acc[m] += d * x.d(m, e0) * static_cast<float>(isum);
    }
  }
};

// ---- Q4_0, Q4_1, Q5_0: four lanes per block of 32, eight blocks per warp step -----------------
// As Q8_0: lane part p (0..3) owns elements 8p .. 8p + 7 of its block. The 4-bit codes of element
// j < 16 are the low nibble of qs[j], of j + 16 the high nibble: part p reads qs[8 (p % 2) ..] (one
// 8-byte load from the codes plane) and shifts by 4 (p / 2). Q5_0's fifth bits: the device qh
// (quant_layout.h) holds element 8p + j's at bit p + 4 (j / 4) of byte j % 4, so part p's eight
// are two shifts and masks. Planes: qs[16], then Q4_0 d[2]; Q4_1 d|m[4]; Q5_0 qh[4], d[2]. Values
// (io/dequant.h deq_q4_0, deq_q4_1, deq_q5_0): Q4_0 w = d (q - 8); Q4_1 w = d q + m, so sum w x =
// dx (d sum(q xq) + m sum(xq)), the min term added once per block by part 0; Q5_0 w = d (q - 16).
enum class Small { kQ4_0, kQ4_1, kQ5_0 };
template <Small S>
struct SmallBlock {
  template <int MT>
  struct F : RowByRow<F<MT>, MT> {
    static constexpr QuantType kType = S == Small::kQ4_0   ? QuantType::kQ4_0
                                       : S == Small::kQ4_1 ? QuantType::kQ4_1
                                                           : QuantType::kQ5_0;
    static constexpr int kElems = 32, kPerStep = 8, kUnroll = 4, kMinCtas = 4;
    static constexpr bool kPipe = false;  // as Q8_0
    struct Raw {
      uint32_t dm, q0, q1;  // fp16 d | fp16 m << 16 (Q4_1); the 8 unsigned codes
    };
    static __device__ __forceinline__ bool load(const Params& p, int n, int nblk, int it, int lane,
                                                Raw& r) {
      const int b = it * 8 + lane / 4, part = lane & 3;
      if (b >= nblk) return false;
      const int64_t i = static_cast<int64_t>(n) * nblk + b;
      const uint2 q = ldu64(p.w + i * 16 + 8 * (part & 1));
      const int sh = 4 * (part >> 1);
      uint32_t c0 = (q.x >> sh) & 0x0f0f0f0fu;
      uint32_t c1 = (q.y >> sh) & 0x0f0f0f0fu;
      const uint8_t* aux = p.template plane<kType, 1>();  // the plane after the codes
      if constexpr (S == Small::kQ4_0) {
        r.dm = ldu16(aux + i * 2);
      } else if constexpr (S == Small::kQ4_1) {
        r.dm = ldu32(aux + i * 4);
      } else {  // the device qh: bit p + 4 (j / 4) of byte j % 4 is the fifth bit of element 8p + j
        r.dm = ldu16(p.template plane<kType, 2>() + i * 2);
        const uint32_t qh = ldu32(aux + i * 4);
        c0 |= ((qh >> part) & 0x01010101u) << 4;
        c1 |= ((qh >> (part + 4)) & 0x01010101u) << 4;
      }
      r.q0 = c0, r.q1 = c1;
      return true;
    }
    // The codes are unsigned (Q4_0 0..15, Q5_0 0..31): the offset (8, 16) times the block's sum of
    // xq is taken from part 0's sum once per block (exact int32 arithmetic; Q4_1's min the same
    // way), so no per-byte subtraction.
    static __device__ __forceinline__ void dot(const Raw& r, int it, int lane, const Staged& x,
                                               float (&acc)[MT]) {
      const int e0 = (it * 8 + lane / 4) * 32 + 8 * (lane & 3);
      const float d = h2f(r.dm);
      const bool first = (lane & 3) == 0;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        int isum = dot8(x.q(m, e0), r.q0, r.q1, 0);
        if constexpr (S == Small::kQ4_1) {
          const float mn = first ? h2f(r.dm >> 16) : 0.f;
          acc[m] +=
              x.d(m, e0) * (d * static_cast<float>(isum) + mn * static_cast<float>(x.s32(m, e0)));
        } else {
          if (first) isum -= (S == Small::kQ4_0 ? 8 : 16) * x.s32(m, e0);
          acc[m] += d * x.d(m, e0) * static_cast<float>(isum);
        }
      }
    }
  };
};
template <int MT>
using Q4_0 = SmallBlock<Small::kQ4_0>::F<MT>;
template <int MT>
using Q4_1 = SmallBlock<Small::kQ4_1>::F<MT>;
template <int MT>
using Q5_0 = SmallBlock<Small::kQ5_0>::F<MT>;

// ---- Q4_K: four lanes per super-block of 256, eight super-blocks per warp step ----------------
// Lane part j (0..3) reads the 16-byte head and bytes 32j .. 32j + 31 of the 128 quant bytes: the
// low nibbles are elements 64j + 0..31 (sub-block 2j), the high nibbles 64j + 32..63 (sub-block
// 2j + 1). Per sub-block of 32 (one activation block): w = d * sc * q - dmin * m, so
// sum w x = dx (d sc sum(q xq) - dmin m sum(xq)).
template <int MT>
struct Q4_K {
  // one step at a time and no register cap: two steps at once held to 80 registers (three CTAs)
  // ran 1.3x slower at Llama-3-8B's q|k|v, o and down shapes (kernel lab)
  static constexpr int kBlockBytes = 144, kElems = 256, kPerStep = 8, kUnroll = 1, kMinCtas = 1;
  static constexpr QuantType kType = QuantType::kQ4_K;  // one plane: the file's blocks
  // kPipe: one-row instances issue the next step's loads before this step's products (two register
  // buffers). With dot_rows (both rows' products over one load of x, scales without branches), at
  // M = 1 with PDL on Hopper: Llama-3-8B q|k|v, o, gate|up and down 1.18-1.23x less time than
  // the row-by-row kernel with branchy scales; the pipeline's share 0-9% (kernel lab,
  // docs/results_h200.md, "Q4_K: fewer instructions per byte"). Q6_K ran up to 1.15x slower with
  // it, M = 8 instances 1.02-1.04x slower.
  static constexpr bool kPipe = true;
  struct Raw {
    uint4 head, q0, q1;
  };
  static __device__ __forceinline__ bool load(const Params& prm, int n, int nsb, int it, int lane,
                                              Raw& r) {
    const int sb = it * 8 + lane / 4;
    if (sb >= nsb) return false;
    const uint8_t* p = prm.w + (static_cast<int64_t>(n) * nsb + sb) * kBlockBytes;
    r.head = __ldg(reinterpret_cast<const uint4*>(p));
    r.q0 = __ldg(reinterpret_cast<const uint4*>(p + 16 + 32 * (lane & 3)));
    r.q1 = __ldg(reinterpret_cast<const uint4*>(p + 32 + 32 * (lane & 3)));
    return true;
  }
  // The 6-bit scales and mins of lane part j's sub-blocks 2j and 2j + 1 (io/ggml_blocks.h
  // k_scale_min), four bytes at a time and without branches (j differs between the lanes of a
  // warp): scale bytes 0..11 are head words y, z, w; sub-block s < 4 has scale y[s] & 63 and min
  // z[s] & 63, s = 4 + t has scale (w[t] & 15) | (y[t] >> 6) << 4 and min (w[t] >> 4) | (z[t] >> 6)
  // << 4.
  static __device__ __forceinline__ void scales_mins(const uint4& h, int j, float& sc_lo,
                                                     float& m_lo, float& sc_hi, float& m_hi) {
    const uint32_t sc4 =
        j < 2 ? h.y & 0x3f3f3f3fu : (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
    const uint32_t m4 =
        j < 2 ? h.z & 0x3f3f3f3fu : ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
    const int sh = 16 * (j & 1);
    sc_lo = static_cast<float>((sc4 >> sh) & 0xffu);
    sc_hi = static_cast<float>((sc4 >> (sh + 8)) & 0xffu);
    m_lo = static_cast<float>((m4 >> sh) & 0xffu);
    m_hi = static_cast<float>((m4 >> (sh + 8)) & 0xffu);
  }
  // Both rows of the warp at once: the 64 staged x values of the lane's part (one run of 64, eight
  // 16-byte shared loads), their two block scales and sums are loaded once for the two rows.
  static __device__ __forceinline__ void dot_rows(const Raw (&r)[kRowsPerWarp],
                                                  const bool (&ok)[kRowsPerWarp], int it, int lane,
                                                  const Staged& x, float (&acc)[kRowsPerWarp][MT]) {
    bool any = false;  // false past the row's (or slice's) super-blocks: x there is not staged
#pragma unroll
    for (int q = 0; q < kRowsPerWarp; ++q) any |= ok[q];
    if (!any) return;
    const int sb = it * 8 + lane / 4, j = lane & 3;
    const int e0 = sb * 256 + 64 * j;
    float d[kRowsPerWarp], dmin[kRowsPerWarp], sc_lo[kRowsPerWarp], m_lo[kRowsPerWarp],
        sc_hi[kRowsPerWarp], m_hi[kRowsPerWarp];
#pragma unroll
    for (int q = 0; q < kRowsPerWarp; ++q) {
      d[q] = h2f(r[q].head.x);
      dmin[q] = h2f(r[q].head.x >> 16);
      scales_mins(r[q].head, j, sc_lo[q], m_lo[q], sc_hi[q], m_hi[q]);
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const int16_t* xp = x.q(m, e0);  // elements e0 .. e0 + 63: one run, contiguous
      int4 xv[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) xv[c] = reinterpret_cast<const int4*>(xp)[c];
      const float xd_lo = x.d(m, e0), xd_hi = x.d(m, e0 + 32);
      const float xs_lo = static_cast<float>(x.s32(m, e0));
      const float xs_hi = static_cast<float>(x.s32(m, e0 + 32));
#pragma unroll
      for (int q = 0; q < kRowsPerWarp; ++q) {
        if (!ok[q]) continue;
        const uint32_t w[8] = {r[q].q0.x, r[q].q0.y, r[q].q0.z, r[q].q0.w,
                               r[q].q1.x, r[q].q1.y, r[q].q1.z, r[q].q1.w};
        int s_lo = 0, s_hi = 0;
#pragma unroll
        for (int c = 0; c < 4; ++c) {  // elements 8c .. 8c + 7 of each sub-block
          const uint32_t a = w[2 * c], b = w[2 * c + 1];
          s_lo = dot8(xv[c], a & 0x0f0f0f0fu, b & 0x0f0f0f0fu, s_lo);
          s_hi = dot8(xv[4 + c], (a >> 4) & 0x0f0f0f0fu, (b >> 4) & 0x0f0f0f0fu, s_hi);
        }
        acc[q][m] +=
            xd_lo * (d[q] * sc_lo[q] * static_cast<float>(s_lo) - dmin[q] * m_lo[q] * xs_lo) +
            xd_hi * (d[q] * sc_hi[q] * static_cast<float>(s_hi) - dmin[q] * m_hi[q] * xs_hi);
      }
    }
  }
};

// ---- Q6_K: eight lanes per super-block of 256, four super-blocks per warp step -----------------
// Lane part p (0..7): half h = p / 4 (128 elements), l = 8 (p % 4): elements 128h + 32s + l + i
// (s = 0..3, i = 0..7) from ql[64h + l + i] (s = 0, 2: low / high nibble), ql[64h + 32 + l + i]
// (s = 1, 3) and the 2-bit fields 2s of qh[32h + l + i], scale sc[8h + l / 16 + 2s] (one scale
// for the 8). Planes (quant_layout.h): ql[128], qh[64], scales[16], d[2]: every piece an aligned
// 8-byte load (the file's 210-byte blocks allow only 2-byte loads).
template <int MT>
struct Q6_K : RowByRow<Q6_K<MT>, MT> {
  static constexpr int kElems = 256, kPerStep = 4;
  // as Q4_K: two steps at once in 64 registers ran 1.15-1.2x slower (kernel lab)
  static constexpr int kUnroll = 1, kMinCtas = 1;
  static constexpr QuantType kType = QuantType::kQ6_K;
  static constexpr bool kPipe = false;  // up to 1.15x slower with it (Q4_K::kPipe)
  struct Raw {
    uint32_t qa0, qa1, qb0, qb1, qh0, qh1;  // 8 bytes each of ql, ql + 32, qh
    uint32_t sc, d;                         // sc[is], sc[is + 2], sc[is + 4], sc[is + 6]; fp16 d
  };
  static __device__ __forceinline__ bool load(const Params& prm, int n, int nsb, int it, int lane,
                                              Raw& r) {
    const int sb = it * 4 + lane / 8;
    if (sb >= nsb) return false;
    const int p = lane & 7, h = p >> 2, l = 8 * (p & 3);
    const int64_t i = static_cast<int64_t>(n) * nsb + sb;
    const uint2 qa = ldu64(prm.w + i * 128 + 64 * h + l);
    const uint2 qb = ldu64(prm.w + i * 128 + 64 * h + 32 + l);
    const uint2 qh = ldu64(prm.template plane<kType, 1>() + i * 64 + 32 * h + l);
    const uint2 sc = ldu64(prm.template plane<kType, 2>() + i * 16 + 8 * h);  // sc[8h .. 8h + 7]
    r.qa0 = qa.x, r.qa1 = qa.y, r.qb0 = qb.x, r.qb1 = qb.y, r.qh0 = qh.x, r.qh1 = qh.y;
    // bytes is, is + 2, is + 4, is + 6 of the eight (is = l / 16)
    r.sc = __byte_perm(sc.x, sc.y, (l >> 4) ? 0x7531u : 0x6420u);
    r.d = ldu16(prm.template plane<kType, 3>() + i * 2);
    return true;
  }
  // The 4 codes of field s from one word of ql and one of qh, as int8 (q - 32, per byte).
  static __device__ __forceinline__ uint32_t codes(uint32_t ql, uint32_t qh, int s) {
    const uint32_t v =
        ((ql >> ((s & 2) ? 4 : 0)) & 0x0f0f0f0fu) | (((qh >> (2 * s)) & 0x03030303u) << 4);
    return __vsub4(v, 0x20202020u);
  }
  static __device__ __forceinline__ void dot(const Raw& r, int it, int lane, const Staged& x,
                                             float (&acc)[MT]) {
    const int sb = it * 4 + lane / 8, p = lane & 7, h = p >> 2, l = 8 * (p & 3);
    const int e0 = sb * 256 + 128 * h + l;
    const float d = h2f(r.d);
    uint32_t q[4][2];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      q[s][0] = codes((s & 1) ? r.qb0 : r.qa0, r.qh0, s);
      q[s][1] = codes((s & 1) ? r.qb1 : r.qa1, r.qh1, s);
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float tot = 0.f;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int e = e0 + 32 * s;  // 8 elements within one run of 64
        const float sc = static_cast<float>(static_cast<int8_t>((r.sc >> (8 * s)) & 0xff));
        tot += x.d(m, e) * sc * static_cast<float>(dot8(x.q(m, e), q[s][0], q[s][1], 0));
      }
      acc[m] += d * tot;
    }
  }
};

// The 8 gain values of chunk c (elements 8c .. 8c + 7; two 16-byte loads), or 1s for no gain or a
// chunk past K.
__device__ __forceinline__ void gain8(const float* gain, int c, bool in, float (&g)[8]) {
  if (gain && in) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(gain) + 2 * c);
    const float4 b = __ldg(reinterpret_cast<const float4*>(gain) + 2 * c + 1);
    g[0] = a.x, g[1] = a.y, g[2] = a.z, g[3] = a.w, g[4] = b.x, g[5] = b.y, g[6] = b.z, g[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) g[i] = 1.f;
  }
}

// Shared-memory bytes of the staged x of mt rows of K.
__host__ __device__ constexpr size_t staged_bytes(int mt, int K) {
  return static_cast<size_t>(mt) * padded(K) * 2 + static_cast<size_t>(mt) * (K / 32) * 8;
}

// Offset of the split-K partial sums in the dynamic shared memory (after the staged x, 16-byte
// aligned), and their bytes for `rounds` row groups per CTA.
__host__ __device__ constexpr size_t split_part_offset(int mt, int K) {
  return (staged_bytes(mt, K) + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t split_part_bytes(int rounds) {
  return static_cast<size_t>(rounds) * kRowsPerCta * sizeof(float);
}

// Prefetch into L2 the bytes of row group g (kRowsPerCta contiguous rows, fewer at the end): its
// blocks' part of every plane (contiguous within each), one 128-byte line per thread and step.
// SPLIT: only blocks [b_lo, b_hi) of each row (a range per row and plane).
// GO: group g is rows [8g, 8g + 8) of the gate half and the same of the up half (N / 2 rows on).
template <class F, bool SPLIT, bool GO = false>
__device__ __forceinline__ void prefetch_rows(const Params& p, int g, int b_lo, int b_hi) {
  const int64_t half = GO ? p.N / 2 : 0;
  const int64_t per = GO ? kRowsPerCta / 2 : kRowsPerCta;
  const int64_t first = static_cast<int64_t>(g) * per;
  const int64_t rows = min(per, (GO ? half : p.N) - first);
  const int64_t nblk = p.K / F::kElems;
  const uint8_t* plane = p.w;
#pragma unroll
  for (int j = 0; j < quant_plane_count(F::kType); ++j) {
    const int64_t pb = quant_plane_bytes(F::kType, j);
    if constexpr (!SPLIT) {
#pragma unroll
      for (int h = 0; h < (GO ? 2 : 1); ++h) {
        const uint8_t* base = plane + (first + h * half) * nblk * pb;
        for (int64_t off = threadIdx.x * 128; off < rows * nblk * pb; off += blockDim.x * 128)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off));
      }
    } else {  // thread t: row t % 16, lines t / 16, t / 16 + 16, ... of its range (one or two)
      static_assert(kRowsPerCta == 16, "one row per 16 threads");
      const int64_t r = threadIdx.x % kRowsPerCta;
      if (r < rows) {
        const uintptr_t lo = reinterpret_cast<uintptr_t>(plane + ((first + r) * nblk + b_lo) * pb);
        const uintptr_t hi = lo + (b_hi - b_lo) * pb;
        for (uintptr_t a = (lo & ~uintptr_t{127}) + threadIdx.x / kRowsPerCta * 128; a < hi;
             a += blockDim.x / kRowsPerCta * 128)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
      }
    }
    plane += p.nb * pb;
  }
}

// XG: 0 x in dt; 1 / 2 x the fp32 gate|up rows [M, 2K] of a SwiGLU / GeGLU, staged as
// round_dt(act(gate) * up) (the standalone GLU kernel's values).
// One-row instances of the 32-element formats are held to 64 registers, so that four CTAs share
// an SM (F::kMinCtas; without spills): with their four steps of loads at once, 1.3-1.8x faster
// than one step in up to 78 registers (kernel lab, docs/results_h200.md).
// EARLY: launched with PDL, the first steps of W loaded before the wait (below; launch_format
// chooses it).
// GO: the GLU in the epilogue (QuantGemvArgs::glu_out): warp w of group g takes rows i = 8g + w
// (gate) and N / 2 + i (up) and writes round_dt(act(s y_i) s y_{N/2+i}) instead of y.
template <class E, template <int> class F, int MT, int XG, bool EARLY = false, bool SPLIT = false,
          bool GO = false>
__global__ void __launch_bounds__(kWarps * 32, MT == 1 ? F<MT>::kMinCtas : 1)
    quant_gemv_kernel(Params p) {
  static_assert(!SPLIT || MT == 1, "split-K is for one-row instances");
  static_assert(!GO || (MT == 1 && XG == 0 && !SPLIT && kRowsPerWarp == 2),
                "the GLU epilogue: one row, x in dt, whole rows, a warp's two rows a gate|up pair");
  using T = typename E::T;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float red[32];
  __shared__ float ss_part;  // SPLIT: this CTA's sum of squares over its slice
  const int half = p.N / 2;  // GO: the gate rows
  const int groups = row_groups(p.N, GO);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int nblk = p.K / F<MT>::kElems;
  const int steps = (nblk + F<MT>::kPerStep - 1) / F<MT>::kPerStep;
  // SPLIT: the cluster of p.split consecutive CTAs (blockIdx.x / split) takes row groups
  // blockIdx.x / split, then every (gridDim.x / split)-th; its rank (blockIdx.x % split) the steps
  // [it_lo, it_hi) of their rows. Otherwise one CTA takes whole rows.
  const int rank = SPLIT ? static_cast<int>(blockIdx.x) % p.split : 0;
  const int g0 = SPLIT ? static_cast<int>(blockIdx.x) / p.split : static_cast<int>(blockIdx.x);
  const int gstep = SPLIT ? static_cast<int>(gridDim.x) / p.split : static_cast<int>(gridDim.x);
  const int it_lo = SPLIT ? rank * p.split_steps : 0;
  const int it_hi = SPLIT ? min(steps, it_lo + p.split_steps) : steps;
  const int b_lo = it_lo * F<MT>::kPerStep;
  const int b_hi = SPLIT ? min(nblk, it_hi * F<MT>::kPerStep) : nblk;
  const int e_lo = b_lo * F<MT>::kElems;  // the staged slice: elements [e_lo, e_lo + K)
  const int K = SPLIT ? (b_hi - b_lo) * F<MT>::kElems : p.K;
  // PDL: pull this CTA's first rows into L2 while the preceding kernel finishes (weights are
  // constant: nothing still running writes them), load the warp's first steps of them, let the next
  // kernel launch, then wait for the preceding one
  prefetch_rows<F<MT>, SPLIT, GO>(p, g0, b_lo, b_hi);
  // kUnroll steps of the warp's rows loaded before their products: that many more bytes in flight
  // per warp, and a short row (SmolLM2's K = 576 is 3 steps of Q4_1) in one memory round trip
  // instead of one per step. Same products in the same order per row.
  constexpr int U = F<MT>::kUnroll;
  using Raw = typename F<MT>::Raw;
  Raw raw[U][kRowsPerWarp];
  bool ok[U][kRowsPerWarp];
  auto load_into = [&](Raw(&dst)[U][kRowsPerWarp], bool(&dok)[U][kRowsPerWarp], int g, int it0) {
    const int n0 = g * kRowsPerCta + warp * kRowsPerWarp;
    const int pair = min(g * (kRowsPerCta / 2) + warp, half - 1);  // GO
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        // rows past N (GO: past the pairs) load the last one and are not written
        const int n = GO ? pair + r * half : min(n0 + r, p.N - 1);
        // (a step past the slice belongs to the next rank)
        dok[u][r] =
            (!SPLIT || it0 + u < it_hi) && F<MT>::load(p, n, nblk, it0 + u, lane, dst[u][r]);
      }
  };
  auto load_steps = [&](int g, int it0) { load_into(raw, ok, g, it0); };
  // EARLY (launched with PDL): the first steps of group blockIdx.x are loaded into registers
  // before the wait, so that their latency overlaps the preceding kernel, as the bf16 decode GEMV
  // does with its first batch. Without PDL there is nothing to overlap, and loading them before the
  // staging of x ran 7-16% slower for Q4_K (kernel lab, docs/results_h200.md), probably
  // because the staging's loads of x queue behind them. A template parameter: as a run-time flag it
  // cost 16 bytes of spills to the instances held to 64 registers.
  constexpr bool kPipe = F<MT>::kPipe && MT == 1;
  if constexpr (EARLY) load_steps(g0, it_lo);
  // the gain of this thread's chunk of the first staging pass, read before the PDL wait (the gain
  // is constant), so that x is the staging's only load after it; not beside the early steps of
  // the instances held to 64 registers (16-32 bytes of spills)
  constexpr bool kGainFirst = !EARLY || F<MT>::kMinCtas == 1;
  const int c_lo = e_lo / 8;  // the slice's first chunk of 8 elements
  float gain_first[8];
  if constexpr (kGainFirst)
    gain8(p.gain, c_lo + threadIdx.x, static_cast<int>(threadIdx.x) < K / 8, gain_first);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int16_t* xq = reinterpret_cast<int16_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + static_cast<size_t>(MT) * padded(K) * 2);
  int* xs32 = reinterpret_cast<int*>(smem + static_cast<size_t>(MT) * padded(K) * 2 +
                                     static_cast<size_t>(MT) * (K / 32) * 4);
  float rstd[MT];
  const T* x = static_cast<const T*>(p.x);
  // Chunk c (8 elements) of the slice is thread c % 256's; the 4 chunks of a block of 32 are 4
  // consecutive lanes (blockDim and K / 8 are multiples of 4), whose amax and sums meet by
  // shuffles. The global loads of a pass (x, or gate and up; the gain after the first pass) are
  // XRaw; kStagePipe: the next pass's are issued before this one is quantized (K / 8 above 256,
  // e.g. Llama-3-8B's down at 7 passes, is otherwise a chain of one load latency per pass).
  constexpr bool kStagePipe = F<MT>::kMinCtas == 1;
  struct XRaw {
    uint4 v;
    float4 g0, g1, u0, u1, ga, gb;
  };
  auto load_pass = [&](int m, int c0, XRaw& r) {
    const int c = c0 + threadIdx.x, cg = c_lo + c;
    const bool in = c < K / 8;
    if (in && m < p.M) {
      if constexpr (XG == 0) {
        r.v = __ldg(reinterpret_cast<const uint4*>(x + m * p.ldx) + cg);
      } else {
        const float* gu = static_cast<const float*>(p.x) + m * p.ldx + 8 * cg;
        r.g0 = __ldg(reinterpret_cast<const float4*>(gu));
        r.g1 = __ldg(reinterpret_cast<const float4*>(gu) + 1);
        r.u0 = __ldg(reinterpret_cast<const float4*>(gu + p.K));
        r.u1 = __ldg(reinterpret_cast<const float4*>(gu + p.K) + 1);
      }
    }
    if (!(kGainFirst && c0 == 0) && p.gain && in) {
      r.ga = __ldg(reinterpret_cast<const float4*>(p.gain) + 2 * cg);
      r.gb = __ldg(reinterpret_cast<const float4*>(p.gain) + 2 * cg + 1);
    }
  };
  // one pass of row m from its loads r: chunk c0 + threadIdx.x quantized into the staged x, its
  // squares added to ss
  auto stage_pass = [&](int m, int c0, const XRaw& r, float& ss) {
    const int c = c0 + threadIdx.x;  // in the slice
    const bool in = c < K / 8;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (in && m < p.M) {
      if constexpr (XG == 0) {
        detail::unpack8<E>(r.v, f);
      } else {
        const float g[8] = {r.g0.x, r.g0.y, r.g0.z, r.g0.w, r.g1.x, r.g1.y, r.g1.z, r.g1.w};
        const float u[8] = {r.u0.x, r.u0.y, r.u0.z, r.u0.w, r.u1.x, r.u1.y, r.u1.z, r.u1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
          f[i] = E::to_f(E::from_f(detail::glu_value<XG == 2>(g[i], u[i])));
      }
    }
    float g[8];
    if (kGainFirst && c0 == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) g[i] = gain_first[i];
    } else if (p.gain && in) {
      g[0] = r.ga.x, g[1] = r.ga.y, g[2] = r.ga.z, g[3] = r.ga.w;
      g[4] = r.gb.x, g[5] = r.gb.y, g[6] = r.gb.z, g[7] = r.gb.w;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) g[i] = 1.f;
    }
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      ss += f[i] * f[i];
      f[i] *= g[i];
      amax = fmaxf(amax, fabsf(f[i]));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float d = amax / 32767.f;
    const float id = d >= 1.17549435e-38f ? 1.f / d : 0.f;  // FLT_MIN, as the CPU rule
    int q[8], sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[i] = __float2int_rn(fminf(fmaxf(f[i] * id, -32767.f), 32767.f));
      sum += q[i];
    }
    int4 packed;
    packed.x = (q[0] & 0xffff) | (q[1] << 16);
    packed.y = (q[2] & 0xffff) | (q[3] << 16);
    packed.z = (q[4] & 0xffff) | (q[5] << 16);
    packed.w = (q[6] & 0xffff) | (q[7] << 16);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // the block's 32 elements: 4 lanes
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (in) {
      const int e = 8 * c;
      *reinterpret_cast<int4*>(xq + m * padded(K) + e + (e >> 6) * 8) = packed;
      if ((c & 3) == 0) {
        xd[m * (K / 32) + c / 4] = d;
        xs32[m * (K / 32) + c / 4] = sum;
      }
    }
  };
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float ss = 0.f;
    // every lane runs every pass (the shuffles need the whole warp); lanes past K / 8 stage nothing
    if constexpr (kStagePipe) {
      XRaw cur{};
      load_pass(m, 0, cur);
      for (int c0 = 0; c0 < K / 8; c0 += blockDim.x) {
        XRaw nxt{};
        if (c0 + static_cast<int>(blockDim.x) < K / 8) load_pass(m, c0 + blockDim.x, nxt);
        stage_pass(m, c0, cur, ss);
        cur = nxt;  // after this pass's work: the copy waits for the next pass's loads
      }
    } else {
      for (int c0 = 0; c0 < K / 8; c0 += blockDim.x) {
        XRaw r{};
        load_pass(m, c0, r);
        stage_pass(m, c0, r, ss);
      }
    }
    ss = block_sum(ss, red);  // barriers: also the join of the staging writes
    if constexpr (SPLIT) {
      if (threadIdx.x == 0) ss_part = ss;  // the whole row's rstd: after the cluster's join
      rstd[m] = 1.f;
    } else {
      rstd[m] = p.scale_rows ? rsqrtf(ss / static_cast<float>(K) + p.eps) : 1.f;
    }
  }
  __syncthreads();
  const Staged staged{xq, xd, xs32, K, e_lo};
  // kPipe: the first item, unless loaded early
  if constexpr (kPipe && !EARLY) {
    if (g0 < groups) load_steps(g0, it_lo);
  }
  // SPLIT: the slice's dot products of the CTA's i-th group, part[16 i + row in the group], at the
  // same offset in every CTA of the cluster (after the staged x of the largest slice: the last
  // one may be shorter), where the other ranks read it
  float* part = reinterpret_cast<float*>(
      smem + split_part_offset(MT, SPLIT ? p.split_steps * F<MT>::kPerStep * F<MT>::kElems : K));
  // the products of U steps of the warp's rows from step it0, into acc
  auto dots = [&](const Raw(&b)[U][kRowsPerWarp], const bool(&bok)[U][kRowsPerWarp], int it0,
                  float(&acc)[kRowsPerWarp][MT]) {
#pragma unroll
    for (int u = 0; u < U; ++u) F<MT>::dot_rows(b[u], bok[u], it0 + u, lane, staged, acc);
  };
  // the warp's outputs of row group g (the CTA's i-th), then acc reset
  auto finish_group = [&](int g, int i, float(&acc)[kRowsPerWarp][MT]) {
    const int n0 = g * kRowsPerCta + warp * kRowsPerWarp;
    if constexpr (GO) {  // y_i and y_{N/2+i} as the y the kernel would write, then the GLU
      const float vg = detail::warp_sum(acc[0][0]), vu = detail::warp_sum(acc[1][0]);
      acc[0][0] = acc[1][0] = 0.f;
      const int pair = g * (kRowsPerCta / 2) + warp;
      if (lane == 0 && pair < half) {
        const float yg = rstd[0] * vg, yu = rstd[0] * vu;
        const float h =
            p.glu_kind == 2 ? detail::glu_value<true>(yg, yu) : detail::glu_value<false>(yg, yu);
        static_cast<T*>(p.glu_out)[pair] = E::from_f(h);
      }
    } else {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const float v = detail::warp_sum(acc[r][m]);
          acc[r][m] = 0.f;
          if constexpr (SPLIT) {
            if (lane == 0) part[i * kRowsPerCta + warp * kRowsPerWarp + r] = v;
          } else if (lane == 0 && n0 + r < p.N && m < p.M) {
            float* yp = p.y + m * p.ldy + n0 + r;
            const float out = p.accumulate ? *yp + rstd[m] * v : rstd[m] * v;
            *yp = out;
            if (p.y_rounded) static_cast<T*>(p.y_rounded)[m * p.ldy + n0 + r] = E::from_f(out);
          }
        }
      }
    }
  };
  if constexpr (kPipe) {
    float acc[kRowsPerWarp][MT];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int m = 0; m < MT; ++m) acc[r][m] = 0.f;
    // The CTA's items (row group g, steps it0 .. it0 + U - 1) in order, g0 first: the next item's
    // loads are issued before this one's products, into the other of two register buffers (a copy
    // from one to the other would wait for the loads), so that a step of the warp's rows is in
    // flight while the products run, across the end of a group too.
    Raw raw2[U][kRowsPerWarp];
    bool ok2[U][kRowsPerWarp];
    int g = g0, it0 = it_lo, i = 0;
    auto next_item = [&](int& gn, int& itn) {
      gn = g, itn = it0 + U;
      if (itn >= it_hi) gn += gstep, itn = it_lo;
    };
    // the products of the current item from b, then the group's outputs at its last step
    auto process = [&](const Raw(&b)[U][kRowsPerWarp], const bool(&bok)[U][kRowsPerWarp]) {
      if (it0 == it_lo && g + gstep < groups)
        prefetch_rows<F<MT>, SPLIT, GO>(p, g + gstep, b_lo, b_hi);
      dots(b, bok, it0, acc);
      if (it0 + U >= it_hi) finish_group(g, i++, acc);
    };
    // one item from cur while the next one loads into nxt; false after the CTA's last item
    auto step = [&](const Raw(&cur)[U][kRowsPerWarp], const bool(&cur_ok)[U][kRowsPerWarp],
                    Raw(&nxt)[U][kRowsPerWarp], bool(&nxt_ok)[U][kRowsPerWarp]) {
      int g1, it1;
      next_item(g1, it1);
      if (g1 < groups) load_into(nxt, nxt_ok, g1, it1);
      process(cur, cur_ok);
      g = g1, it0 = it1;
      return g < groups;
    };
    // g0 < groups always (the grid never exceeds the row groups); the condition guards it anyway
    while (g < groups && step(raw, ok, raw2, ok2) && step(raw2, ok2, raw, ok)) {
    }
  } else {
    // row groups of kRowsPerCta rows: g0, then every gstep-th (the staged x reused)
    for (int g = g0, i = 0; g < groups; g += gstep, ++i) {
      if (g + gstep < groups) prefetch_rows<F<MT>, SPLIT, GO>(p, g + gstep, b_lo, b_hi);
      float acc[kRowsPerWarp][MT];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) acc[r][m] = 0.f;
      for (int it0 = it_lo; it0 < it_hi; it0 += U) {
        if (!EARLY || g != g0 || it0 != it_lo) load_steps(g, it0);
        dots(raw, ok, it0, acc);
      }
      finish_group(g, i, acc);
    }
  }
  if constexpr (SPLIT) {
    // The join of the slices: every CTA of the cluster has written its partial sums (barrier
    // cluster-wide, with release / acquire of shared memory), then each output is the sum of the
    // ranks' partials in rank order (distributed shared memory), times the row's rstd from the
    // sum of the ranks' sums of squares in rank order: the same result whatever the timing.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    float ss = 0.f;
    for (int q = 0; q < p.split; ++q) ss += *cluster.map_shared_rank(&ss_part, q);
    const float rs = p.scale_rows ? rsqrtf(ss / static_cast<float>(p.K) + p.eps) : 1.f;
    const int outs = (groups - g0 + gstep - 1) / gstep * kRowsPerCta;
    for (int o = rank * blockDim.x + threadIdx.x; o < outs; o += p.split * blockDim.x) {
      const int n = (g0 + o / kRowsPerCta * gstep) * kRowsPerCta + o % kRowsPerCta;
      if (n >= p.N) continue;
      float v = 0.f;
      for (int q = 0; q < p.split; ++q) v += cluster.map_shared_rank(part, q)[o];
      const float out = p.accumulate ? p.y[n] + rs * v : rs * v;
      p.y[n] = out;
      if (p.y_rounded) static_cast<T*>(p.y_rounded)[n] = E::from_f(out);
    }
    cluster.sync();  // no CTA leaves while another still reads its shared memory
  }
}

// The most CTAs per SM a launch counts on (ctas_per_sm).
constexpr int kCtasPerSm = 4;
// The current device's SMs (132 when the query fails), asked once.
int sm_count() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      n = 132;
    return n;
  }();
  return sms;
}
// The launch units (CTAs, or clusters of split-K) over `groups` row groups when `slots` units are
// resident at once: one per group up to that, else that many with every unit taking the same
// number of groups (the staged x is reused across a unit's groups): one wave, never a second one
// of a few units.
int grid_for(int groups, int slots) {
  if (groups <= slots) return groups;
  const int rounds = (groups + slots - 1) / slots;
  return (groups + rounds - 1) / rounds;
}

// CTAs of `kernel` resident per SM with smem bytes of dynamic shared memory (the occupancy
// calculator; cached per kernel and size, the query costs host time on every eager launch).
int resident_ctas(const void* kernel, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, size_t>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kernel, smem);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, smem) != cudaSuccess) {
    cudaGetLastError();  // not the launch's error: one CTA per SM, asked again next time
    return 1;
  }
  return cache[key] = n;
}

// The rows a kernel instance stages for M rows: M rounded up to 1, 2, 4 or 8.
int staged_rows(int M) { return M <= 1 ? 1 : (M == 2 ? 2 : (M <= 4 ? 4 : 8)); }

// The opt-in to smem bytes of dynamic shared memory where the kernel needs one. It counts the
// kernel's static shared memory too (red[32] and ss_part, at most): dynamic memory of exactly
// 48 KiB alone needs no opt-in, but with red[] it does.
Status opt_in(const void* kernel, size_t smem) {
  if (smem + 33 * sizeof(float) <= 48 * 1024) return {};
  const cudaError_t e = detail::opt_in_shared_memory(kernel, smem);
  return e == cudaSuccess ? Status{} : launched("quant_gemv_kernel (shared memory size)", e);
}

// The CTAs of `kernel` resident per SM, at most kCtasPerSm (resident_ctas).
int ctas_per_sm(const void* kernel, size_t smem) {
  return std::clamp(resident_ctas(kernel, smem), 1, kCtasPerSm);
}

// One launch of a quant_gemv_kernel instance that stages mt rows: the shared-memory opt-in where
// it needs one, the grid of grid_for. go: a GO instance (groups of 8 gate|up row pairs).
template <class Kernel>
Status launch_kernel(Kernel kernel, int mt, const Params& p, cudaStream_t s, bool pdl,
                     bool go = false) {
  const void* k = reinterpret_cast<const void*>(kernel);
  const size_t smem = staged_bytes(mt, p.K);
  if (Status st = opt_in(k, smem); !st.ok()) return st;
  const int grid = grid_for(row_groups(p.N, go), ctas_per_sm(k, smem) * sm_count());
  return launched("quant_gemv_kernel", launch_ex(kernel, grid, kWarps * 32, smem, s, pdl, p));
}

// Split-K for one-row instances: clusters of split CTAs, each taking split_steps steps of every
// row. Only where the row groups leave CTA slots idle: split is the slots per group (F::kMinCtas
// CTAs per SM, the residency the instance is built for), at most K / kSplitElems (with PDL; K / (2
// kSplitElems) without) and kMaxSplit, then whole steps per slice (the last one may be shorter).
// At Llama-3-8B's o and down shapes (256 row groups) that is 2 for the 32-element formats (built
// for 4 CTAs per SM) and none for Q4_K / Q6_K (built for 1: 132 slots). Kernel lab at M = 1
// (docs/results_h200.md): with PDL split 2 took 1.10-1.26x less time than whole rows at o
// and 1.16-1.20x at down; without PDL 1.07-1.14x at down, while slices of 2048 at o ran 0.92-1.01x
// of whole rows (an earlier policy), hence the longer slices there; filling every slot of a
// wide projection with more, shorter slices ran slower. The split, hence the bits of the result,
// depends on PDL and the SM count.
constexpr int kSplitElems = 2048, kMaxSplit = 8;
// A CTA's split-K partial sums cover at most this many row groups (the grid grows past the
// resident clusters if needed).
constexpr int kMaxSplitRounds = 64;
template <template <int> class F>
std::pair<int, int> split_for(int N, int K, bool pdl) {
  const int steps = (K / F<1>::kElems + F<1>::kPerStep - 1) / F<1>::kPerStep;
  const int groups = row_groups(N, false);
  const int want = std::min(
      {F<1>::kMinCtas * sm_count() / groups, K / (pdl ? kSplitElems : 2 * kSplitElems), kMaxSplit});
  if (want <= 1) return {1, steps};
  const int per = (steps + want - 1) / want;
  return {(steps + per - 1) / per, per};
}

// One launch of a split-K instance (split_for's split > 1): the grid is as many clusters as are
// resident at once, each taking the same number of row groups (at most kMaxSplitRounds).
template <template <int> class F, class Kernel>
Status launch_split(Kernel kernel, Params p, int split, int per, cudaStream_t s, bool pdl) {
  p.split = split;
  p.split_steps = per;
  const int groups = row_groups(p.N, false);
  const int slice = per * F<1>::kPerStep * F<1>::kElems;  // the largest (the kernel's offset)
  const void* k = reinterpret_cast<const void*>(kernel);
  const size_t smem = split_part_offset(1, slice) + split_part_bytes(kMaxSplitRounds);
  if (Status st = opt_in(k, smem); !st.ok()) return st;
  // clusters resident at once: the CTAs resident per SM over all SMs, in clusters (the GPCs may
  // hold fewer; the rest run as a short second wave)
  const int clusters =
      std::max(grid_for(groups, std::max(1, ctas_per_sm(k, smem) * sm_count() / split)),
               (groups + kMaxSplitRounds - 1) / kMaxSplitRounds);
  return launched("quant_gemv_kernel (split-K)",
                  detail::launch_cluster(kernel, dim3(clusters * split), dim3(kWarps * 32), smem, s,
                                         pdl, split, p));
}

// The instance of format F for M rows. The GLU variants (xg 1: SwiGLU, 2: GeGLU) exist for M = 1
// only (batch-1 decode; one instance per format and kind, for the library's size): quant_gemv
// refuses x_glu with M > 1.
// With PDL, the one-row instances load their first steps early (EARLY), except the GLU input of
// the formats held to 64 registers (its staging needs the registers: 32-72 bytes of spills) and
// their K above 2048.
// One-row instance (xg, early): split-K where split_k and split_for say so, else whole rows.
template <class E, template <int> class F, int XG, bool EARLY>
Status launch_one_row(const Params& p, cudaStream_t s, bool pdl, bool split_k) {
  const auto [split, per] = split_k ? split_for<F>(p.N, p.K, pdl) : std::pair<int, int>(1, 0);
  if (split > 1)
    return launch_split<F>(quant_gemv_kernel<E, F, 1, XG, EARLY, true>, p, split, per, s, pdl);
  return launch_kernel(quant_gemv_kernel<E, F, 1, XG, EARLY>, 1, p, s, pdl);
}

template <class E, template <int> class F>
Status launch_format(const Params& p, int M, cudaStream_t s, bool pdl, int xg, bool split_k) {
  constexpr bool kGluEarly = F<1>::kMinCtas == 1;
  // The formats held to 64 registers load early only up to K = 2048 (SmolLM2's and Gemma 3's
  // shapes, where native flashnorm decode gained 4-10%); at Llama-3-8B's shapes a chain of
  // Q4_1 / Q5_0 GEMVs ran up to 1.6x slower with PDL and early loads than without either (kernel
  // lab), which was not split between the two.
  const bool early = pdl && (F<1>::kMinCtas == 1 || p.K <= 2048);
  if (p.glu_out) {  // the GLU in the epilogue: whole rows; early loads as the plain one-row launch
    return early
               ? launch_kernel(quant_gemv_kernel<E, F, 1, 0, true, false, true>, 1, p, s, pdl, true)
               : launch_kernel(quant_gemv_kernel<E, F, 1, 0, false, false, true>, 1, p, s, pdl,
                               true);
  }
  if (xg == 1)
    return pdl && kGluEarly ? launch_one_row<E, F, 1, kGluEarly>(p, s, pdl, split_k)
                            : launch_one_row<E, F, 1, false>(p, s, pdl, split_k);
  if (xg == 2)
    return pdl && kGluEarly ? launch_one_row<E, F, 2, kGluEarly>(p, s, pdl, split_k)
                            : launch_one_row<E, F, 2, false>(p, s, pdl, split_k);
  switch (staged_rows(M)) {
    case 1:
      return early ? launch_one_row<E, F, 0, true>(p, s, pdl, split_k)
                   : launch_one_row<E, F, 0, false>(p, s, pdl, split_k);
    case 2:
      return launch_kernel(quant_gemv_kernel<E, F, 2, 0>, 2, p, s, pdl);
    case 4:
      return launch_kernel(quant_gemv_kernel<E, F, 4, 0>, 4, p, s, pdl);
    default:
      return launch_kernel(quant_gemv_kernel<E, F, 8, 0>, 8, p, s, pdl);
  }
}

}  // namespace

size_t quant_gemv_shared_bytes(int M, int K) { return staged_bytes(staged_rows(M), K); }

int quant_block_elems(QuantType t) {
  return t == QuantType::kQ4_K || t == QuantType::kQ6_K ? 256 : 32;
}
int quant_block_bytes(QuantType t) {
  switch (t) {
    case QuantType::kQ4_0:
      return 18;
    case QuantType::kQ4_1:
      return 20;
    case QuantType::kQ5_0:
      return 22;
    case QuantType::kQ8_0:
      return 34;
    case QuantType::kQ4_K:
      return 144;
    default:
      return 210;
  }
}

int quant_gemv_split(QuantType type, int M, int N, int K, bool pdl) {
  if (M != 1 || N < 1 || K < quant_block_elems(type) || K % quant_block_elems(type) != 0) return 1;
  switch (type) {
    case QuantType::kQ4_0:
      return split_for<Q4_0>(N, K, pdl).first;
    case QuantType::kQ4_1:
      return split_for<Q4_1>(N, K, pdl).first;
    case QuantType::kQ5_0:
      return split_for<Q5_0>(N, K, pdl).first;
    case QuantType::kQ8_0:
      return split_for<Q8_0>(N, K, pdl).first;
    case QuantType::kQ4_K:
      return split_for<Q4_K>(N, K, pdl).first;
    case QuantType::kQ6_K:
      return split_for<Q6_K>(N, K, pdl).first;
    default:
      return 1;
  }
}

Status quant_gemv(const QuantGemvArgs& a, cudaStream_t s) {
  if (a.M < 1 || a.M > 8) return invalid("quant_gemv: M must be in [1, 8]");
  if (a.N < 1) return invalid("quant_gemv: N must be >= 1");
  const int be = quant_block_elems(a.type);
  if (a.K < be || a.K % be != 0)
    return invalid("quant_gemv: K must be a positive multiple of the block (32 or 256)");
  if (quant_gemv_shared_bytes(a.M, a.K) > kQuantGemvMaxSharedBytes)
    return invalid(
        "quant_gemv: the staged x, M (rounded up to 1, 2, 4, 8) * about 2.5 K bytes, exceeds 200 "
        "KiB");
  if (!a.x || !a.w || (!a.y && !a.glu_out))
    return invalid("quant_gemv: x, w and y (or glu_out) must be non-null");
  if (a.x_glu && a.M != 1) return invalid("quant_gemv: x_glu needs M == 1");
  if (a.glu_out && (a.M != 1 || a.N % 2 != 0 || a.x_glu || a.accumulate || a.y_rounded || a.y ||
                    reinterpret_cast<uintptr_t>(a.glu_out) % 2 != 0))
    return invalid(
        "quant_gemv: glu_out needs M == 1, N even, a 2-byte aligned glu_out, and no x_glu, "
        "accumulate, y_rounded or y (it is not written)");
  if (a.ldx < (a.x_glu ? 2 * int64_t(a.K) : a.K) || a.ldx % 8 != 0 || !aligned16(a.x))
    return invalid("quant_gemv: ldx >= K (2K with x_glu), ldx % 8 == 0 and x 16-byte aligned");
  if (!a.glu_out && a.ldy < a.N) return invalid("quant_gemv: ldy must be >= N");
  if (!aligned16(a.w)) return invalid("quant_gemv: w must be 16-byte aligned");
  if (a.gain && !aligned16(a.gain)) return invalid("quant_gemv: gain must be 16-byte aligned");
  const Params p{a.M,
                 a.N,
                 a.K,
                 a.x,
                 a.ldx,
                 a.gain,
                 static_cast<const uint8_t*>(a.w),
                 int64_t(a.N) * (a.K / be),
                 a.y,
                 a.ldy,
                 a.scale_rows,
                 a.eps,
                 a.accumulate,
                 a.y_rounded,
                 1,
                 0,
                 a.glu_out,
                 a.glu_kind == GluKind::kGeGLU ? 2 : 1};
  const int xg = a.x_glu ? p.glu_kind : 0;
  return by_dtype(a.dt, [&](auto e) {
    using E = decltype(e);
    switch (a.type) {
      case QuantType::kQ4_0:
        return launch_format<E, Q4_0>(p, a.M, s, a.pdl, xg, a.split_k);
      case QuantType::kQ4_1:
        return launch_format<E, Q4_1>(p, a.M, s, a.pdl, xg, a.split_k);
      case QuantType::kQ5_0:
        return launch_format<E, Q5_0>(p, a.M, s, a.pdl, xg, a.split_k);
      case QuantType::kQ8_0:
        return launch_format<E, Q8_0>(p, a.M, s, a.pdl, xg, a.split_k);
      case QuantType::kQ4_K:
        return launch_format<E, Q4_K>(p, a.M, s, a.pdl, xg, a.split_k);
      default:
        return launch_format<E, Q6_K>(p, a.M, s, a.pdl, xg, a.split_k);
    }
  });
}

}  // namespace flashnorm::kernels::cuda
