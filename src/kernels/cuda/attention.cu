// The CUDA engine's attention over the KV cache, one CTA per (head, query, key split)
// (attention). API: include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>
#include <cmath>

#include "attend.cuh"
#include "engine_op.cuh"
#include "shared_memory.h"

namespace flashnorm::kernels::cuda {
namespace {

// ---- attention: one CTA per (head, query, key split) ------------------------------------------
// The chunk's scores, softmax statistics and unnormalized P V by attend_chunk (attend.cuh). Without
// splits the CTA writes the normalized output; with splits it writes (max, sum, unnormalized
// output) for attention_combine_kernel.
template <class E>
__global__ void __launch_bounds__(256) attention_kernel(AttentionArgs a) {
  pdl_begin();
  extern __shared__ float sm[];
  __shared__ float red[32];
  const int h = blockIdx.x, t = blockIdx.y, z = blockIdx.z, D = a.D;
  const int nq = a.n_head * D, nkv = a.n_head_kv * D, kh = h / (a.n_head / a.n_head_kv);
  const int visible = *a.pos + t + 1;  // keys 0 .. visible-1 are causal-visible
  const int first = detail::first_key(visible, a.window);
  const int k0 = a.split_keys > 0 ? first + z * a.split_keys : first;
  const int k1 = a.split_keys > 0 ? min(visible, k0 + a.split_keys) : visible;
  float* ws =
      a.partials ? a.partials + ((static_cast<int64_t>(t) * a.n_head + h) * gridDim.z + z) * (D + 2)
                 : nullptr;
  if (k0 >= k1) {  // an empty split (the grid covers key_bound keys)
    if (ws && threadIdx.x == 0) ws[0] = -INFINITY, ws[1] = 0.f;
    return;
  }
  float* q = sm;                      // [D], then the output
  float* part = sm + D;               // [4 * blockDim.x]
  float* sc = part + 4 * blockDim.x;  // [k1 - k0]
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    q[d] = a.q[static_cast<int64_t>(t) * nq + h * D + d];
  }
  __syncthreads();
  const float* kbase = a.k_cache + kh * D + static_cast<int64_t>(k0) * nkv;
  const float* vbase = a.v_cache + kh * D + static_cast<int64_t>(k0) * nkv;
  float mx, sum;
  detail::attend_chunk(
      q, D, k1 - k0, a.scale, [&](int j) { return kbase + static_cast<int64_t>(j) * nkv; },
      [&](int j) { return vbase + static_cast<int64_t>(j) * nkv; }, sc, part, red, mx, sum);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    if (ws) {
      ws[2 + d] = q[d];
    } else {
      static_cast<typename E::T*>(a.out)[static_cast<int64_t>(t) * nq + h * D + d] =
          E::from_f(q[d] / sum);
    }
  }
  if (ws && threadIdx.x == 0) ws[0] = mx, ws[1] = sum;
}

// Merges the key splits of one (head, query): out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
template <class E>
__global__ void attention_combine_kernel(AttentionArgs a, int splits) {
  pdl_begin();
  const int h = blockIdx.x, t = blockIdx.y, D = a.D, d = threadIdx.x;
  const float* base = a.partials + (static_cast<int64_t>(t) * a.n_head + h) * splits * (D + 2);
  const int visible = *a.pos + t + 1;
  if (d < D) {
    static_cast<typename E::T*>(a.out)[static_cast<int64_t>(t) * a.n_head * D + h * D + d] =
        E::from_f(detail::merge_covered_chunks(
            base, splits, a.split_keys, detail::first_key(visible, a.window), visible, D, d));
  }
}

}  // namespace

Status attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.T < 1 || a.n_head < 1 || a.n_head_kv < 1 || a.n_head % a.n_head_kv || a.D < 4 || a.D % 4 ||
      a.D > 256 || a.max_ctx < 1 || a.max_ctx > 32768 || a.window < 0 || a.split_keys < 0 ||
      a.key_bound < 0)
    return invalid(
        "attention: D % 4 == 0 and <= 256, max_ctx <= 32768, heads divide, key_bound >= 0");
  if (!a.pos || !a.q || !a.k_cache || !a.v_cache || !a.out)
    return invalid("attention: null pointer");
  if (a.split_keys > 0 && !a.partials) return invalid("attention: split_keys needs partials");
  if (a.T >= kAttentionTiledMinT && attention_tiled_supports(a)) return attention_tiled(a, s);
  const int threads = 256, splits = attention_splits(a);
  const int keys = a.split_keys > 0 ? std::min(a.split_keys, a.max_ctx) : a.max_ctx;
  const size_t smem = sizeof(float) * (a.D + 4 * static_cast<size_t>(threads) + keys);
  if (smem > 227 * 1024) return invalid("attention: shared memory for the scores exceeds 227 KiB");
  AttentionArgs k = a;
  if (a.split_keys == 0) k.partials = nullptr;
  return by_dtype(a.dt, [&](auto e) {
    using E = decltype(e);
    auto kern = attention_kernel<E>;
    if (smem > 48 * 1024) {
      const cudaError_t ae =
          detail::opt_in_shared_memory(reinterpret_cast<const void*>(kern), smem);
      if (ae != cudaSuccess) return launched("attention: shared memory opt-in", ae);
    }
    const cudaError_t le = launch_ex(kern, dim3(a.n_head, a.T, splits), threads, smem, s, a.pdl, k);
    Status st = launched("attention_kernel", le);
    if (!st.ok() || a.split_keys == 0) return st;
    const cudaError_t le2 = launch_ex(attention_combine_kernel<E>, dim3(a.n_head, a.T),
                                      (a.D + 31) / 32 * 32, 0, s, a.pdl, k, splits);
    return launched("attention_combine_kernel", le2);
  });
}

}  // namespace flashnorm::kernels::cuda
