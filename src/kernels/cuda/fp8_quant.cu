// The one-pass FP8 activation quantizer (fp8_quant.h): one CTA per row, VPT 16-byte vectors of x
// per thread held in registers, the sum of squares of x and the largest |x * G| reduced together,
// then the payload written from the registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <fmt/format.h>

#include <algorithm>

#include "check.h"
#include "elements.cuh"
#include "flashnorm/kernels/cuda/fp8_quant.h"
#include "launch.h"
#include "pdl.cuh"
#include "ptx.cuh"
#include "reduce.cuh"

namespace flashnorm::kernels::cuda {
namespace {

using namespace detail;  // NOLINT: the element, reduction and launch helpers

template <class E, int VPT>
__global__ void fp8_quant_kernel(Fp8QuantArgs a) {
  pdl_begin();
  using T = typename E::T;
  const int64_t row = blockIdx.x;
  const int nvec = static_cast<int>(a.K / 8);
  const T* x = static_cast<const T*>(a.x) + row * a.ldx;
  const T* g = static_cast<const T*>(a.gain);
  float v[VPT][8];
  float ss = 0.f, amax = 0.f;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c < nvec) {
      float f[8];
      unpack8<E>(ld_nc(x + c * 8), f);
      float fg[8];
      if (g) unpack8<E>(ld_nc(g + c * 8), fg);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        ss += f[j] * f[j];
        v[i][j] = g ? f[j] * (a.gain_one_plus ? 1.f + fg[j] : fg[j]) : f[j];
        amax = fmaxf(amax, fabsf(v[i][j]));
      }
    }
  }
  __shared__ float red_ss[32], red_max[32];
  ss = warp_sum(ss);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) red_ss[threadIdx.x >> 5] = ss, red_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    const bool live = threadIdx.x < (blockDim.x >> 5);
    float t = warp_sum(live ? red_ss[threadIdx.x] : 0.f);
    float m = live ? red_max[threadIdx.x] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) red_ss[0] = t, red_max[0] = m;
  }
  __syncthreads();
  const float s = red_max[0] / 448.0f;
  if (threadIdx.x == 0) {
    const float rstd = 1.f / sqrtf(red_ss[0] / static_cast<float>(a.K) + a.eps);
    a.scale[row] = a.rstd_on_scale ? s * rstd : s;
  }
  uint8_t* p = a.payload + row * a.ldp;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c < nvec) {
      uint2 out;
      uint8_t* b = reinterpret_cast<uint8_t*>(&out);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        b[j] = s > 0.f ? static_cast<uint8_t>(
                             __nv_cvt_float_to_fp8(v[i][j] / s, __NV_SATFINITE, __NV_E4M3))
                       : 0;
      }
      *reinterpret_cast<uint2*>(p + c * 8) = out;
    }
  }
}

template <class E>
cudaError_t dispatch(const Fp8QuantArgs& a, cudaStream_t s) {
  const int nvec = static_cast<int>(a.K / 8);
  const int threads = std::min(1024, std::max(32, (nvec + 31) / 32 * 32));
  const int vpt = (nvec + threads - 1) / threads;
  const dim3 grid(static_cast<unsigned>(a.M));
  if (vpt <= 1) return launch_ex(fp8_quant_kernel<E, 1>, grid, threads, 0, s, a.pdl, a);
  if (vpt <= 2) return launch_ex(fp8_quant_kernel<E, 2>, grid, threads, 0, s, a.pdl, a);
  if (vpt <= 4) return launch_ex(fp8_quant_kernel<E, 4>, grid, threads, 0, s, a.pdl, a);
  return cudaErrorInvalidValue;
}

}  // namespace

Status fp8_quantize(const Fp8QuantArgs& a, cudaStream_t stream) {
  using detail::invalid;
  if (a.dtype != DType::kBF16 && a.dtype != DType::kFP16)
    return invalid("fp8_quantize: dtype must be bf16 or fp16");
  if (a.M < 1 || a.M > INT32_MAX || a.K < 8 || a.K % 8 || a.K > 32768)
    return invalid(fmt::format(
        "fp8_quantize: M={} must be >= 1 and K={} a multiple of 8 in 8..32768", a.M, a.K));
  if (!a.x || !a.payload || !a.scale) return invalid("fp8_quantize: x, payload, scale are null");
  if (a.ldx < a.K || a.ldx % 8 || a.ldp < a.K || a.ldp % 8)
    return invalid(fmt::format("fp8_quantize: ldx={} and ldp={} must be >= K and multiples of 8",
                               a.ldx, a.ldp));
  for (const void* p : {a.x, a.gain, static_cast<const void*>(a.payload)})
    if (!detail::aligned16(p))
      return invalid("fp8_quantize: x, gain, payload must be 16-byte aligned");
  if (!(a.eps >= 0.f)) return invalid("fp8_quantize: eps must be >= 0");
  const cudaError_t e =
      a.dtype == DType::kBF16 ? dispatch<BF16>(a, stream) : dispatch<FP16>(a, stream);
  return detail::cuda_status(e, "fp8_quantize launch");
}

}  // namespace flashnorm::kernels::cuda
