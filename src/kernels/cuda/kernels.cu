// Device kernels of flashnorm (sm_90a): RMSNorm, row rstd, post-scale, the fused decode kernel, and
// a spin kernel for race tests. Design: shared/design/flashnorm.md section 2; issue 3.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "elements.cuh"
#include "launch.h"
#include "pdl.cuh"
#include "reduce.cuh"

namespace flashnorm::kernels::cuda::detail {
namespace {

template <class E>
__device__ __forceinline__ float sumsq8(const uint4& u) {
  float f[8];
  unpack8<E>(u, f);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(f[i], f[i], s);
  return s;
}

// Streaming 16-byte load of W: read once, do not keep in L1.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}
__device__ __forceinline__ uint4 ld_nc(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
// 16-byte asynchronous copy global -> shared (cp.async, PTX ISA 7.0+): cache-global (not kept in
// L1), 256-byte L2 prefetch; valid = false zero-fills the 16 bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed cp.async groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <class E>
__device__ __forceinline__ void mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<BF16>(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<FP16>(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---- RMSNorm: one CTA per row, VPT 16-byte vectors per thread held in registers
// ------------------
template <class E, int VPT>
__global__ void rms_norm_kernel(RmsNormArgs a) {
  pdl_begin();
  using T = typename E::T;
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(a.K / 8);
  const T* x = static_cast<const T*>(a.x) + row * a.ldx;
  const T* r = a.residual ? static_cast<const T*>(a.residual) + row * a.ld_res : nullptr;
  T* ro = a.residual ? static_cast<T*>(a.residual_out) + row * a.ld_res_out : nullptr;
  T* y = static_cast<T*>(a.y) + row * a.ldy;
  uint4 h[VPT];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      h[i] = ld_nc(x + v * 8);
      if (r) {
        float fx[8], fr[8];
        unpack8<E>(h[i], fx);
        unpack8<E>(ld_nc(r + v * 8), fr);
#pragma unroll
        for (int j = 0; j < 8; ++j) fx[j] += fr[j];
        h[i] = pack8<E>(fx);  // the stored (rounded) sum is what gets normalized
        *reinterpret_cast<uint4*>(ro + v * 8) = h[i];
      }
      ss += sumsq8<E>(h[i]);
    }
  }
  __shared__ float red[32];
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
    t = warp_sum(t);
    if (threadIdx.x == 0) red[0] = t;
  }
  __syncthreads();
  const float rstd = 1.f / sqrtf(red[0] / static_cast<float>(a.K) + a.eps);
  const T* g = static_cast<const T*>(a.gain);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      float f[8];
      unpack8<E>(h[i], f);
      if (g) {
        float fg[8];
        unpack8<E>(ld_nc(g + v * 8), fg);
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = f[j] * rstd * (a.gain_one_plus ? 1.f + fg[j] : fg[j]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] *= rstd;
      }
      *reinterpret_cast<uint4*>(y + v * 8) = pack8<E>(f);
    }
  }
}

// ---- rstd per row: one warp per row (grid-stride over the rows) -------------------------------
// Launched with PDL (the PDL prefill), it first waits for the preceding kernel
// (griddepcontrol.wait: x may be that kernel's output, and it may still read rstd) unless wait_prev
// is 0 (the race test's --no-join run); launched without the attribute the wait is a no-op. It then
// lets the next kernel launch at once (griddepcontrol.launch_dependents), which takes effect
// whenever that kernel is launched with PDL (after the two-stream and row_rstd launches none is);
// such a kernel must itself wait before reading rstd. delay > 0 (race tests): every warp spins that
// many SM clocks, once, before it reads x and writes its rows.
template <class E>
__global__ void rstd_kernel(const typename E::T* x, int64_t ldx, int M, int K, float eps,
                            float* rstd, long long delay, int wait_prev) {
  if (wait_prev) asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int lane = threadIdx.x & 31;
  const int nvec = K / 8;
  if (delay > 0) {
    const long long t0 = clock64();
    while (clock64() - t0 < delay) {
    }
  }
  for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < M; row += warps) {
    const typename E::T* xr = x + static_cast<int64_t>(row) * ldx;
    float s = 0.f;
    int v = lane;
    for (; v + 96 < nvec; v += 128) {
      uint4 a = ld_nc(xr + v * 8), b = ld_nc(xr + (v + 32) * 8), c = ld_nc(xr + (v + 64) * 8),
            d = ld_nc(xr + (v + 96) * 8);
      s += sumsq8<E>(a) + sumsq8<E>(b) + sumsq8<E>(c) + sumsq8<E>(d);
    }
    for (; v < nvec; v += 32) s += sumsq8<E>(ld_nc(xr + v * 8));
    s = warp_sum(s);
    if (lane == 0) rstd[row] = 1.f / sqrtf(s / static_cast<float>(K) + eps);
  }
}

