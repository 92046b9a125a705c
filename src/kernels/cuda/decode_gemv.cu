// The fused decode kernel of flashnorm_linear (LinearImpl::kDecode, linear.h): y = rstd(x) * (x
// W^T) for M <= 64 in one launch, W streamed once through tensor-core mma.sync. Design:
// docs/design.md (deferred normalization).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "elements.cuh"
#include "launch.h"
#include "pdl.cuh"
#include "ptx.cuh"
#include "reduce.cuh"

namespace flashnorm::kernels::cuda::detail {
namespace {

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

}  // namespace flashnorm::kernels::cuda::detail
