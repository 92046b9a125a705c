// RMSNorm kernel (rms_norm.h): one CTA per row, VPT 16-byte vectors per thread held in registers,
// optional fused residual add and gain. Entry point with its checks: rms_norm.cpp.
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

cudaError_t launch_rms_norm(const RmsNormArgs& a, cudaStream_t s) {
  return a.dtype == DType::kBF16 ? rms_dispatch<BF16>(a, s) : rms_dispatch<FP16>(a, s);
}

}  // namespace flashnorm::kernels::cuda::detail
