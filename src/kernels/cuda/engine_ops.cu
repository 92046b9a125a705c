// The CUDA engine's non-GEMM kernels: embedding, residual add (+ post-norm), RoPE + QK-norm + KV
// cache write, attention, GLU, sampling. API and sources: include/flashnorm/kernels/cuda/engine_ops.h.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "elements.cuh"
#include "flashnorm/kernels/cuda/engine_ops.h"

namespace flashnorm::kernels::cuda {
namespace {

using detail::BF16;
using detail::FP16;

Status invalid(const std::string& what) { return {Code::kInvalidArgument, what}; }
Status launched(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return {};
  return {Code::kCudaError, std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                                cudaGetErrorString(e) + ")"};
}
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();  // red may still be read by an earlier reduction
  if ((threadIdx.x & 31) == 0) red[w] = v;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}
__device__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int w = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[w] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int i = 0; i < nw; ++i) m = fmaxf(m, red[i]);
  return m;
}

// ---- embedding ------------------------------------------------------------------------------
template <class E>
__global__ void embed_kernel(const int32_t* tokens, const typename E::T* emb, int H, int vocab,
                             float scale, float* x32, typename E::T* xb) {
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
__global__ void residual_kernel(const typename E::T* p, int H, const float* post_gain, float eps,
                                float* x32, typename E::T* xb) {
  __shared__ float red[32];
  const int t = blockIdx.x;
  const typename E::T* pr = p + static_cast<int64_t>(t) * H;
  float r = 1.f;
  if (post_gain) {
    float ss = 0.f;
    for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
      float f[8];
      detail::unpack8<E>(reinterpret_cast<const uint4*>(pr)[v], f);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
    }
    r = rsqrtf(block_sum(ss, red) / H + eps);
  }
  float* xr = x32 + static_cast<int64_t>(t) * H;
  for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
    float f[8];
    detail::unpack8<E>(reinterpret_cast<const uint4*>(pr)[v], f);
    float4* xo = reinterpret_cast<float4*>(xr + v * 8);
    float4 a = xo[0], b = xo[1];
    float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] += post_gain ? f[i] * r * post_gain[v * 8 + i] : f[i];
    xo[0] = make_float4(x[0], x[1], x[2], x[3]);
    xo[1] = make_float4(x[4], x[5], x[6], x[7]);
    reinterpret_cast<uint4*>(xb + static_cast<int64_t>(t) * H)[v] = detail::pack8<E>(x);
  }
}

// ---- RoPE + QK-norm + KV cache write: one CTA (D/2 threads, rounded up to a warp) per (t, head)
template <class E>
__global__ void rope_kv_kernel(RopeKvArgs a) {
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
  const typename E::T* src =
      static_cast<const typename E::T*>(a.qkv) + static_cast<int64_t>(t) * a.ldqkv + col0;
  float x0 = live ? E::to_f(src[i0]) : 0.f, x1 = live ? E::to_f(src[i1]) : 0.f;
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

// ---- attention: one CTA per (head, query) -----------------------------------------------------
template <class E>
__global__ void attention_kernel(AttentionArgs a) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  const int h = blockIdx.x, t = blockIdx.y, D = a.D;
  const int groups = blockDim.x / D;  // threads = D * groups
  const int nq = a.n_head * D, nkv = a.n_head_kv * D, kh = h / (a.n_head / a.n_head_kv);
  const int visible = *a.pos + t + 1;  // keys 0 .. visible-1 are causal-visible
  const int first = a.window > 0 ? max(0, visible - a.window) : 0;
  const int n = visible - first;
  float* q = sm;                // [D]
  float* part = sm + D;         // [groups][D]
  float* sc = part + groups * D;  // [n]
  for (int d = threadIdx.x; d < D; d += blockDim.x) q[d] = a.q[static_cast<int64_t>(t) * nq + h * D + d];
  __syncthreads();
  const float* kbase = a.k_cache + kh * D;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float4* kr = reinterpret_cast<const float4*>(kbase + static_cast<int64_t>(first + j) * nkv);
    float s = 0.f;
    for (int d = 0; d < D / 4; ++d) {
      float4 k = kr[d];
      s = fmaf(q[4 * d], k.x, s);
      s = fmaf(q[4 * d + 1], k.y, s);
      s = fmaf(q[4 * d + 2], k.z, s);
      s = fmaf(q[4 * d + 3], k.w, s);
    }
    s *= a.scale;
    sc[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = __expf(sc[j] - mx);
    sc[j] = e;
    sum += e;
  }
  sum = block_sum(sum, red);  // its barriers also publish sc
  const int d = threadIdx.x % D, g = threadIdx.x / D;
  const float* vbase = a.v_cache + kh * D + d;
  float acc = 0.f;
  for (int j = g; j < n; j += groups) acc = fmaf(sc[j], vbase[static_cast<int64_t>(first + j) * nkv], acc);
  part[g * D + d] = acc;
  __syncthreads();
  if (g == 0) {
    float o = 0.f;
    for (int k = 0; k < groups; ++k) o += part[k * D + d];
    static_cast<typename E::T*>(a.out)[static_cast<int64_t>(t) * nq + h * D + d] = E::from_f(o / sum);
  }
}

