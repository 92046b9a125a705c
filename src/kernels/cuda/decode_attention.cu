// Decode attention with RoPE, QK-norm and the KV-cache write fused in, and the key chunks merged by
// the last CTA to finish (flash-decoding without a second kernel). API and contract:
// include/flashnorm/kernels/cuda/engine_ops.h (decode_attention). Sources: HF modeling_llama.py /
// modeling_gemma3.py (RoPE, QK-norm), Dao et al., "Flash-Decoding for long-context inference"
// (2023) for the split over keys and its log-sum-exp merge.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "attend.cuh"
#include "engine_op.cuh"
#include "shared_memory.h"

namespace flashnorm::kernels::cuda {
namespace {

using detail::warp_sum;

constexpr int kThreads = 256;

// One head row of D (<= 256) values prepared by one warp, lane l holding the rotation pairs l,
// l + 32, l + 64, l + 96 (pair i = elements (i, i + D/2) with neox, else (2i, 2i + 1)):
//   y = RoPE_p(x * rsqrt(mean(x^2) + eps) * gain)
// with the norm when gain or renorm is set (QK-norm with its gain; unit renorm of v), RoPE at
// position p when rope (tables [max_ctx][D/2]). Every lane of the warp must call it.
__device__ void prep_row(const float* x, float* y, int D, const float* gain, bool renorm, bool rope,
                         int p, const float* cos_t, const float* sin_t, bool neox, float eps) {
  const int lane = threadIdx.x & 31, half = D / 2;
  float a[4], b[4], ss = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int pi = lane + 32 * i;
    a[i] = b[i] = 0.f;
    if (pi < half) {
      a[i] = x[neox ? pi : 2 * pi];
      b[i] = x[neox ? pi + half : 2 * pi + 1];
      ss = fmaf(a[i], a[i], ss);
      ss = fmaf(b[i], b[i], ss);
    }
  }
  const bool norm = gain != nullptr || renorm;
  const float r = norm ? rsqrtf(warp_sum(ss) / D + eps) : 1.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int pi = lane + 32 * i;
    if (pi >= half) continue;
    const int i0 = neox ? pi : 2 * pi, i1 = neox ? pi + half : 2 * pi + 1;
    float x0 = a[i], x1 = b[i];
    if (norm) {
      x0 *= r * (gain ? gain[i0] : 1.f);
      x1 *= r * (gain ? gain[i1] : 1.f);
    }
    if (rope) {
      const float c = cos_t[static_cast<int64_t>(p) * half + pi];
      const float s = sin_t[static_cast<int64_t>(p) * half + pi];
      const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
      x0 = y0, x1 = y1;
    }
    y[i0] = x0;
    y[i1] = x1;
  }
}

// 16-byte asynchronous copy global -> shared (sm_80+), completed by cp_async_wait_all.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_all;" ::: "memory");
}

