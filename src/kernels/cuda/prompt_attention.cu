// Prompt attention on tensor cores (attention_tiled; API: include/flashnorm/kernels/cuda/
// engine_ops.h): one CTA of 4 warps per (head, tile of 64 queries), keys in tiles of kKeys, scores
// and P V by mma.sync m16n8k16 with fp16 operands and fp32 accumulators, online softmax in fp32
// (FlashAttention-2, Dao 2023, without its pipelining). Queries are scaled by scale * log2(e)
// before rounding to fp16, so the softmax runs on exp2; the KV cache's fp32 rows are rounded to
// fp16 as they are staged in shared memory. Causal and sliding-window masks as attention_kernel's
// (attend.cuh's first_key); a query row sees at least its own key, so no row's sum is zero.
#include <cuda_fp16.h>

#include <cmath>

#include "attend.cuh"
#include "engine_op.cuh"
#include "shared_memory.h"

namespace flashnorm::kernels::cuda {
namespace {

constexpr int kQueries = 64;  // queries per CTA: 16 per warp
constexpr int kWarps = 4;
constexpr int kPad = 8;  // halves after each shared-memory row: fragment loads without conflicts

template <int D>
struct Tile {
  static constexpr int kKeys = D > 128 ? 32 : 64;  // keys per tile (registers: S and O per warp)
  static constexpr int kQStride = D + kPad, kKStride = D + kPad, kVStride = kKeys + kPad;
  // Q [kQueries][kQStride], K [kKeys][kKStride], V transposed [D][kVStride], all fp16
  static constexpr size_t kSmem =
      sizeof(__half) *
      (size_t(kQueries) * kQStride + size_t(kKeys) * kKStride + size_t(D) * kVStride);
};

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t lds32(const __half* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// c += a b for one m16n8k16 tile (PTX ISA, "Matrix Fragments for mma.m16n8k16"): a[0..3] rows
// g / g+8, columns 2t.. / 2t+8..; b[0..1] rows 2t.. / 2t+8.., column g; c rows g / g+8, columns
// 2t, 2t+1 (g = lane / 4, t = lane % 4).
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class E, int D>
__global__ void __launch_bounds__(kWarps * 32) attention_tiled_kernel(AttentionArgs a) {
  using TL = Tile<D>;
  constexpr int KK = TL::kKeys, NT = KK / 8, DT = D / 8;
  pdl_begin();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* qs = reinterpret_cast<__half*>(smem_raw);
  __half* ks = qs + kQueries * TL::kQStride;
  __half* vt = ks + KK * TL::kKStride;
  const int h = blockIdx.x, t0 = blockIdx.y * kQueries, warp = threadIdx.x / 32,
            lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int nq = a.n_head * D, nkv = a.n_head_kv * D, kh = h / (a.n_head / a.n_head_kv);
  const int pos0 = *a.pos, t_last = min(t0 + kQueries, a.T) - 1;
  const int k_begin = detail::first_key(pos0 + t0 + 1, a.window), k_end = pos0 + t_last + 1;

  // the query tile, scaled for exp2, rows past T zero
  const float qscale = a.scale * 1.4426950408889634f;
  for (int i = threadIdx.x; i < kQueries * D / 4; i += blockDim.x) {
    const int r = i / (D / 4), c = i % (D / 4) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (t0 + r < a.T) v = *reinterpret_cast<const float4*>(a.q + int64_t(t0 + r) * nq + h * D + c);
    uint2 p = {pack_half2(v.x * qscale, v.y * qscale), pack_half2(v.z * qscale, v.w * qscale)};
    *reinterpret_cast<uint2*>(qs + r * TL::kQStride + c) = p;
  }

  const int r0 = warp * 16;  // this warp's first query row in the tile
  const int row_t[2] = {t0 + r0 + g, t0 + r0 + g + 8};
  int row_vis[2], row_first[2];
  for (int i = 0; i < 2; ++i) {
    row_vis[i] = pos0 + row_t[i] + 1;
    row_first[i] = detail::first_key(row_vis[i], a.window);
  }
  const int warp_last_key = pos0 + t0 + r0 + 15;                               // its last row's
  const int warp_first_key = detail::first_key(pos0 + t0 + r0 + 1, a.window);  // its first row's
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[DT][4];
#pragma unroll
  for (int n = 0; n < DT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  const float* kbase = a.k_cache + kh * D;
  const float* vbase = a.v_cache + kh * D;
  for (int kb = k_begin; kb < k_end; kb += KK) {
    __syncthreads();  // the previous tile's K and V are no longer read
    // stage keys kb .. kb + KK - 1 (zeros past k_end): per warp and step, 4 key pairs x 32 columns
    constexpr int kColBlocks = D / 32, kBlocks = kColBlocks * (KK / 8);
    for (int b = warp; b < kBlocks; b += kWarps) {
      const int key = (b / kColBlocks) * 8 + (lane / 8) * 2,
                c = (b % kColBlocks) * 32 + lane % 8 * 4;
      float4 kv[2], vv[2];
      for (int j = 0; j < 2; ++j) {
        kv[j] = vv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (kb + key + j < k_end) {
          const int64_t off = int64_t(kb + key + j) * nkv + c;
          kv[j] = *reinterpret_cast<const float4*>(kbase + off);
          vv[j] = *reinterpret_cast<const float4*>(vbase + off);
        }
        *reinterpret_cast<uint2*>(ks + (key + j) * TL::kKStride + c) =
            uint2{pack_half2(kv[j].x, kv[j].y), pack_half2(kv[j].z, kv[j].w)};
      }
      __half* vcol = vt + c * TL::kVStride + key;
      *reinterpret_cast<uint32_t*>(vcol + 0 * TL::kVStride) = pack_half2(vv[0].x, vv[1].x);
      *reinterpret_cast<uint32_t*>(vcol + 1 * TL::kVStride) = pack_half2(vv[0].y, vv[1].y);
      *reinterpret_cast<uint32_t*>(vcol + 2 * TL::kVStride) = pack_half2(vv[0].z, vv[1].z);
      *reinterpret_cast<uint32_t*>(vcol + 3 * TL::kVStride) = pack_half2(vv[0].w, vv[1].w);
    }
    __syncthreads();
    // every key of the tile after this warp's last row or before its first row's window: skip
    if (kb > warp_last_key || kb + KK <= warp_first_key) continue;

    // S = Q K^T for the warp's 16 rows and the tile's KK keys
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int k0 = 0; k0 < D; k0 += 16) {
      const __half* qa = qs + (r0 + g) * TL::kQStride + k0 + 2 * tq;
      const uint32_t af[4] = {lds32(qa), lds32(qa + 8 * TL::kQStride), lds32(qa + 8),
                              lds32(qa + 8 * TL::kQStride + 8)};
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const __half* kp = ks + (j * 8 + g) * TL::kKStride + k0 + 2 * tq;
        mma16816(s[j], af, lds32(kp), lds32(kp + 8));
      }
    }
    // masks, then the online softmax per row (rows g and g + 8; a row's 4 threads share it)
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2, key = kb + j * 8 + 2 * tq + e % 2;
        if (key >= row_vis[i] || key < row_first[i]) s[j][e] = -INFINITY;
        tile_max[i] = fmaxf(tile_max[i], s[j][e]);
      }
    float alpha[2], ref[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(m[i], tile_max[i]);
      ref[i] = m_new == -INFINITY ? 0.f : m_new;  // a row with no visible key yet: p = 0
      alpha[i] = exp2f(m[i] - ref[i]);
      m[i] = m_new;
      l[i] *= alpha[i];
    }
#pragma unroll
    for (int n = 0; n < DT; ++n) {
      o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - ref[e / 2]);
        l[e / 2] += s[j][e];
      }
      // O += P V: P's accumulators are the A fragments of the next mma (two key groups of 8)
#pragma unroll
    for (int kk = 0; kk < KK / 16; ++kk) {
      const uint32_t pf[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]),
                              pack_half2(s[2 * kk][2], s[2 * kk][3]),
                              pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < DT; ++n) {
        const __half* vp = vt + (n * 8 + g) * TL::kVStride + kk * 16 + 2 * tq;
        mma16816(o[n], pf, lds32(vp), lds32(vp + 8));
      }
    }
  }
  // each row's sum over its 4 threads, then the normalized output
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  using T = typename E::T;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (row_t[i] >= a.T) continue;
    T* out = static_cast<T*>(a.out) + int64_t(row_t[i]) * nq + h * D + 2 * tq;
    const float inv = 1.f / l[i];