// ---- post-scale (two-stream scheme, prefill fallback)
// ---------------------------------------------
// fp32 output (LM-head logits): y[m, n] = (mask[n] ? y * rstd[m] : y) + bias[n].
template <class E>
__global__ void postscale_f32_kernel(float* y, int64_t ldy, int M, int N, const float* rstd,
                                     const typename E::T* bias, const uint8_t* mask) {
  const int64_t total = static_cast<int64_t>(M) * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / N), n = static_cast<int>(i % N);
    float& v = y[static_cast<int64_t>(m) * ldy + n];
    const bool sc = mask ? mask[n] != 0 : true;
    v = (sc ? v * rstd[m] : v) + (bias ? E::to_f(bias[n]) : 0.f);
  }
}

template <class E>
__global__ void postscale_kernel(typename E::T* y, int64_t ldy, int M, int N, const float* rstd,
                                 const typename E::T* bias, const uint8_t* mask) {
  using T = typename E::T;
  const int groups = (N + 7) / 8;
  const int64_t total = static_cast<int64_t>(M) * groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / groups);
    const int n0 = static_cast<int>(i % groups) * 8;
    const float r = rstd[m];
    T* yr = y + static_cast<int64_t>(m) * ldy;
    if (n0 + 8 <= N) {
      float f[8];
      unpack8<E>(*reinterpret_cast<const uint4*>(yr + n0), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const bool sc = mask ? mask[n0 + j] != 0 : true;
        f[j] = (sc ? f[j] * r : f[j]) + (bias ? E::to_f(bias[n0 + j]) : 0.f);
      }
      *reinterpret_cast<uint4*>(yr + n0) = pack8<E>(f);
    } else {
      for (int n = n0; n < N; ++n) {
        const bool sc = mask ? mask[n] != 0 : true;
        float f = E::to_f(yr[n]);
        yr[n] = E::from_f((sc ? f * r : f) + (bias ? E::to_f(bias[n]) : 0.f));
      }
    }
  }
}

// Lets a PDL-launched successor start at once (it must wait for this kernel before touching
// anything), so a delayed producer also tests the successor's griddepcontrol.wait.
__global__ void spin_kernel(long long cycles) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// ---- the fused decode kernel ------------------------------------------------------------------
// CTA = RW row-warps x KW k-warps (KW = p.kw, runtime). Row-warp wr of the CTA owns 16 output
// features (W rows n0 .. n0+15); k-warp wk owns a contiguous slice of the CTA's K range (whole
// 32-wide chunks, balanced). Each warp multiplies its 16 W rows with the MT*8 padded x rows over
// its slice with mma.m16n8k16: A = W rows (streamed once from HBM with 16-byte
// ld.global.nc.L1::no_allocate), B = x rows (16-byte loads through L1; x is tiny and L2/L1
// resident, row-warps of a CTA share it). The k order inside each 32-wide chunk is permuted
// identically for A and B so that every thread's fragment is one 16-byte load (a dot product does
// not care about the order of k):
//   logical k (2q+j) of sub-step s -> physical k0 + 8q + 4s + j,  (2q+8+j) -> k0 + 8q + 4s + 2 + j.
// Memory-level parallelism: loads come in batches of U chunks (2U W loads + U*MT x loads per
// thread) and the next batch is issued before the current one is multiplied (register double
// buffer), so a warp keeps two batches in flight. The sum of squares of x is accumulated from the
// same B fragments (row-warp 0 of each k slice), so no second launch and no second pass over x.
// S > 0 (M <= 8, x in dtype only): W goes through a per-thread ring of S batches in shared memory
// with cp.async instead of the register double buffer, so S batches are in flight per warp (two
// with registers) and the registers they took are free; each thread reads back only the 16-byte
// slots it copied itself, after cp.async.wait_group, so no barrier is needed.
// Joins: __syncthreads between the smem partials and the epilogue (intra-CTA, fixed reduction
// order); for split-K over CTAs (gridDim.y > 1), each CTA publishes its partials, __threadfence +
// atomicAdd on the row block's counter, and the last arriving CTA (which then issues its own
// __threadfence before reading) reduces in fixed order and resets the counter.
template <class E, int MT>
struct DecodeTraits {
  static constexpr int U = MT == 1 ? 4 : (MT == 2 ? 2 : (MT == 4 ? 2 : 1));
  static constexpr int kMinBlocks = MT <= 2 ? 2 : 1;
};