// ---- gated linear unit ------------------------------------------------------------------------
template <class E>
__global__ void glu_kernel(GluKind kind, int T, int F, const typename E::T* gu,
                           typename E::T* act) {
  const int64_t n = static_cast<int64_t>(T) * F;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / F, i = e % F;
    const float g = E::to_f(gu[t * 2 * F + i]), u = E::to_f(gu[t * 2 * F + F + i]);
    float f;
    if (kind == GluKind::kSwiGLU) {
      f = g / (1.f + __expf(-g));
    } else {
      const float c = 0.7978845608028654f;  // sqrt(2 / pi)
      f = 0.5f * g * (1.f + tanhf(c * (g + 0.044715f * g * g * g)));
    }
    act[e] = E::from_f(f * u);
  }
}

// ---- sampling ---------------------------------------------------------------------------------
__device__ uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class E>
__global__ void sample_kernel(const typename E::T* logits, int vocab, float temperature,
                              uint64_t seed, int32_t* pos, int advance, int32_t* token,
                              int32_t* history, int history_len) {
  __shared__ float bv[32];
  __shared__ int bi[32];
  const int p = *pos + advance;
  float best = -INFINITY;
  int idx = INT32_MAX;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    float v = E::to_f(logits[j]);
    if (temperature > 0.f) {
      const uint64_t h = mix64(seed ^ mix64(static_cast<uint64_t>(p) * 0x9e3779b97f4a7c15ull +
                                            static_cast<uint64_t>(j)));
      const float u = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
      v = v / temperature - logf(-logf(u));
    }
    if (v > best || (v == best && j < idx)) best = v, idx = j;  // NaN never compares greater
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > best || (ov == best && oi < idx)) best = ov, idx = oi;
  }
  if ((threadIdx.x & 31) == 0) bv[threadIdx.x / 32] = best, bi[threadIdx.x / 32] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      if (bv[w] > best || (bv[w] == best && bi[w] < idx)) best = bv[w], idx = bi[w];
    }
    if (idx == INT32_MAX) idx = 0;  // every logit NaN
    *token = idx;
    if (history && p < history_len) history[p] = idx;
    *pos = p;
  }
}

template <class F>
Status by_dtype(DType dt, F&& f) {
  if (dt == DType::kBF16) return f(BF16{});
  if (dt == DType::kFP16) return f(FP16{});
  return invalid("dtype must be bf16 or fp16");
}

}  // namespace

Status embed_tokens(DType dt, int T, int H, int vocab, const int32_t* tokens, const void* emb,
                    float scale, float* x32, void* xb, cudaStream_t s) {
  if (T < 1 || H < 8 || H % 8 || vocab < 1) return invalid("embed_tokens: T >= 1, H % 8 == 0");
  if (!tokens || !emb || !x32 || !xb || !aligned16(emb) || !aligned16(x32) || !aligned16(xb))
    return invalid("embed_tokens: null or misaligned pointer");
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    embed_kernel<E><<<T, 128, 0, s>>>(tokens, static_cast<const typename E::T*>(emb), H, vocab,
                                      scale, x32, static_cast<typename E::T*>(xb));
    return launched("embed_kernel");
  });
}