#pragma unroll
    for (int n = 0; n < DT; ++n) {
      out[n * 8] = E::from_f(o[n][2 * i] * inv);
      out[n * 8 + 1] = E::from_f(o[n][2 * i + 1] * inv);
    }
  }
}

template <int D>
Status launch_tiled(const AttentionArgs& a, cudaStream_t s) {
  return by_dtype(a.dt, [&](auto e) {
    using E = decltype(e);
    auto kern = attention_tiled_kernel<E, D>;
    const size_t smem = Tile<D>::kSmem;
    if (smem > 48 * 1024) {
      const cudaError_t ae =
          detail::opt_in_shared_memory(reinterpret_cast<const void*>(kern), smem);
      if (ae != cudaSuccess) return launched("attention_tiled: shared memory opt-in", ae);
    }
    const dim3 grid(a.n_head, (a.T + kQueries - 1) / kQueries);
    return launched("attention_tiled_kernel",
                    launch_ex(kern, grid, kWarps * 32, smem, s, a.pdl, a));
  });
}

}  // namespace

bool attention_tiled_supports(const AttentionArgs& a) {
  return a.split_keys == 0 && (a.D == 64 || a.D == 128 || a.D == 256) && aligned16(a.q) &&
         aligned16(a.k_cache) && aligned16(a.v_cache);
}

Status attention_tiled(const AttentionArgs& a, cudaStream_t s) {
  if (a.T < 1 || a.n_head < 1 || a.n_head_kv < 1 || a.n_head % a.n_head_kv || a.max_ctx < 1 ||
      a.window < 0)
    return invalid("attention_tiled: T, heads and max_ctx >= 1, heads divide, window >= 0");
  if (!a.pos || !a.q || !a.k_cache || !a.v_cache || !a.out)
    return invalid("attention_tiled: null pointer");
  if (!attention_tiled_supports(a))
    return invalid(
        "attention_tiled: D 64, 128 or 256, no key splits, q and the caches 16-byte aligned");
  switch (a.D) {
    case 64:
      return launch_tiled<64>(a, s);
    case 128:
      return launch_tiled<128>(a, s);
    default:
      return launch_tiled<256>(a, s);
  }
}

}  // namespace flashnorm::kernels::cuda