// One batch of U 32-wide chunks from k on; kq = k + q * 8 (this thread's 8-group) and ke the end of
// the warp's K range. kPartial (the last batch of a warp may be partial): 8-groups at or past ke
// load zeros; full batches load without the per-chunk test.
template <class E, int MT, bool kPartial>
__device__ __forceinline__ void decode_load_w(int k, int kq, int ke, bool vA, bool vB,
                                              const typename E::T* wa, const typename E::T* wb,
                                              uint4 (&A)[DecodeTraits<E, MT>::U],
                                              uint4 (&B)[DecodeTraits<E, MT>::U]) {
  const uint4 z4 = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < DecodeTraits<E, MT>::U; ++u) {
    const bool in = !kPartial || kq + u * 32 < ke;
    A[u] = vA && in ? ld_stream(wa + k + u * 32) : z4;
    B[u] = vB && in ? ld_stream(wb + k + u * 32) : z4;
  }
}

// x fragment load of the decode kernel: from global memory (ld.global.nc), or, with the GLU input
// (XG != 0), from the CTA's staged x in shared memory (generic load).
template <int XG>
__device__ __forceinline__ uint4 ld_x(const void* p) {
  if constexpr (XG == 0) {
    return ld_nc(p);
  } else {
    return *reinterpret_cast<const uint4*>(p);
  }
}

// The x fragments of one batch from k on (the W loads' batch and predicate: full, or 8-groups at or
// past ke load zeros).
template <class E, int MT, int XG>
__device__ __forceinline__ void decode_load_x(int k, int kq, int ke, bool full,
                                              const bool (&vx)[MT],
                                              const typename E::T* const (&xr)[MT],
                                              uint4 (&X)[DecodeTraits<E, MT>::U][MT]) {
  const uint4 z4 = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < DecodeTraits<E, MT>::U; ++u) {
    const bool in = full || kq + u * 32 < ke;
#pragma unroll
    for (int t = 0; t < MT; ++t) X[u][t] = vx[t] && in ? ld_x<XG>(xr[t] + k + u * 32) : z4;
  }
}

template <class E, int MT, int XG, bool kPartial>
__device__ __forceinline__ void decode_load(
    int k, int kq, int ke, bool vA, bool vB, const typename E::T* wa, const typename E::T* wb,
    const bool (&vx)[MT], const typename E::T* const (&xr)[MT], uint4 (&A)[DecodeTraits<E, MT>::U],
    uint4 (&B)[DecodeTraits<E, MT>::U], uint4 (&X)[DecodeTraits<E, MT>::U][MT]) {
  decode_load_w<E, MT, kPartial>(k, kq, ke, vA, vB, wa, wb, A, B);
  decode_load_x<E, MT, XG>(k, kq, ke, !kPartial, vx, xr, X);
}

// One batch's products: acc[t] += W rows (A, B: rows g and g + 8) x x rows (X), and (do_ss) the
// sums of squares of the x rows from the same fragments.
template <class E, int MT>
__device__ __forceinline__ void decode_mma(bool do_ss, const uint4 (&A)[DecodeTraits<E, MT>::U],
                                           const uint4 (&B)[DecodeTraits<E, MT>::U],
                                           const uint4 (&X)[DecodeTraits<E, MT>::U][MT],
                                           float (&acc)[MT][4], float (&ssa)[MT]) {
#pragma unroll
  for (int u = 0; u < DecodeTraits<E, MT>::U; ++u) {
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      if (do_ss) ssa[t] += sumsq8<E>(X[u][t]);
      mma16816<E>(acc[t], A[u].x, B[u].x, A[u].y, B[u].y, X[u][t].x, X[u][t].y);
      mma16816<E>(acc[t], A[u].z, B[u].z, A[u].w, B[u].w, X[u][t].z, X[u][t].w);
    }
  }
}

