// The one-pass FP8 activation quantizer of docs/design.md's FP8 identity (sm_90a): for each row m
// of x, with v = x * G (G = gain, 1 + gain with gain_one_plus, or 1),
//   s_m = max_k |v_mk| / 448,   payload_mk = fp8_e4m3(v_mk / s_m)   (ties to even, saturated),
//   scale_m = s_m * rstd(x_m) with rstd_on_scale (FlashNorm: x is the raw residual stream, the
//             payload is the normalized row's up to rounding since max|rstd v| = rstd max|v|),
//             else s_m (x normalized already: the standard pipeline's quantization step);
// rstd(x) = 1 / sqrt(mean_k x_k^2 + eps), sum of squares in fp32. One read of x. The CPU
// reference: kernels/cpu/fp8.h fp8_quantize_row (the payload bit for bit; the same fp32 v, s and
// IEEE division) with kernels/cpu/reference.h row_rstd.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda {

// x: [M, K] bf16/fp16 with row stride ldx; gain: [K] in x's dtype or null; payload: [M, K]
// float8_e4m3fn bytes with row stride ldp; scale: [M] fp32. K % 8 == 0, K <= 32768; x, gain and
// payload 16-byte aligned, ldx and ldp multiples of 8 (the payload is written 8 bytes at a time).
struct Fp8QuantArgs {
  DType dtype = DType::kBF16;
  int64_t M = 0, K = 0;
  const void* x = nullptr;
  int64_t ldx = 0;
  const void* gain = nullptr;
  bool gain_one_plus = false;
  bool rstd_on_scale = true;
  float eps = 1e-6f;
  uint8_t* payload = nullptr;
  int64_t ldp = 0;
  float* scale = nullptr;
  bool pdl = false;  // programmatic dependent launch (sm_90), as RmsNormArgs::pdl
};
// Errors: kInvalidArgument naming the field; kCudaError for a failed launch.
Status fp8_quantize(const Fp8QuantArgs& a, cudaStream_t stream);

}  // namespace flashnorm::kernels::cuda
