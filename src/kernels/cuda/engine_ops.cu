// The CUDA engine's non-GEMM kernels: embedding, residual add (+ post-norm), RoPE + QK-norm + KV
// cache write, attention, GLU, sampling. API and sources:
// include/flashnorm/kernels/cuda/engine_ops.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attend.cuh"
#include "elements.cuh"
#include "flashnorm/kernels/cuda/engine_ops.h"
#include "pdl.cuh"
#include "reduce.cuh"
#include "status.cuh"

namespace flashnorm::kernels::cuda {
namespace {

using detail::BF16;
using detail::block_sum;
using detail::FP16;
using detail::launch_ex;
using detail::pdl_begin;

using detail::aligned16;
using detail::by_dtype;
using detail::invalid;
using detail::launched;

// ---- embedding ------------------------------------------------------------------------------
template <class E>
__global__ void embed_kernel(const int32_t* tokens, const typename E::T* emb, int H, int vocab,
                             float scale, float* x32, typename E::T* xb) {
  pdl_begin();
  const int t = blockIdx.x;
  const int id = tokens[t];
  const bool ok = id >= 0 && id < vocab;
  const typename E::T* row = emb + static_cast<int64_t>(ok ? id : 0) * H;
  for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
    float f[8];
    detail::unpack8<E>(reinterpret_cast<const uint4*>(row)[v], f);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = ok ? f[i] * scale : NAN;
    float4* o = reinterpret_cast<float4*>(x32 + static_cast<int64_t>(t) * H + v * 8);
    o[0] = make_float4(f[0], f[1], f[2], f[3]);
    o[1] = make_float4(f[4], f[5], f[6], f[7]);
    reinterpret_cast<uint4*>(xb + static_cast<int64_t>(t) * H)[v] = detail::pack8<E>(f);
  }
}

// ---- residual add (+ optional post-norm of the sublayer output) -----------------------------
template <class E>
__global__ void residual_kernel(const float* p, int H, const float* post_gain, float eps,
                                float* x32, typename E::T* xb, const typename E::T* next_gain,
                                typename E::T* xn) {
  pdl_begin();
  __shared__ float red[32];
  const int t = blockIdx.x;
  const float* pr = p + static_cast<int64_t>(t) * H;
  float r = 1.f;
  if (post_gain) {
    float ss = 0.f;
    for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
      const float4 u = reinterpret_cast<const float4*>(pr)[2 * v];
      const float4 w = reinterpret_cast<const float4*>(pr)[2 * v + 1];
      const float f[8] = {u.x, u.y, u.z, u.w, w.x, w.y, w.z, w.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
    }
    r = rsqrtf(block_sum(ss, red) / H + eps);
  }
  float* xr = x32 + static_cast<int64_t>(t) * H;
  float ss = 0.f;
  for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
    const float4 u = reinterpret_cast<const float4*>(pr)[2 * v];
    const float4 w = reinterpret_cast<const float4*>(pr)[2 * v + 1];
    const float f[8] = {u.x, u.y, u.z, u.w, w.x, w.y, w.z, w.w};
    float4* xo = reinterpret_cast<float4*>(xr + v * 8);
    float4 a = xo[0], b = xo[1];
    float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[i] += post_gain ? f[i] * r * post_gain[v * 8 + i] : f[i];
      ss = fmaf(x[i], x[i], ss);
    }
    xo[0] = make_float4(x[0], x[1], x[2], x[3]);
    xo[1] = make_float4(x[4], x[5], x[6], x[7]);
    reinterpret_cast<uint4*>(xb + static_cast<int64_t>(t) * H)[v] = detail::pack8<E>(x);
  }
  if (!xn) return;
  const float rn = rsqrtf(block_sum(ss, red) / H + eps);  // barriers publish this thread's x32
  for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
    const float4* xo = reinterpret_cast<const float4*>(xr + v * 8);
    const float4 a = xo[0], b = xo[1];
    float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, g[8];
    detail::unpack8<E>(reinterpret_cast<const uint4*>(next_gain)[v], g);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] *= rn * g[i];
    reinterpret_cast<uint4*>(xn + static_cast<int64_t>(t) * H)[v] = detail::pack8<E>(x);
  }
}

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
  const int first = a.window > 0 ? max(0, visible - a.window) : 0;
  const int k0 = a.split_keys > 0 ? first + z * a.split_keys : first;
  const int k1 = a.split_keys > 0 ? min(visible, k0 + a.split_keys) : visible;
  float* ws =
      a.partials ? a.partials + ((static_cast<int64_t>(t) * a.n_head + h) * gridDim.z + z) * (D + 2)
                 : nullptr;
  if (k0 >= k1) {  // an empty split (the grid covers max_ctx keys)
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
  if (d < D) {
    static_cast<typename E::T*>(a.out)[static_cast<int64_t>(t) * a.n_head * D + h * D + d] =
        E::from_f(detail::merge_chunks(base, splits, D, d));
  }
}