template <class E, int MT, int RW, int XG, int S>
__global__ void __launch_bounds__(kDecodeMaxThreads, DecodeTraits<E, MT>::kMinBlocks)
    decode_kernel(DecodeParams p) {
  static_assert(S == 0 || (MT == 1 && XG == 0), "the cp.async ring exists for M <= 8, x in dtype");
  using T = typename E::T;
  constexpr int MP = MT * 8;
  constexpr int ROWS = 16 * RW;
  constexpr int LD = MP + 4;  // padded smem row (bank conflicts)
  constexpr int U = DecodeTraits<E, MT>::U;
  extern __shared__ float dsmem[];  // [KW][ROWS * LD] partial products, then [KW][MP] sums of sq.
  __shared__ int s_last;
  const int KW = p.kw;
  float* red = dsmem;
  float* ss_s = dsmem + KW * ROWS * LD;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wr = warp % RW, wk = warp / RW;
  const int g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x;
  const int nw = rb * ROWS + wr * 16;  // first W row of this warp

  const int kc_beg = blockIdx.y * p.kchunk;
  const int kc_end = min(p.K, kc_beg + p.kchunk);
  const int nch = (kc_end - kc_beg + 31) / 32;
  const int kb = kc_beg + (wk * nch / KW) * 32;
  const int ke = min(kc_end, kc_beg + ((wk + 1) * nch / KW) * 32);

  const int rowA = nw + g, rowB = nw + g + 8;
  const bool vA = rowA < p.N, vB = rowB < p.N;
  const T* wa = static_cast<const T*>(p.w) + static_cast<int64_t>(vA ? rowA : 0) * p.ldw + q * 8;
  const T* wb = static_cast<const T*>(p.w) + static_cast<int64_t>(vB ? rowB : 0) * p.ldw + q * 8;
  const T* xr[MT];
  bool vx[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const int m = t * 8 + g;
    vx[t] = m < p.M;
    xr[t] = static_cast<const T*>(p.x) + static_cast<int64_t>(vx[t] ? m : 0) * p.ldx + q * 8;
  }
  float acc[MT][4];
  float ssa[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    ssa[t] = 0.f;
  }
  const uint4 z4 = make_uint4(0, 0, 0, 0);
  const bool do_ss = (wr == 0);

  // Batches of U chunks over [kb, ke); the last one may be partial (its missing chunks and 8-groups
  // load zeros, which add nothing to the products or the sums of squares), so every load of the
  // warp is issued one batch ahead: no dependent round trip for a remainder of chunks.
  const int nb = max(0, (ke - kb + 32 * U - 1) / (32 * U));
  const int nfull = max(0, (ke - kb) / (32 * U));  // batches before a partial last one
  const int q8 = q * 8;
  uint4 A[U], B[U], X[U][MT];
  // PDL: W (never written by the preceding kernel) is requested before the wait; x, y and the
  // workspace are touched only after griddepcontrol.wait (preceding grid complete, memory flushed).
  // Without PDL both instructions are no-ops.
  // S > 0: the ring after the partials and sums of squares; slot (stage, u, A|B) of thread t at
  // uint4 index ((stage * U + u) * 2 + A|B) * blockDim.x + t (a warp's 16-byte slots contiguous).
  uint4* ring = reinterpret_cast<uint4*>(ss_s + KW * MP) + threadIdx.x;
  const int nthr = blockDim.x;
  auto ring_issue = [&](int j) {  // batch j of this warp into stage j % S
    const int k = kb + j * 32 * U;
    uint4* slot = ring + (j % (S > 0 ? S : 1)) * 2 * U * nthr;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in = j < nfull || k + q8 + u * 32 < ke;
      cp_async16(slot + (2 * u) * nthr, vA && in ? wa + k + u * 32 : wa, vA && in);
      cp_async16(slot + (2 * u + 1) * nthr, vB && in ? wb + k + u * 32 : wb, vB && in);
    }
  };
  if constexpr (S > 0) {
#pragma unroll
    for (int j = 0; j < S - 1; ++j) {
      if (j < nb) ring_issue(j);
      cp_async_commit();  // one group per batch, empty ones included: wait_group counts them
    }
  } else if (nfull > 0) {
    decode_load_w<E, MT, false>(kb, kb + q8, ke, vA, vB, wa, wb, A, B);
  } else if (nb > 0) {
    decode_load_w<E, MT, true>(kb, kb + q8, ke, vA, vB, wa, wb, A, B);
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if constexpr (XG != 0) {
    // GLU input: x[m, k] = round(act(gate[m, k]) * up[m, k]) from the fp32 gate|up rows, staged
    // once per CTA in shared memory for the CTA's K range (the standalone GLU kernel's function).
    T* xs = reinterpret_cast<T*>(ss_s + KW * MP);
    const int klen = kc_end - kc_beg, n8 = klen / 8;
    const float* gu = static_cast<const float*>(p.x);
    for (int e = threadIdx.x; e < p.M * n8; e += blockDim.x) {
      const int m = e / n8, k = kc_beg + (e % n8) * 8;
      const float4* gp = reinterpret_cast<const float4*>(gu + static_cast<int64_t>(m) * p.ldx + k);
      const float4* up =
          reinterpret_cast<const float4*>(gu + static_cast<int64_t>(m) * p.ldx + p.K + k);
      const float4 g0 = gp[0], g1 = gp[1], u0 = up[0], u1 = up[1];
      const float f[8] = {glu_value<XG == 2>(g0.x, u0.x), glu_value<XG == 2>(g0.y, u0.y),
                          glu_value<XG == 2>(g0.z, u0.z), glu_value<XG == 2>(g0.w, u0.w),
                          glu_value<XG == 2>(g1.x, u1.x), glu_value<XG == 2>(g1.y, u1.y),
                          glu_value<XG == 2>(g1.z, u1.z), glu_value<XG == 2>(g1.w, u1.w)};
      *reinterpret_cast<uint4*>(xs + m * klen + (k - kc_beg)) = pack8<E>(f);
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < MT; ++t) xr[t] = xs + (vx[t] ? t * 8 + g : 0) * klen - kc_beg + q * 8;
  }
  if (nb > 0) decode_load_x<E, MT, XG>(kb, kb + q8, ke, nfull > 0, vx, xr, X);
  if constexpr (S > 0) {
    for (int bi = 0; bi < nb; ++bi) {
      if (bi + S - 1 < nb) ring_issue(bi + S - 1);  // into the stage read in iteration bi - 1
      cp_async_commit();
      const bool more = bi + 1 < nb;
      const int kn = kb + (bi + 1) * 32 * U;
      uint4 Xn[U][MT];
      if (more) decode_load_x<E, MT, XG>(kn, kn + q8, ke, bi + 1 < nfull, vx, xr, Xn);
      cp_async_wait<S - 1>();  // groups 0 .. bi (this thread's) have landed
      const uint4* slot = ring + (bi % S) * 2 * U * nthr;
#pragma unroll
      for (int u = 0; u < U; ++u) A[u] = slot[(2 * u) * nthr], B[u] = slot[(2 * u + 1) * nthr];
      decode_mma<E, MT>(do_ss, A, B, X, acc, ssa);
      if (more) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int t = 0; t < MT; ++t) X[u][t] = Xn[u][t];
        }
      }
    }
  }
  for (int bi = 0; S == 0 && bi < nb; ++bi) {
    uint4 An[U], Bn[U], Xn[U][MT];
    const bool more = bi + 1 < nb;
    const int kn = kb + (bi + 1) * 32 * U;
    if (bi + 1 < nfull) {
      decode_load<E, MT, XG, false>(kn, kn + q8, ke, vA, vB, wa, wb, vx, xr, An, Bn, Xn);
    } else if (more) {
      decode_load<E, MT, XG, true>(kn, kn + q8, ke, vA, vB, wa, wb, vx, xr, An, Bn, Xn);
    }
    decode_mma<E, MT>(do_ss, A, B, X, acc, ssa);
    if (more) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        A[u] = An[u], B[u] = Bn[u];
#pragma unroll
        for (int t = 0; t < MT; ++t) X[u][t] = Xn[u][t];
      }
    }
  }
  // intra-CTA reduction through shared memory
  float* rr = red + wk * ROWS * LD;
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    float s = ssa[t];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (do_ss && q == 0) ss_s[wk * MP + t * 8 + g] = s;
    rr[(wr * 16 + g) * LD + t * 8 + 2 * q] = acc[t][0];
    rr[(wr * 16 + g) * LD + t * 8 + 2 * q + 1] = acc[t][1];
    rr[(wr * 16 + g + 8) * LD + t * 8 + 2 * q] = acc[t][2];
    rr[(wr * 16 + g + 8) * LD + t * 8 + 2 * q + 1] = acc[t][3];
  }
  __syncthreads();  // join: partial products and sums of squares of every warp are in smem

  const int n_base = rb * ROWS;
  const int nthreads = blockDim.x;
  const int mrows = min(p.M, MP);
  const T* bias = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  auto finish = [&](int r, int m, float v, float ss) {
    const int n = n_base + r;
    const float rstd = 1.f / sqrtf(ss / static_cast<float>(p.K) + p.eps);
    const bool sc = p.mask ? p.mask[n] != 0 : true;
    float o = sc ? v * rstd : v;
    if (bias) o += E::to_f(bias[n]);
    if (p.accumulate) {  // fused residual add (y fp32)
      float& yv = static_cast<float*>(p.y)[static_cast<int64_t>(m) * p.ldy + n];
      const float nv = yv + o;
      yv = nv;
      if (p.y_rounded) {
        static_cast<T*>(p.y_rounded)[static_cast<int64_t>(m) * p.ldy + n] = E::from_f(nv);
      }
    } else if (p.y_f32) {
      static_cast<float*>(p.y)[static_cast<int64_t>(m) * p.ldy + n] = o;
    } else {
      y[static_cast<int64_t>(m) * p.ldy + n] = E::from_f(o);
    }
  };

  if (gridDim.y == 1) {
    for (int e = threadIdx.x; e < ROWS * mrows; e += nthreads) {
      const int r = e % ROWS, m = e / ROWS;
      if (n_base + r >= p.N) continue;
      float v = 0.f, ss = 0.f;
      for (int j = 0; j < KW; ++j) v += red[j * ROWS * LD + r * LD + m], ss += ss_s[j * MP + m];
      finish(r, m, v, ss);
    }
    return;
  }

  // split-K: publish partials, then the last CTA of this row block reduces them
  const int nrb = gridDim.x;
  for (int e = threadIdx.x; e < ROWS * mrows; e += nthreads) {
    const int r = e % ROWS, m = e / ROWS;
    float v = 0.f;
    for (int j = 0; j < KW; ++j) v += red[j * ROWS * LD + r * LD + m];
    p.part[(static_cast<int64_t>(blockIdx.y) * MP + m) * p.n_pad + n_base + r] = v;
  }
  for (int m = threadIdx.x; m < mrows; m += nthreads) {
    float ss = 0.f;
    for (int j = 0; j < KW; ++j) ss += ss_s[j * MP + m];
    p.ss_part[(static_cast<int64_t>(blockIdx.y) * nrb + rb) * MP + m] = ss;
  }
  __threadfence();  // release: partials visible device-wide before the arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(&p.counters[rb], 1u);
    s_last = (prev == gridDim.y - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();  // acquire side of the join
  for (int e = threadIdx.x; e < ROWS * mrows; e += nthreads) {
    const int r = e % ROWS, m = e / ROWS;
    if (n_base + r >= p.N) continue;
    float v = 0.f, ss = 0.f;
    for (int j = 0; j < static_cast<int>(gridDim.y); ++j) {
      v += __ldcg(&p.part[(static_cast<int64_t>(j) * MP + m) * p.n_pad + n_base + r]);
      ss += __ldcg(&p.ss_part[(static_cast<int64_t>(j) * nrb + rb) * MP + m]);
    }
    finish(r, m, v, ss);
  }
  if (threadIdx.x == 0) p.counters[rb] = 0u;  // ready for the next (stream-ordered) launch
}

