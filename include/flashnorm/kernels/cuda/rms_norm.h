// RMSNorm and the per-row rstd of the FlashNorm CUDA kernels (sm_90a): the baseline of the unfused
// path and the reduction the two-stream linear runs beside its GEMM.
//   rstd(x_m) = 1 / sqrt(mean_k(x_mk^2) + eps)   (eps inside the square root: HF Llama/Gemma/Qwen)
// Layouts: row-major, row m of x at x + m * ldx (elements); K % 8 == 0, row strides multiples of 8,
// pointers 16-byte aligned. Arithmetic in fp32; inputs and outputs bf16 or fp16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda {

// RMSNorm (FlashInfer/vLLM-style: one CTA per row, 16-byte loads, fp32 sum of squares).
//   h = residual ? round(x + residual) : x          (h written to residual_out when residual !=
//   null) y = round(h * rstd(h) * G),  G = gain ? (gain_one_plus ? 1 + gain : gain) : 1
// Shapes: x, residual, residual_out, y: [M, K] with row strides ldx, ld_res, ld_res_out, ldy;
// gain: [K]. K <= 32768 and K % 8 == 0.
struct RmsNormArgs {
  DType dtype = DType::kBF16;
  int64_t M = 0, K = 0;
  const void* x = nullptr;
  int64_t ldx = 0;
  const void* gain = nullptr;      // nullable: no gain
  bool gain_one_plus = false;      // Gemma's (1 + w) convention
  const void* residual = nullptr;  // nullable: no fused residual add
  int64_t ld_res = 0;
  void* residual_out = nullptr;  // required when residual != null (may equal residual)
  int64_t ld_res_out = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  float eps = 1e-6f;
  // Launch with programmatic dependent launch: the kernel may start before the preceding kernel on
  // the stream has finished and waits for it before its first memory access (sm_90).
  bool pdl = false;
};
// Errors: kInvalidArgument naming the field; kCudaError for a failed launch.
Status rms_norm(const RmsNormArgs& a, cudaStream_t stream);

// rstd[m] = 1 / sqrt(mean_k x[m, k]^2 + eps) in fp32, one warp per row. x: [M, K] dtype with row
// stride ldx; rstd: [M] fp32 device.
Status row_rstd(DType dtype, int64_t M, int64_t K, const void* x, int64_t ldx, float eps,
                float* rstd, cudaStream_t stream);

}  // namespace flashnorm::kernels::cuda
