// The CUDA engine's RoPE + QK-norm + KV cache write (rope_kv). API:
// include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>
#include <cmath>

#include "engine_op.cuh"

namespace flashnorm::kernels::cuda {
namespace {

// ---- RoPE + QK-norm + KV cache write: one CTA (D/2 threads, rounded up to a warp) per (t, head)
template <class E>
__global__ void rope_kv_kernel(RopeKvArgs a) {
  pdl_begin();
  __shared__ float red[32];
  const int t = blockIdx.x, hh = blockIdx.y, half = a.D / 2, i = threadIdx.x;
  const bool live = i < half;
  const int p = *a.pos + t;
  const int nq = a.n_head * a.D, nkv = a.n_head_kv * a.D;
  int col0;  // first column of this head in qkv
  int kind;  // 0 q, 1 k, 2 v
  if (hh < a.n_head) {
    kind = 0, col0 = hh * a.D;
  } else if (hh < a.n_head + a.n_head_kv) {
    kind = 1, col0 = nq + (hh - a.n_head) * a.D;
  } else {
    kind = 2, col0 = nq + nkv + (hh - a.n_head - a.n_head_kv) * a.D;
  }
  const int i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half : 2 * i + 1;
  const float* src = a.qkv + static_cast<int64_t>(t) * a.ldqkv + col0;
  float x0 = live ? src[i0] : 0.f, x1 = live ? src[i1] : 0.f;
  const float* gain = kind == 0 ? a.q_norm : kind == 1 ? a.k_norm : nullptr;
  if (gain || (kind == 2 && a.v_renorm)) {
    const float r = rsqrtf(block_sum(x0 * x0 + x1 * x1, red) / a.D + a.eps);
    x0 *= r * (gain && live ? gain[i0] : 1.f);
    x1 *= r * (gain && live ? gain[i1] : 1.f);
  }
  if (!live) return;
  if (kind != 2) {
    const float c = a.cos[static_cast<int64_t>(p) * half + i];
    const float sn = a.sin[static_cast<int64_t>(p) * half + i];
    const float y0 = x0 * c - x1 * sn, y1 = x0 * sn + x1 * c;
    x0 = y0, x1 = y1;
  }
  float* dst;
  if (kind == 0) {
    dst = a.q + static_cast<int64_t>(t) * nq + col0;
  } else {
    const int kh = kind == 1 ? hh - a.n_head : hh - a.n_head - a.n_head_kv;
    dst = (kind == 1 ? a.k_cache : a.v_cache) + static_cast<int64_t>(p) * nkv + kh * a.D;
  }
  dst[i0] = x0;
  dst[i1] = x1;
}

}  // namespace

Status rope_kv(const RopeKvArgs& a, cudaStream_t s) {
  if (a.T < 1 || a.n_head < 1 || a.n_head_kv < 1 || a.n_head % a.n_head_kv || a.D < 2 || a.D % 2 ||
      a.D > 512)
    return invalid("rope_kv: T >= 1, heads >= 1, n_head % n_head_kv == 0, even D <= 512");
  if (!a.qkv || !a.pos || !a.cos || !a.sin || !a.q || !a.k_cache || !a.v_cache)
    return invalid("rope_kv: null pointer");
  const int threads = ((a.D / 2 + 31) / 32) * 32;
  const dim3 grid(a.T, a.n_head + 2 * a.n_head_kv);
  return by_dtype(a.dt, [&](auto e) {
    const cudaError_t le = launch_ex(rope_kv_kernel<decltype(e)>, grid, threads, 0, s, a.pdl, a);
    return launched("rope_kv_kernel", le);
  });
}

int attention_splits(const AttentionArgs& a) {
  const int keys = a.key_bound > 0 ? std::min(a.key_bound, a.max_ctx) : a.max_ctx;
  return a.split_keys > 0 ? (keys + a.split_keys - 1) / a.split_keys : 1;
}

}  // namespace flashnorm::kernels::cuda