template <class E, int MT, int RW, int XG, int S = 0>
cudaError_t decode_launch(const DecodeParams& p, cudaStream_t s) {
  static const cudaError_t attr = cudaFuncSetAttribute(decode_kernel<E, MT, RW, XG, S>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       S > 0 ? kDecodeMaxSmemRing : kDecodeMaxSmem);
  if (attr != cudaSuccess) return attr;
  return launch_ex(decode_kernel<E, MT, RW, XG, S>, dim3((p.N + 16 * RW - 1) / (16 * RW), p.ksplit),
                   dim3(RW * p.kw * 32), decode_smem_bytes(p.M, p.rw, p.kw, XG ? p.kchunk : 0, S),
                   s, p.pdl != 0, p);
}

// The GLU input exists for M <= 16 (MT <= 2), the engine's decode passes; the cp.async ring
// (stages 3 or 4) for M <= 8 with x in dtype.
template <class E, int MT, int RW>
cudaError_t decode_launch_xg(const DecodeParams& p, cudaStream_t s) {
  if (p.stages != 0) {
    if constexpr (MT == 1) {
      if (p.x_glu != 0) return cudaErrorInvalidValue;
      if (p.stages == 3) return decode_launch<E, MT, RW, 0, 3>(p, s);
      if (p.stages == 4) return decode_launch<E, MT, RW, 0, 4>(p, s);
    }
    return cudaErrorInvalidValue;
  }
  if constexpr (MT <= 2) {
    if (p.x_glu == 1) return decode_launch<E, MT, RW, 1>(p, s);
    if (p.x_glu == 2) return decode_launch<E, MT, RW, 2>(p, s);
  }
  if (p.x_glu != 0) return cudaErrorInvalidValue;
  return decode_launch<E, MT, RW, 0>(p, s);
}

