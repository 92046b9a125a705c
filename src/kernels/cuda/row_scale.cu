// Per-row rstd and the post-scale of the two-stream linear (and the rstd kernel the PDL prefill
// launches before its GEMM): rstd[m] = 1 / sqrt(mean(x[m, :]^2) + eps), y[m, n] *= rstd[m] (+
// bias).
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

// ---- rstd per row: one warp per row (grid-stride over the rows) -------------------------------
// Launched with PDL (the PDL prefill), it first waits for the preceding kernel
// (griddepcontrol.wait: x may be that kernel's output, and it may still read rstd) unless wait_prev
// is 0 (the race test's --no-join run); launched without the attribute the wait is a no-op. It then
// lets the next kernel launch at once (griddepcontrol.launch_dependents), which takes effect
// whenever that kernel is launched with PDL (after the two-stream and row_rstd launches none is);
// such a kernel must itself wait before reading rstd. delay > 0 (race tests): every warp spins that
// many SM clocks, once, before it reads x and writes its rows.
template <class E>
__global__ void rstd_kernel(const typename E::T* x, int64_t ldx, int M, int K, float eps,
                            float* rstd, long long delay, int wait_prev) {
  if (wait_prev) asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int lane = threadIdx.x & 31;
  const int nvec = K / 8;
  if (delay > 0) {
    const long long t0 = clock64();
    while (clock64() - t0 < delay) {
    }
  }
  for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < M; row += warps) {
    const typename E::T* xr = x + static_cast<int64_t>(row) * ldx;
    float s = 0.f;
    int v = lane;
    for (; v + 96 < nvec; v += 128) {
      uint4 a = ld_nc(xr + v * 8), b = ld_nc(xr + (v + 32) * 8), c = ld_nc(xr + (v + 64) * 8),
            d = ld_nc(xr + (v + 96) * 8);
      s += sumsq8<E>(a) + sumsq8<E>(b) + sumsq8<E>(c) + sumsq8<E>(d);
    }
    for (; v < nvec; v += 32) s += sumsq8<E>(ld_nc(xr + v * 8));
    s = warp_sum(s);
    if (lane == 0) rstd[row] = 1.f / sqrtf(s / static_cast<float>(K) + eps);
  }
}

// ---- post-scale (two-stream scheme, prefill fallback)
// ---------------------------------------------
// fp32 output (LM-head logits): y[m, n] = (mask[n] ? y * rstd[m] : y) + bias[n].
template <class E>
__global__ void postscale_f32_kernel(float* y, int64_t ldy, int M, int N, const float* rstd,
                                     const typename E::T* bias, const uint8_t* mask) {
  const int64_t total = static_cast<int64_t>(M) * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / N), n = static_cast<int>(i % N);
    float& v = y[static_cast<int64_t>(m) * ldy + n];
    const bool sc = mask ? mask[n] != 0 : true;
    v = (sc ? v * rstd[m] : v) + (bias ? E::to_f(bias[n]) : 0.f);
  }
}

template <class E>
__global__ void postscale_kernel(typename E::T* y, int64_t ldy, int M, int N, const float* rstd,
                                 const typename E::T* bias, const uint8_t* mask) {
  using T = typename E::T;
  const int groups = (N + 7) / 8;
  const int64_t total = static_cast<int64_t>(M) * groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / groups);
    const int n0 = static_cast<int>(i % groups) * 8;
    const float r = rstd[m];
    T* yr = y + static_cast<int64_t>(m) * ldy;
    if (n0 + 8 <= N) {
      float f[8];
      unpack8<E>(*reinterpret_cast<const uint4*>(yr + n0), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const bool sc = mask ? mask[n0 + j] != 0 : true;
        f[j] = (sc ? f[j] * r : f[j]) + (bias ? E::to_f(bias[n0 + j]) : 0.f);
      }
      *reinterpret_cast<uint4*>(yr + n0) = pack8<E>(f);
    } else {
      for (int n = n0; n < N; ++n) {
        const bool sc = mask ? mask[n] != 0 : true;
        float f = E::to_f(yr[n]);
        yr[n] = E::from_f((sc ? f * r : f) + (bias ? E::to_f(bias[n]) : 0.f));
      }
    }
  }
}

}  // namespace

cudaError_t launch_rstd(DType dt, int64_t M, int64_t K, const void* x, int64_t ldx, float eps,
                        float* rstd, cudaStream_t s, int max_ctas, long long delay, bool pdl,
                        bool wait_prev) {
  const int rows_per_cta = 8;
  int64_t ctas = (M + rows_per_cta - 1) / rows_per_cta;
  if (max_ctas > 0) ctas = std::min<int64_t>(ctas, max_ctas);
  const dim3 grid(static_cast<unsigned>(ctas));
  const int w = wait_prev ? 1 : 0;
  if (dt == DType::kBF16)
    return launch_ex(rstd_kernel<BF16>, grid, dim3(256), 0, s, pdl,
                     static_cast<const __nv_bfloat16*>(x), ldx, static_cast<int>(M),
                     static_cast<int>(K), eps, rstd, delay, w);
  return launch_ex(rstd_kernel<FP16>, grid, dim3(256), 0, s, pdl, static_cast<const __half*>(x),
                   ldx, static_cast<int>(M), static_cast<int>(K), eps, rstd, delay, w);
}

namespace {
// 256-thread CTAs, at most 16 per SM (132 SMs on an sm_90a part)
unsigned grid_for(int64_t threads) {
  return static_cast<unsigned>(std::min<int64_t>((threads + 255) / 256, 132 * 16));
}
template <class E>
cudaError_t postscale_launch(int64_t M, int64_t N, void* y, int64_t ldy, const float* rstd,
                             const void* bias, const uint8_t* mask, cudaStream_t s, bool y_f32) {
  using T = typename E::T;
  const int m = static_cast<int>(M), n = static_cast<int>(N);
  if (y_f32)
    postscale_f32_kernel<E><<<grid_for(M * N), 256, 0, s>>>(static_cast<float*>(y), ldy, m, n, rstd,
                                                            static_cast<const T*>(bias), mask);
  else
    postscale_kernel<E><<<grid_for(M * ((N + 7) / 8)), 256, 0, s>>>(
        static_cast<T*>(y), ldy, m, n, rstd, static_cast<const T*>(bias), mask);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_postscale(DType dt, int64_t M, int64_t N, void* y, int64_t ldy,
                             const float* rstd, const void* bias, const uint8_t* mask,
                             cudaStream_t s, bool y_f32) {
  return dt == DType::kBF16 ? postscale_launch<BF16>(M, N, y, ldy, rstd, bias, mask, s, y_f32)
                            : postscale_launch<FP16>(M, N, y, ldy, rstd, bias, mask, s, y_f32);
}

}  // namespace flashnorm::kernels::cuda::detail
