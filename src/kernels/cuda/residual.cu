// The CUDA engine's residual add, with the optional post-norm of the sublayer output
// (residual_add). API: include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>
#include <cmath>

#include "engine_op.cuh"

namespace flashnorm::kernels::cuda {
namespace {

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
    float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    if (next_gain) {
      float g[8];
      detail::unpack8<E>(reinterpret_cast<const uint4*>(next_gain)[v], g);
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] *= rn * g[i];
    } else {  // the gain folded into the consumer's weights
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] *= rn;
    }
    reinterpret_cast<uint4*>(xn + static_cast<int64_t>(t) * H)[v] = detail::pack8<E>(x);
  }
}

}  // namespace

Status residual_add(DType dt, int T, int H, const float* p, const float* post_gain, float eps,
                    float* x32, void* xb, cudaStream_t s, const void* next_gain, void* xn,
                    bool pdl) {
  if (T < 1 || H < 8 || H % 8) return invalid("residual_add: T >= 1, H % 8 == 0");
  if (!p || !x32 || !xb || !aligned16(p) || !aligned16(x32) || !aligned16(xb))
    return invalid("residual_add: null or misaligned pointer");
  if ((next_gain && !xn) || !aligned16(xn) || !aligned16(next_gain))
    return invalid("residual_add: next_gain needs xn; both 16-byte aligned");
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    using T_ = typename E::T;
    const cudaError_t le =
        launch_ex(residual_kernel<E>, T, 256, 0, s, pdl, p, H, post_gain, eps, x32,
                  static_cast<T_*>(xb), static_cast<const T_*>(next_gain), static_cast<T_*>(xn));
    return launched("residual_kernel", le);
  });
}

}  // namespace flashnorm::kernels::cuda