template <class E, int MT>
cudaError_t decode_dispatch_rw(const DecodeParams& p, cudaStream_t s) {
  switch (p.rw) {
    case 1:
      return decode_launch_xg<E, MT, 1>(p, s);
    case 2:
      return decode_launch_xg<E, MT, 2>(p, s);
    case 4:
      return decode_launch_xg<E, MT, 4>(p, s);
    default:
      return cudaErrorInvalidValue;
  }
}

template <class E>
cudaError_t decode_dispatch(const DecodeParams& p, cudaStream_t s) {
  switch (decode_mp(p.M)) {
    case 8:
      return decode_dispatch_rw<E, 1>(p, s);
    case 16:
      return decode_dispatch_rw<E, 2>(p, s);
    case 32:
      return decode_dispatch_rw<E, 4>(p, s);
    default:
      return decode_dispatch_rw<E, 8>(p, s);
  }
}

template <class E>
cudaError_t rms_dispatch(const RmsNormArgs& a, cudaStream_t s) {
  const int nvec = static_cast<int>(a.K / 8);
  int threads = std::min(1024, std::max(32, (nvec + 31) / 32 * 32));
  const int vpt = (nvec + threads - 1) / threads;
  const dim3 grid(static_cast<unsigned>(a.M));
  if (vpt <= 1) return launch_ex(rms_norm_kernel<E, 1>, grid, threads, 0, s, a.pdl, a);
  if (vpt <= 2) return launch_ex(rms_norm_kernel<E, 2>, grid, threads, 0, s, a.pdl, a);
  if (vpt <= 4) return launch_ex(rms_norm_kernel<E, 4>, grid, threads, 0, s, a.pdl, a);
  return cudaErrorInvalidValue;
}

}  // namespace