Status residual_add(DType dt, int T, int H, const void* p, const float* post_gain, float eps,
                    float* x32, void* xb, cudaStream_t s) {
  if (T < 1 || H < 8 || H % 8) return invalid("residual_add: T >= 1, H % 8 == 0");
  if (!p || !x32 || !xb || !aligned16(p) || !aligned16(x32) || !aligned16(xb))
    return invalid("residual_add: null or misaligned pointer");
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    residual_kernel<E><<<T, 256, 0, s>>>(static_cast<const typename E::T*>(p), H, post_gain, eps,
                                         x32, static_cast<typename E::T*>(xb));
    return launched("residual_kernel");
  });
}

Status rope_kv(const RopeKvArgs& a, cudaStream_t s) {
  if (a.T < 1 || a.n_head < 1 || a.n_head_kv < 1 || a.n_head % a.n_head_kv || a.D < 2 ||
      a.D % 2 || a.D > 512)
    return invalid("rope_kv: T >= 1, heads >= 1, n_head % n_head_kv == 0, even D <= 512");
  if (!a.qkv || !a.pos || !a.cos || !a.sin || !a.q || !a.k_cache || !a.v_cache)
    return invalid("rope_kv: null pointer");
  const int threads = ((a.D / 2 + 31) / 32) * 32;
  const dim3 grid(a.T, a.n_head + 2 * a.n_head_kv);
  return by_dtype(a.dt, [&](auto e) {
    rope_kv_kernel<decltype(e)><<<grid, threads, 0, s>>>(a);
    return launched("rope_kv_kernel");
  });
}

Status attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.T < 1 || a.n_head < 1 || a.n_head_kv < 1 || a.n_head % a.n_head_kv || a.D < 4 ||
      a.D % 4 || a.D > 256 || a.max_ctx < 1 || a.max_ctx > 32768 || a.window < 0)
    return invalid("attention: D % 4 == 0 and <= 256, max_ctx <= 32768, heads divide");
  if (!a.pos || !a.q || !a.k_cache || !a.v_cache || !a.out) return invalid("attention: null pointer");
  const int groups = std::max(1, 256 / a.D);
  const int threads = a.D * groups;
  if (threads % 32) return invalid("attention: D * (256 / D) must be a multiple of 32");
  const size_t smem = sizeof(float) * (a.D + static_cast<size_t>(groups) * a.D + a.max_ctx);
  return by_dtype(a.dt, [&](auto e) {
    auto k = attention_kernel<decltype(e)>;
    if (smem > 48 * 1024) {
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    }
    k<<<dim3(a.n_head, a.T), threads, smem, s>>>(a);
    return launched("attention_kernel");
  });
}

Status glu(DType dt, GluKind kind, int T, int F, const void* gu, void* act, cudaStream_t s) {
  if (T < 1 || F < 1 || !gu || !act) return invalid("glu: T, F >= 1 and non-null pointers");
  const int64_t n = static_cast<int64_t>(T) * F;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    glu_kernel<E><<<blocks, 256, 0, s>>>(kind, T, F, static_cast<const typename E::T*>(gu),
                                         static_cast<typename E::T*>(act));
    return launched("glu_kernel");
  });
}

Status sample_tokens(DType dt, int vocab, const void* logits, float temperature, uint64_t seed,
                     int32_t* pos, int advance, int32_t* token, int32_t* history, int history_len,
                     cudaStream_t s) {
  if (vocab < 1 || !logits || !pos || !token || !(temperature >= 0.f) || advance < 0)
    return invalid("sample_tokens: vocab >= 1, temperature >= 0, non-null logits/pos/token");
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    sample_kernel<E><<<1, 1024, 0, s>>>(static_cast<const typename E::T*>(logits), vocab,
                                        temperature, seed, pos, advance, token, history,
                                        history_len);
    return launched("sample_kernel");
  });
}

}  // namespace flashnorm::kernels::cuda