// CTA (head h, token t, key chunk z) of kThreads threads. Shared memory: q [D], the keys and values
// of this pass's tokens [T][D] each (rows j - p0), attend_chunk's scratch [4 * kThreads], scores
// [split_keys], and the chunk's cached key and value rows ([split_keys][D + 4], [split_keys][D]),
// copied with cp.async before the PDL wait (the preceding kernel writes neither them nor *pos:
// contract in engine_ops.h), so that their latency overlaps that kernel's tail and the query's
// preparation.
// kMinCtas (AttentionArgs::ctas_per_sm): the CTAs per SM the registers are allocated for (1: as
// many as the compiler wants, 209 with nvcc 13 on sm_90a; 3: at most 80, so that all of a
// Llama-3-8B launch's CTAs are resident at once). The arithmetic is the same in both: the same
// bits.
template <class E, int kMinCtas>
__global__ void __launch_bounds__(kThreads, kMinCtas)
    decode_attention_kernel(RopeKvArgs r, AttentionArgs a, unsigned* counters) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  __shared__ int s_last;
  const int h = blockIdx.x, t = blockIdx.y, z = blockIdx.z, D = r.D;
  const int nw = blockDim.x / 32, w = threadIdx.x / 32;
  const int group = r.n_head / r.n_head_kv, kh = h / group;
  const int nq = r.n_head * D, nkv = r.n_head_kv * D;
  // This token's pass: its first position p0, the qkv row r0 of p0, and its cache. One sequence:
  // tokens 0 .. T-1 at *pos + t; batched decode: token t alone at seq_pos[t] in slot seq_slot[t].
  const bool batched = r.seq_pos != nullptr;
  const int T = batched ? 1 : r.T;  // this token's pass: new key/value rows in shared memory
  const int p0 = batched ? r.seq_pos[t] : *r.pos, pt = batched ? p0 : p0 + t, visible = pt + 1;
  const int r0 = batched ? t : 0;
  const int64_t slot_off =
      batched ? static_cast<int64_t>(r.seq_slot[t]) * r.max_ctx * nkv : int64_t{0};
  float* const k_cache = r.k_cache + slot_off;
  float* const v_cache = r.v_cache + slot_off;
  const int first = detail::first_key(visible, a.window);
  const int k0 = first + z * a.split_keys, k1 = min(visible, k0 + a.split_keys);
  const bool live = k0 < k1;  // else an empty chunk (the grid covers key_bound keys)
  float* q = sm;
  float* knew = q + D;
  float* vnew = knew + T * D;
  float* part = vnew + T * D;
  float* sc = part + 4 * kThreads;
  // A chunk holds at most keys = min(split_keys, max_ctx) keys: the host sizes shared memory so.
  const int keys = min(a.split_keys, r.max_ctx);
  float* kbuf = sc + (keys + 3) / 4 * 4;  // 16-byte aligned
  const int ldk = D + 4;  // padded key rows: the score loop reads one row per thread
  float* vbuf = kbuf + keys * ldk;
  const float* qkv_t = r.qkv + static_cast<int64_t>(t) * r.ldqkv;
  const int ncached = live ? max(0, min(k1, p0) - k0) : 0;  // keys k0 .. k0 + ncached - 1
  {
    const int d4 = D / 4, n = ncached * d4;
    const float* kg = k_cache + static_cast<int64_t>(k0) * nkv + kh * D;
    const float* vg = v_cache + static_cast<int64_t>(k0) * nkv + kh * D;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int j = i / d4, c = (i % d4) * 4;
      cp_async16(kbuf + j * ldk + c, kg + static_cast<int64_t>(j) * nkv + c);
      cp_async16(vbuf + j * D + c, vg + static_cast<int64_t>(j) * nkv + c);
    }
  }
  // qkv (the preceding kernel's output), the counters and partials only after the wait; the
  // next kernel may launch right after it, or (late_trigger) once this CTA's chunk is published
  if (a.late_trigger) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  } else {
    pdl_begin();
  }

  // Rows from qkv, one warp each: this CTA's query; the keys and values of this pass's tokens that
  // fall in the chunk (j in [n0, k1), never read from the cache here); and, for chunk 0 of the
  // first head of each KV group, token t's key and value rows into the cache (read by later
  // passes).
  const int n0 = max(k0, p0), nnew = live ? max(0, k1 - n0) : 0;
  const bool writer = z == 0 && h % group == 0;
  const int ntasks = (live ? 1 : 0) + 2 * nnew + (writer ? 2 : 0);
  for (int task = w; task < ntasks; task += nw) {
    int u = task;
    if (live && u == 0) {
      prep_row(qkv_t + h * D, q, D, r.q_norm, false, true, pt, r.cos, r.sin, r.neox, r.eps);
      continue;
    }
    if (live) --u;
    if (u < 2 * nnew) {
      const int j = n0 + u / 2;
      const float* src = r.qkv + static_cast<int64_t>(j - p0 + r0) * r.ldqkv;
      if (u % 2 == 0) {
        prep_row(src + nq + kh * D, knew + (j - p0) * D, D, r.k_norm, false, true, j, r.cos, r.sin,
                 r.neox, r.eps);
      } else {
        prep_row(src + nq + nkv + kh * D, vnew + (j - p0) * D, D, nullptr, r.v_renorm, false, j,
                 r.cos, r.sin, r.neox, r.eps);
      }
      continue;
    }
    u -= 2 * nnew;
    const int64_t row = static_cast<int64_t>(pt) * nkv + kh * D;
    if (u == 0) {
      prep_row(qkv_t + nq + kh * D, k_cache + row, D, r.k_norm, false, true, pt, r.cos, r.sin,
               r.neox, r.eps);
    } else {
      prep_row(qkv_t + nq + nkv + kh * D, v_cache + row, D, nullptr, r.v_renorm, false, pt, r.cos,
               r.sin, r.neox, r.eps);
    }
  }
  cp_async_wait_all();
  __syncthreads();

  float* ws = a.partials + ((static_cast<int64_t>(t) * r.n_head + h) * gridDim.z + z) * (D + 2);
  if (live) {  // uniform over the CTA
    float mx, sum;
    detail::attend_chunk(
        q, D, k1 - k0, a.scale,
        [&](int j) { return j < ncached ? kbuf + j * ldk : knew + (k0 + j - p0) * D; },
        [&](int j) { return j < ncached ? vbuf + j * D : vnew + (k0 + j - p0) * D; }, sc, part, red,
        mx, sum);
    for (int d = threadIdx.x; d < D; d += blockDim.x) ws[2 + d] = q[d];
    if (threadIdx.x == 0) ws[0] = mx, ws[1] = sum;
  } else if (threadIdx.x == 0) {
    ws[0] = -INFINITY, ws[1] = 0.f;
  }

  // Join: publish this chunk, count it; the last chunk of (t, h) to arrive merges all of them.
  __threadfence();
  __syncthreads();
  if (a.late_trigger) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (threadIdx.x == 0) {
    s_last = atomicAdd(&counters[t * r.n_head + h], 1u) == gridDim.z - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const int splits = gridDim.z;
  const float* base = a.partials + (static_cast<int64_t>(t) * r.n_head + h) * splits * (D + 2);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    static_cast<typename E::T*>(a.out)[static_cast<int64_t>(t) * nq + h * D + d] =
        E::from_f(detail::merge_covered_chunks(base, splits, a.split_keys, first, visible, D, d));
  }
  if (threadIdx.x == 0)
    counters[t * r.n_head + h] = 0u;  // ready for the next stream-ordered launch
}

}  // namespace

