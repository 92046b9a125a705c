// Internal: one query against one chunk of keys by one CTA, the core shared by attention_kernel
// (engine_ops.cu) and decode_attention_kernel (decode_attention.cu). fp32 throughout.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "reduce.cuh"

namespace flashnorm::kernels::cuda::detail {

// Scores s_j = scale * q . k_j for the nk keys j of the chunk, m = max_j s_j, l = sum_j e^(s_j - m)
// and the unnormalized output o = sum_j e^(s_j - m) v_j (flash-decoding's per-chunk statistics).
// krow(j) / vrow(j): pointer to the D floats of key / value j (16-byte aligned, global or shared
// memory). q: shared [D], 16-byte aligned, D % 4 == 0. Shared scratch: sc [nk], part
// [4 * blockDim.x], red [32]. Scores: one thread per key, its row in 16-byte loads. P V: D/4
// threads per key (one float4 of dims each) and blockDim.x / (D/4) keys at a time, unrolled so that
// several value rows are in flight per thread. On return (after a barrier) every thread has m and
// l, and o [D] is in shared memory at `q` (q is overwritten).
template <class KRow, class VRow>
__device__ __forceinline__ void attend_chunk(float* q, int D, int nk, float scale, KRow krow,
                                             VRow vrow, float* sc, float* part, float* red,
                                             float& m, float& l) {
  const int d4 = D / 4;
  const float4* q4 = reinterpret_cast<const float4*>(q);
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < nk; j += blockDim.x) {
    const float4* kr = reinterpret_cast<const float4*>(krow(j));
    float s = 0.f;
#pragma unroll 16
    for (int d = 0; d < d4; ++d) {
      const float4 k = kr[d], qq = q4[d];
      s = fmaf(qq.x, k.x, s);
      s = fmaf(qq.y, k.y, s);
      s = fmaf(qq.z, k.z, s);
      s = fmaf(qq.w, k.w, s);
    }
    s *= scale;
    sc[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j < nk; j += blockDim.x) {
    const float e = __expf(sc[j] - mx);
    sc[j] = e;
    sum += e;
  }
  sum = block_sum(sum, red);  // its barriers also publish sc
  const int groups = blockDim.x / d4, g = threadIdx.x / d4, c = threadIdx.x % d4;
  if (g < groups) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
    for (int j = g; j < nk; j += groups) {
      const float p = sc[j];
      const float4 v = reinterpret_cast<const float4*>(vrow(j))[c];
      acc.x = fmaf(p, v.x, acc.x);
      acc.y = fmaf(p, v.y, acc.y);
      acc.z = fmaf(p, v.z, acc.z);
      acc.w = fmaf(p, v.w, acc.w);
    }
    reinterpret_cast<float4*>(part)[g * d4 + c] = acc;  // part [groups][D]
  }
  __syncthreads();  // q is dead (scores done); part complete
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.f;
    for (int k = 0; k < groups; ++k) o += part[k * D + d];
    q[d] = o;
  }
  __syncthreads();
  m = mx, l = sum;
}

// Chunk records whose loads merge_chunks issues together.
constexpr int kMergeBatch = 8;

// Output dim d of one (head, query) from its `splits` chunk records at base ([splits][D + 2]: m, l,
// unnormalized o [D]; l == 0 marks an empty chunk, whose o is unwritten: loaded, never used): sum_s
// e^(m_s - M) o_s / sum_s e^(m_s - M) l_s, M = max_s m_s (flash-decoding's log-sum-exp merge).
// Loads bypass L1 (__ldcg): the records may come from other CTAs of the same launch. The m, l and o
// loads of kMergeBatch records are issued before any of their arithmetic: one L2 round trip per 8
// records in the last CTA of every (head, query). The loop with a branch on l that this replaced
// compiled (sm_90a SASS) to l loaded for 4 records, then m and o predicated on it: two dependent
// round trips per 4 records. The arithmetic is that loop's, in its order: the same bits.
__device__ __forceinline__ float merge_chunks(const float* base, int splits, int D, int d) {
  const int stride = D + 2;
  float m = -INFINITY;
  for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
    float ms[kMergeBatch];
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i)
      ms[i] = s0 + i < splits ? __ldcg(base + (s0 + i) * stride) : -INFINITY;
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) m = fmaxf(m, ms[i]);
  }
  float l = 0.f, o = 0.f;
  for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
    float ms[kMergeBatch], ls[kMergeBatch], os[kMergeBatch];
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      const bool in = s0 + i < splits;
      const float* p = base + (s0 + i) * stride;
      ms[i] = in ? __ldcg(p) : 0.f;
      ls[i] = in ? __ldcg(p + 1) : 0.f;  // past the last record: as an empty chunk
      os[i] = in ? __ldcg(p + 2 + d) : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      if (ls[i] == 0.f) continue;  // empty chunk
      const float f = __expf(ms[i] - m);
      l = fmaf(ls[i], f, l);
      o = fmaf(os[i], f, o);
    }
  }
  return o / l;
}

// The first key a query with `visible` causal keys attends to (window = 0: all of them).
__device__ __forceinline__ int first_key(int visible, int window) {
  return window > 0 ? max(0, visible - window) : 0;
}

// merge_chunks, or NaN when the splits chunks of split_keys keys from `first` stop short of the
// last visible key (a key_bound below the position): never a silently truncated softmax.
__device__ __forceinline__ float merge_covered_chunks(const float* base, int splits, int split_keys,
                                                      int first, int visible, int D, int d) {
  return first + splits * split_keys >= visible ? merge_chunks(base, splits, D, d) : NAN;
}

}  // namespace flashnorm::kernels::cuda::detail