// ---- gated linear unit ------------------------------------------------------------------------
template <class E>
__global__ void glu_kernel(GluKind kind, int T, int F, const float* gu, typename E::T* act) {
  pdl_begin();
  const int64_t n = static_cast<int64_t>(T) * F;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / F, i = e % F;
    const float g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
    act[e] = E::from_f(kind == GluKind::kSwiGLU ? detail::glu_value<false>(g, u)
                                                : detail::glu_value<true>(g, u));
  }
}

// ---- sampling ---------------------------------------------------------------------------------
__device__ uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Best (value, id) of two candidates: the larger value, the lower id on ties; NaN never wins.
__device__ __forceinline__ void better(float& bv, int& bi, float v, int i) {
  if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

__global__ void sample_kernel(const float* logits, int vocab, float temperature, uint64_t seed,
                              int32_t* pos, int advance, int32_t* token, int32_t* history,
                              int history_len, float* part_v, int* part_i, unsigned* counter) {
  pdl_begin();
  __shared__ float bv[32];
  __shared__ int bi[32];
  __shared__ int s_last;
  const int p = *pos + advance;  // every CTA reads *pos before it arrives; the last one writes it
  float best = -INFINITY;
  int idx = INT32_MAX;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < vocab; j += gridDim.x * blockDim.x) {
    float v = logits[j];
    if (temperature > 0.f) {
      const uint64_t h = mix64(seed ^ mix64(static_cast<uint64_t>(p) * 0x9e3779b97f4a7c15ull +
                                            static_cast<uint64_t>(j)));
      // 23 random bits: u in [2^-24, 1 - 2^-24], exact in fp32, so log(-log(u)) is finite
      const float u = (static_cast<float>(h >> 41) + 0.5f) * 0x1p-23f;
      v = v / temperature - logf(-logf(u));
    }
    better(best, idx, v, j);
  }
  for (int o = 16; o > 0; o >>= 1) {
    better(best, idx, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, idx, o));
  }
  if ((threadIdx.x & 31) == 0) bv[threadIdx.x / 32] = best, bi[threadIdx.x / 32] = idx;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) better(best, idx, bv[w], bi[w]);
  part_v[blockIdx.x] = best, part_i[blockIdx.x] = idx;
  __threadfence();  // release this CTA's winner before counting it
  s_last = atomicAdd(counter, 1u) == gridDim.x - 1;
  if (!s_last) return;
  __threadfence();  // acquire the others'
  best = -INFINITY, idx = INT32_MAX;
  for (int b = 0; b < static_cast<int>(gridDim.x); ++b) {
    better(best, idx, __ldcg(part_v + b), __ldcg(part_i + b));
  }
  if (idx == INT32_MAX) idx = 0;  // every logit NaN
  *token = idx;
  if (history && p < history_len) history[p] = idx;
  *pos = p;
  *counter = 0u;  // ready for the next stream-ordered call
}

}  // namespace

Status embed_tokens(DType dt, int T, int H, int vocab, const int32_t* tokens, const void* emb,
                    float scale, float* x32, void* xb, cudaStream_t s, bool pdl) {
  if (T < 1 || H < 8 || H % 8 || vocab < 1) return invalid("embed_tokens: T >= 1, H % 8 == 0");
  if (!tokens || !emb || !x32 || !xb || !aligned16(emb) || !aligned16(x32) || !aligned16(xb))
    return invalid("embed_tokens: null or misaligned pointer");
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    const cudaError_t le = launch_ex(embed_kernel<E>, T, 128, 0, s, pdl, tokens,
                                     static_cast<const typename E::T*>(emb), H, vocab, scale, x32,
                                     static_cast<typename E::T*>(xb));
    return launched("embed_kernel", le);
  });
}