Status decode_attention(const RopeKvArgs& r, const AttentionArgs& a, unsigned* counters,
                        cudaStream_t s) {
  const bool batched = r.seq_pos != nullptr;
  if (batched != (r.seq_slot != nullptr))
    return invalid("decode_attention: seq_pos and seq_slot are set together");
  if (r.T < 1 || r.T > (batched ? kDecodeAttentionMaxBatch : kDecodeAttentionMaxT) ||
      r.n_head < 1 || r.n_head_kv < 1 || r.n_head % r.n_head_kv || r.D < 4 || r.D % 4 ||
      r.D > 256 || r.max_ctx < 1 || r.max_ctx > 32768 || a.window < 0 || a.split_keys < 1 ||
      a.key_bound < 0)
    return invalid(
        "decode_attention: 1 <= T <= 16 (batched: 64), D % 4 == 0 and <= 256, n_head % "
        "n_head_kv == 0, "
        "max_ctx <= 32768, split_keys >= 1, key_bound >= 0");
  if (a.T != r.T || a.n_head != r.n_head || a.n_head_kv != r.n_head_kv || a.D != r.D ||
      a.max_ctx != r.max_ctx || a.dt != r.dt)
    return invalid("decode_attention: rope and attn disagree on T, heads, D, max_ctx or dtype");
  if (!r.qkv || !r.pos || !r.cos || !r.sin || !r.k_cache || !r.v_cache || !a.out || !a.partials ||
      !counters)
    return invalid("decode_attention: null pointer");
  if (r.ldqkv < static_cast<int64_t>(r.n_head + 2 * r.n_head_kv) * r.D)
    return invalid("decode_attention: ldqkv < (n_head + 2 n_head_kv) * D");
  if (!aligned16(r.k_cache) || !aligned16(r.v_cache))
    return invalid("decode_attention: k_cache and v_cache must be 16-byte aligned (cp.async)");
  const int splits = attention_splits(a);
  const int keys = std::min(a.split_keys, r.max_ctx);
  const int pass_t = batched ? 1 : r.T;  // new key/value rows a CTA stages
  const size_t smem = sizeof(float) * (static_cast<size_t>(r.D) * (1 + 2 * pass_t) +
                                       4 * static_cast<size_t>(kThreads) + (keys + 3) / 4 * 4 +
                                       static_cast<size_t>(keys) * (2 * r.D + 4));
  constexpr size_t kStatic = sizeof(float) * 32 + sizeof(int);  // red, s_last
  if (smem + kStatic > 227 * 1024)
    return invalid("decode_attention: shared memory exceeds 227 KiB (split_keys * D too large)");
  if (a.ctas_per_sm != 1 && a.ctas_per_sm != 3)
    return invalid("decode_attention: ctas_per_sm is 1 or 3");
  return by_dtype(r.dt, [&](auto e) {
    using E = decltype(e);
    auto kern = a.ctas_per_sm == 3 ? decode_attention_kernel<E, 3> : decode_attention_kernel<E, 1>;
    if (smem > 48 * 1024) {
      const cudaError_t ae =
          detail::opt_in_shared_memory(reinterpret_cast<const void*>(kern), smem);
      if (ae != cudaSuccess) return launched("decode_attention: shared memory opt-in", ae);
    }
    return launched("decode_attention_kernel",
                    launch_ex(kern, dim3(r.n_head, r.T, splits), kThreads, smem, s, r.pdl || a.pdl,
                              r, a, counters));
  });
}

}  // namespace flashnorm::kernels::cuda