int decode_mp(int M) { return M <= 8 ? 8 : M <= 16 ? 16 : M <= 32 ? 32 : 64; }

size_t decode_smem_bytes(int M, int rw, int kw, int x_stage_k, int stages) {
  const int mp = decode_mp(M);
  const size_t ring =
      static_cast<size_t>(stages) * 2 * DecodeTraits<BF16, 1>::U * 16 * rw * kw * 32;
  return static_cast<size_t>(kw) * (16 * rw * (mp + 4) + mp) * sizeof(float) +
         static_cast<size_t>(M) * x_stage_k * 2 + ring;
}

cudaError_t launch_decode(DType dt, const DecodeParams& p, cudaStream_t s) {
  return dt == DType::kBF16 ? decode_dispatch<BF16>(p, s) : decode_dispatch<FP16>(p, s);
}

cudaError_t launch_rms_norm(const RmsNormArgs& a, cudaStream_t s) {
  return a.dtype == DType::kBF16 ? rms_dispatch<BF16>(a, s) : rms_dispatch<FP16>(a, s);
}

cudaError_t launch_rstd(DType dt, int64_t M, int64_t K, const void* x, int64_t ldx, float eps,
                        float* rstd, cudaStream_t s, int max_ctas, long long delay, bool pdl,
                        bool wait_prev) {
  const int rows_per_cta = 8;
  int64_t ctas = (M + rows_per_cta - 1) / rows_per_cta;
  if (max_ctas > 0) ctas = std::min<int64_t>(ctas, max_ctas);
  const dim3 grid(static_cast<unsigned>(ctas));
  const int w = wait_prev ? 1 : 0;
  if (dt == DType::kBF16)
    return launch_ex(rstd_kernel<BF16>, grid, dim3(256), 0, s, pdl,
                     static_cast<const __nv_bfloat16*>(x), ldx, static_cast<int>(M),
                     static_cast<int>(K), eps, rstd, delay, w);
  return launch_ex(rstd_kernel<FP16>, grid, dim3(256), 0, s, pdl, static_cast<const __half*>(x),
                   ldx, static_cast<int>(M), static_cast<int>(K), eps, rstd, delay, w);
}