Status residual_add(DType dt, int T, int H, const float* p, const float* post_gain, float eps,
                    float* x32, void* xb, cudaStream_t s, const void* next_gain, void* xn,
                    bool pdl) {
  if (T < 1 || H < 8 || H % 8) return invalid("residual_add: T >= 1, H % 8 == 0");
  if (!p || !x32 || !xb || !aligned16(p) || !aligned16(x32) || !aligned16(xb))
    return invalid("residual_add: null or misaligned pointer");
  if ((xn == nullptr) != (next_gain == nullptr) || !aligned16(xn) || !aligned16(next_gain))
    return invalid("residual_add: next_gain and xn go together, 16-byte aligned");
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    using T_ = typename E::T;
    const cudaError_t le =
        launch_ex(residual_kernel<E>, T, 256, 0, s, pdl, p, H, post_gain, eps, x32,
                  static_cast<T_*>(xb), static_cast<const T_*>(next_gain), static_cast<T_*>(xn));
    return launched("residual_kernel", le);
  });
}

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
  return a.split_keys > 0 ? (a.max_ctx + a.split_keys - 1) / a.split_keys : 1;
}

Status attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.T < 1 || a.n_head < 1 || a.n_head_kv < 1 || a.n_head % a.n_head_kv || a.D < 4 || a.D % 4 ||
      a.D > 256 || a.max_ctx < 1 || a.max_ctx > 32768 || a.window < 0 || a.split_keys < 0)
    return invalid("attention: D % 4 == 0 and <= 256, max_ctx <= 32768, heads divide");
  if (!a.pos || !a.q || !a.k_cache || !a.v_cache || !a.out)
    return invalid("attention: null pointer");
  if (a.split_keys > 0 && !a.partials) return invalid("attention: split_keys needs partials");
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
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem));
    }
    const cudaError_t le = launch_ex(kern, dim3(a.n_head, a.T, splits), threads, smem, s, a.pdl, k);
    Status st = launched("attention_kernel", le);
    if (!st.ok() || a.split_keys == 0) return st;
    const cudaError_t le2 = launch_ex(attention_combine_kernel<E>, dim3(a.n_head, a.T),
                                      (a.D + 31) / 32 * 32, 0, s, a.pdl, k, splits);
    return launched("attention_combine_kernel", le2);
  });
}

Status glu(DType dt, GluKind kind, int T, int F, const float* gu, void* act, cudaStream_t s,
           bool pdl) {
  if (T < 1 || F < 1 || !gu || !act) return invalid("glu: T, F >= 1 and non-null pointers");
  const int64_t n = static_cast<int64_t>(T) * F;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    const cudaError_t le = launch_ex(glu_kernel<E>, blocks, 256, 0, s, pdl, kind, T, F, gu,
                                     static_cast<typename E::T*>(act));
    return launched("glu_kernel", le);
  });
}

size_t sample_workspace_bytes() { return 16 + 2 * sizeof(float) * kSampleBlocks; }

Status sample_tokens(int vocab, const float* logits, float temperature, uint64_t seed, int32_t* pos,
                     int advance, int32_t* token, int32_t* history, int history_len,
                     void* workspace, cudaStream_t s, bool pdl) {
  if (vocab < 1 || !logits || !pos || !token || !(temperature >= 0.f) || advance < 0)
    return invalid("sample_tokens: vocab >= 1, temperature >= 0, non-null logits/pos/token");
  if (!workspace || !aligned16(workspace))
    return invalid("sample_tokens: workspace must be set and 16-byte aligned");
  constexpr int kThreads = 512;
  const int blocks = std::min(kSampleBlocks, (vocab + kThreads - 1) / kThreads);
  unsigned* counter = static_cast<unsigned*>(workspace);
  float* part_v = reinterpret_cast<float*>(static_cast<char*>(workspace) + 16);
  int* part_i = reinterpret_cast<int*>(part_v + kSampleBlocks);
  const cudaError_t le =
      launch_ex(sample_kernel, blocks, kThreads, 0, s, pdl, logits, vocab, temperature, seed, pos,
                advance, token, history, history_len, part_v, part_i, counter);
  return launched("sample_kernel", le);
}

}  // namespace flashnorm::kernels::cuda