cudaError_t launch_postscale(DType dt, int64_t M, int64_t N, void* y, int64_t ldy,
                             const float* rstd, const void* bias, const uint8_t* mask,
                             cudaStream_t s, bool y_f32) {
  const int64_t total = M * ((N + 7) / 8);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 132 * 16));
  if (y_f32) {
    const int64_t n = M * N;
    const unsigned b = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 16));
    if (dt == DType::kBF16)
      postscale_f32_kernel<BF16><<<b, 256, 0, s>>>(static_cast<float*>(y), ldy, static_cast<int>(M),
                                                   static_cast<int>(N), rstd,
                                                   static_cast<const __nv_bfloat16*>(bias), mask);
    else
      postscale_f32_kernel<FP16><<<b, 256, 0, s>>>(static_cast<float*>(y), ldy, static_cast<int>(M),
                                                   static_cast<int>(N), rstd,
                                                   static_cast<const __half*>(bias), mask);
    return cudaGetLastError();
  }
  if (dt == DType::kBF16)
    postscale_kernel<BF16><<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(y), ldy,
                                                  static_cast<int>(M), static_cast<int>(N), rstd,
                                                  static_cast<const __nv_bfloat16*>(bias), mask);
  else
    postscale_kernel<FP16><<<blocks, 256, 0, s>>>(static_cast<__half*>(y), ldy, static_cast<int>(M),
                                                  static_cast<int>(N), rstd,
                                                  static_cast<const __half*>(bias), mask);
  return cudaGetLastError();
}

namespace {
__device__ __forceinline__ float hash_uniform(uint64_t x) {  // splitmix64 -> [-1, 1)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (2.f / 16777216.f) - 1.f;
}
template <class E>
__global__ void fill_kernel(typename E::T* p, size_t n, uint64_t seed, float scale, size_t row_len,
                            float row_spread) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = hash_uniform(seed * 0x100000001b3ull + i) * scale;
    if (row_spread > 0.f) v *= exp2f(hash_uniform(~seed + i / row_len) * row_spread);
    p[i] = E::from_f(v);
  }
}
}  // namespace

cudaError_t launch_fill_random(DType dt, void* p, size_t n, uint64_t seed, float scale,
                               size_t row_len, float row_spread, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 132 * 32));
  if (dt == DType::kBF16)
    fill_kernel<BF16><<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale,
                                             row_len ? row_len : 1, row_spread);
  else
    fill_kernel<FP16><<<blocks, 256, 0, s>>>(static_cast<__half*>(p), n, seed, scale,
                                             row_len ? row_len : 1, row_spread);
  return cudaGetLastError();
}

cudaError_t launch_spin(long long cycles, cudaStream_t s) {
  spin_kernel<<<1, 1, 0, s>>>(cycles);
  return cudaGetLastError();
}

}  // namespace flashnorm::kernels::cuda::detail
